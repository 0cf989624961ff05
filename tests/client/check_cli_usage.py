#!/usr/bin/env python3
"""check_cli_usage.py - the CLI's errors before any node is asked anything (no node runs here):
a usage error is ONE line on stderr naming what is wrong (the missing, conflicting, unknown or
out-of-range option: "OPT wants LO..HI, got V"), ending in the hint "(see kvpack CMD --help)",
nothing on stdout, exit 2 -- never the whole help, never several options lumped in one line; a
.kvd that cannot be read is one line under the command's own name with the reason (missing file,
short header, truncated), exit 1; every --node item is HOST:PORT with a port
in 1..65535, checked while the options are read; an unknown codec is refused with the codec names
by every command that takes --codec; `kvpack bench` names its benchmarks. And the help texts say
what the commands do: put/get/ls/rm/repair explain --timeout-ms and its default (as the README's
CLI reference rows do), get and ls do not offer --replicas, nodes says a down node prints `down`,
and .ci/quickstart --help prints its header comment only.
usage: check_cli_usage.py KVPACK KVPACKD"""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

KVPACK, KVPACKD = sys.argv[1], sys.argv[2]
check = kvptest.check
tmp = tempfile.mkdtemp(prefix="kvp_usage_")
env = dict(os.environ, KVP_PROGRESS="0")
NODE = "127.0.0.1:1"  # nothing listens there; none of these commands gets as far as asking it
CODECS = "(fp16|kivi|kivi128|oscar|kvarn|naive2"


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def one_line(argv, rc_want, *words):
    """argv exits rc_want with exactly one line on stderr holding every word, nothing on stdout."""
    rc, out, err = run(argv)
    lines = err.splitlines()
    ok = rc == rc_want and len(lines) == 1 and out == "" and all(w in err for w in words)
    check(ok, f"{' '.join(argv[1:])}: want exit {rc_want} and one line with {words}; got exit "
              f"{rc}, {len(lines)} lines: {err[:300]!r}")
    return err


def usage_error(cmd, args, *words):
    """`kvpack CMD ARGS` is a usage error: one line, exit 2, the hint to CMD's --help."""
    return one_line([KVPACK, *cmd.split(), *args], 2, f"kvpack {cmd}: ",
                    f"(see kvpack {cmd} --help)", *words)


# 1. an unknown codec: the codec names, the one message of every command taking --codec; the
#    other put checks each say which argument is wrong (they used to share one line)
usage_error("put", ["--node", NODE, "--session", "x", "--kvd", "a.kvd", "--codec", "frob"],
            "kvpack put: unknown codec 'frob' " + CODECS + ")")
for cmd, extra in [("get", ["--node", NODE, "--session", "x", "--out", os.path.join(tmp, "o.kvd")]),
                   ("demo", []), ("loadtest", []),
                   ("bench stream", []), ("bench transfer", [])]:
    usage_error(cmd, [*extra, "--codec", "frob"],
                f"kvpack {cmd}: unknown codec 'frob' " + CODECS + ")")
for cmd, extra in [("eval", ["--synthetic"]), ("bench codec", []), ("bench attn", []),
                   ("plan", ["--model", "llama-3.1-8b", "--tokens", "100"])]:
    usage_error(cmd, [*extra, "--codec", "frob"],
                f"kvpack {cmd}: unknown codec 'frob' " + CODECS + "|all)")
put = ["--node", NODE, "--session", "x", "--kvd", "a.kvd"]
usage_error("put", [*put, "--page-tokens", "5000"], "--page-tokens wants 1..4096, got 5000")
usage_error("put", ["--node", NODE, "--session", "s" * 200, "--kvd", "a.kvd"],
            "--session wants 1..127 bytes, got 200")

# 2. --timeout-ms explained, with its default, in the help and in the README's CLI reference
readme = open(os.path.join(kvptest.REPO, "README.md")).read().splitlines()
for cmd in ["put", "get", "ls", "rm", "repair"]:
    rc, out, _ = run([KVPACK, cmd, "--help"])
    check(rc == 0 and "--timeout-ms MS per-node request deadline (default 10000)" in out,
          f"kvpack {cmd} --help does not explain --timeout-ms")
    row = [line for line in readme if line.startswith(f"| `kvpack {cmd} ")]
    check(len(row) == 1 and "[--timeout-ms 10000]" in row[0] and "request deadline" in row[0],
          f"README's row of kvpack {cmd} does not give --timeout-ms and its default")

# 3. get and ls take no --replicas (they ignored it) and do not offer it
for cmd, args in [("get", ["--session", "x", "--out", os.path.join(tmp, "o.kvd")]), ("ls", [])]:
    usage_error(cmd, ["--node", NODE, *args, "--replicas", "1"], "unknown option '--replicas'")
    rc, out, _ = run([KVPACK, cmd, "--help"])
    check(rc == 0 and "--replicas N" not in out, f"kvpack {cmd} --help offers --replicas")
for cmd in ["put", "rm"]:
    rc, out, _ = run([KVPACK, cmd, "--help"])
    check(rc == 0 and "--replicas N" in out, f"kvpack {cmd} --help lost --replicas")

# 4. what is wrong, in one line, never the whole help
usage_error("put", ["--node", NODE, "--session", "x"], "--kvd FILE.kvd is required")
usage_error("put", ["--node", NODE, "--kvd", "a.kvd"], "--session SID is required")
usage_error("put", ["--session", "x", "--kvd", "a.kvd"], "which nodes?", "--node", "--etcd")
usage_error("put", [*put, "--etcd", "127.0.0.1:2379"], "--node LIST or --etcd URL, not both")
usage_error("put", [*put, "--ns", "1"], "unknown option '--ns'")
usage_error("get", ["--node", NODE, "--session", "x"], "--out FILE.kvd is required")
usage_error("ls", ["--node", NODE, "--session", "x"], "unknown option '--session'")
usage_error("ls", ["--node", NODE, "--page", "5000"], "--page wants 1..4096, got 5000")
usage_error("ls", ["--etcd-prefix", "/p/"], "--etcd-prefix needs --etcd URL")
usage_error("rm", ["--node", NODE], "--session SID is required")
usage_error("rm", ["--node", NODE, "--session", "x", "--replicas", "2"],
            "--replicas 2 needs at least 2 nodes")
usage_error("repair", ["--node", NODE], "--replicas N is required")
usage_error("repair", ["--replicas", "1"], "which nodes?")
usage_error("repair", ["--node", NODE, "--replicas", "1", "--session", "x"],
            "unknown option '--session'")
usage_error("repair", ["--node", NODE, "--etcd", "127.0.0.1:2379", "--replicas", "1", "--watch"],
            "not both")
usage_error("nodes", [], "--etcd URL is required")
usage_error("nodes", ["--etcd", "127.0.0.1:2379", "--timeout-ms", "700000"],
            "--timeout-ms wants 1..600000")
for cmd in ["stat", "scrub"]:
    usage_error(cmd, [], "which nodes?")
    usage_error(cmd, ["--node", NODE, "--session", "x"], "unknown option '--session'")
usage_error("eval", [], "give exactly one of --synthetic or --input")
usage_error("model", [], "needs --model")
for cmd in ["put", "ls", "stat", "bench codec", "bench attn"]:
    usage_error(cmd, ["--no-such-option"], "unknown option '--no-such-option'")
for daemon in [[KVPACKD], [KVPACK, "serve"]]:
    name = " ".join(["kvpackd"] if len(daemon) == 1 else ["kvpack", "serve"])
    one_line([*daemon, "--bogus"], 2, f"{name}: unknown option '--bogus' (see {name} --help)")
    # a --data-dir that is a file: said at once (RocksDB said so after two false free-space warnings)
    one_line([*daemon, "--data-dir", os.path.abspath(__file__)], 2,
             f"{name}: --data-dir '{os.path.abspath(__file__)}' is not a directory")

# 4b. each range or conflict check names its own option, with the allowed range and the value
#     given (they used to share lines such as "bad options (see --help)" or "geometry out of
#     range", or blame --replicas for a bad --tokens)
model = ["--model", os.path.join(tmp, "absent.bin")]  # never loaded: the options fail first
plan = ["--model", "qwen3-8b", "--tokens", "10"]
for cmd, args, want in [
        ("demo", ["--heads", "0"], "--heads wants 1..256, got 0"),
        ("demo", ["--head-dim", "2000"], "--head-dim wants 1..1024, got 2000"),
        ("demo", ["--layers", "0"], "--layers wants 1..1024, got 0"),
        ("bench stream", ["--tokens", "0"], "--tokens wants 128..16777216, got 0"),
        ("bench stream", ["--replicas", "5"], "--replicas wants 1..4, got 5"),
        ("bench stream", ["--decode-node"], "--decode-node needs --replicas"),
        ("bench transfer", ["--heads", "0"], "--heads wants 1..256, got 0"),
        ("bench transfer", ["--batch-bytes", "100"], "--batch-bytes wants 4096 or more, got 100"),
        ("bench transfer", ["--err-mode", "x"], "--err-mode wants peer or none, got 'x'"),
        ("eval", ["--synthetic", "--kvarn-iters", "65"], "--kvarn-iters wants 1..64, got 65"),
        ("eval", ["--synthetic", "--heads", "0"], "--heads wants 1..256, got 0"),
        ("eval", ["--synthetic", "--dequant-out", os.path.join(tmp, "d.kvd")],
         "--dequant-out needs a single --codec"),
        ("bench codec", ["--rounds", "0"], "--rounds wants 1..1000, got 0"),
        ("bench codec", ["--threads", "65"], "--threads wants 1..64, got 65"),
        ("bench codec", ["--window-s", "0"], "--window-s wants above 0 and at most 60, got 0"),
        ("bench attn", ["--q-heads", "0"], "--q-heads wants 1..65536, got 0"),
        ("bench attn", ["--q-heads", "12"], "--q-heads 12 is not a multiple of --heads 8"),
        ("bench attn", ["--rounds", "65"], "--rounds wants 1..64, got 65"),
        ("bench attn", ["--codec", "oscar", "--head-dim", "100"],
         "oscar does not support this geometry"),
        ("bench store", ["--heads", "0"], "--heads wants 1..256, got 0"),
        ("bench store", ["--tokens", "5000"], "--tokens wants 1..4096, got 5000"),
        ("bench store", ["--index-pages", "10"], "--index-pages wants 64..67108864, got 10"),
        ("bench node", ["--clients", "0"], "--clients wants 1..64, got 0"),
        ("bench node", ["--page-tokens", "2000"], "--page-tokens wants 1..1024, got 2000"),
        ("loadtest", ["--heads", "0"], "--heads wants 1..256, got 0"),
        ("loadtest", ["--page-tokens", "100"], "--page-tokens 100 does not divide 512"),
        ("loadtest", ["--users", "2"], "--rounds is missing"),
        # a given 0 (it replayed the whole trace, exit 0), --settle without --watch (taken and
        # ignored), a node binary that cannot run (the demo failed late, its directory left)
        ("loadtest", ["--users", "0"], "--users is missing or 0"),
        ("repair", ["--node", NODE, "--replicas", "1", "--every", "5"],
         "--every goes with --watch only"),
        ("demo", ["--kvpackd", "/nonexistent/kvpackd"], "--kvpackd '/nonexistent/kvpackd'"),
        ("loadtest", ["--clients", "65"], "--clients wants 1..64, got 65"),
        ("loadtest", ["--replicas", "2"], "--replicas 2 needs at least 2 nodes"),
        ("model", [*model, "--generate", "x", "--node", f"{NODE},127.0.0.1:2"],
         "--node takes one HOST:PORT"),
        ("model", [*model, "--sample", "50", "--temp", "1e-46"], ("--temp wants ", "got 1e-46")),
        ("model", [*model, "--sample", "1"], "--sample wants 2..1048576, got 1"),
        ("model", [*model, "--text", "t", "--tokens", "1"], "--tokens wants 2..1048576, got 1"),
        ("model", [*model, "--text", "t", "--attn", "fast"], "--attn wants decode or fused"),
        ("model", [*model, "--text", "t", "--ref", "bf16"], "--ref wants fp16 or fp32, got 'bf16'"),
        ("model", [*model, "--generate", "x", "--node", NODE, "--codec", "kivi,oscar"],
         "--node takes one codec"),
        ("plan", ["--layers", "2", "--kv-heads", "300", "--head-dim", "128", "--tokens", "10"],
         "--kv-heads wants 1..256, got 300"),
        ("plan", [*plan, "--page-tokens", "8192"], "--page-tokens wants 1..4096, got 8192"),
        ("plan", [*plan, "--fill", "1.5"], "--fill wants above 0 and at most 1, got 1.5"),
        ("plan", [*plan, "--sink-tokens", "100"],
         "--sink-tokens 100 is not a multiple of --page-tokens 128"),
        ("plan", ["--model", "gpt-9", "--tokens", "10"], "unknown model 'gpt-9'"),
        ("get", ["--node", NODE, "--session", "x", "--out", tmp],
         f"cannot write --out {tmp}: it is a directory"),
        ("repair", ["--node", NODE, "--replicas", "1", "--watch", "--every", "0"],
         "--every wants 1..31536000, got 0"),
        ("stat", ["--node", NODE, "--timeout-ms", "5000000000"],
         "--timeout-ms wants 1..4294967295, got 5000000000")]:
    usage_error(cmd, args, *([want] if isinstance(want, str) else want))

# 4b. the option helpers' own errors name the command too (they said "kvpack: option ..."), and
#     a bad --ns is a usage error before any node is asked (it was exit 1 after connecting)
usage_error("put", ["--node"], "--node needs a value")
usage_error("bench codec", ["--mib", "x"], "--mib expects a whole number", "got 'x'")
usage_error("eval", ["--synthetic", "--queries", "0"], "--queries wants 1 or more, got 0")
usage_error("bench codec", ["--window-s", "nan"], "--window-s expects a finite number")
usage_error("get", ["--node", NODE, "--session", "x", "--ns", "zz", "--out",
                    os.path.join(tmp, "o.kvd")], "--ns wants a hex namespace", "got 'zz'")
usage_error("rm", ["--node", NODE, "--session", "x", "--ns", "-1"], "--ns wants a hex namespace")
# a bad error mode from the environment names the variable, not an option never given
env["KVP_UCX_ERR_MODE"] = "bogus"
usage_error("bench transfer", [], "KVP_UCX_ERR_MODE wants peer or none, got 'bogus'")
del env["KVP_UCX_ERR_MODE"]

# 5. a .kvd that cannot be read: one line under the command's name with the reason
missing = os.path.join(tmp, "missing.kvd")
one_line([KVPACK, "put", "--node", NODE, "--session", "x", "--kvd", missing], 1,
         f"kvpack put: cannot open {missing}: No such file or directory; nothing was sent")
garbage = os.path.join(tmp, "garbage.kvd")
open(garbage, "wb").write(b"garbage")
one_line([KVPACK, "put", "--node", NODE, "--session", "x", "--kvd", garbage], 1,
         f"kvpack put: {garbage}: ", "shorter than the 24-byte kvd header", "nothing was sent")
one_line([KVPACK, "eval", "--input", garbage], 1, f"kvpack eval: {garbage}: ",
         "shorter than the 24-byte kvd header")
short = os.path.join(tmp, "short.kvd")  # a good header, the data cut short
open(short, "wb").write(struct.pack("<6I", 0x3144564B, 1, 1, 4, 2, 8) + bytes(100))
one_line([KVPACK, "put", "--node", NODE, "--session", "x", "--kvd", short], 1,
         f"kvpack put: {short}: ", "needs 536 bytes, the file has 124", "nothing was sent")
one_line([KVPACK, "put", "--node", NODE, "--session", "x", "--kvd", tmp], 1,
         f"kvpack put: cannot open {tmp}: Is a directory")

# 5b. a codec that cannot take the geometry: the usage error with the codec's rule, before any
#     work (demo failed in its prefill child after starting a node, the benches after set-up,
#     eval with a log line and a second one)
rule = "it takes head_dim below 32 or a multiple of 32"
odd = "kivi does not take pages of heads 8, head_dim 100, 128 tokens"
for cmd, extra in [("demo", []), ("bench transfer", []), ("bench stream", []),
                   ("eval", ["--synthetic"]),
                   ("loadtest", ["--local-nodes", "1", "--users", "1", "--rounds", "1",
                                 "--turn-tokens", "64", "--heads", "8"])]:
    usage_error(cmd, [*extra, "--codec", "kivi", "--head-dim", "100"], odd, rule)
dump100 = os.path.join(tmp, "d100.kvd")  # a dump of head_dim 100: the file names the geometry
kvptest.write_kvd(dump100, 1, 4, 1, 100, [0.5] * (2 * 4 * 100))
usage_error("put", ["--node", NODE, "--session", "x", "--kvd", dump100, "--codec", "kivi"],
            "kivi does not take pages of heads 1, head_dim 100, 128 tokens", rule)
usage_error("eval", ["--input", dump100, "--codec", "oscar"],
            "oscar does not take pages of heads 1, head_dim 100, 128 tokens")
# --codec all on a geometry some codecs cannot take: those are skipped, each said on stderr, the
# others reported, exit 0 (it exited 1 after a full report)
rc, out, err = run([KVPACK, "eval", "--synthetic", "--layers", "1", "--tokens", "64", "--heads",
                    "2", "--head-dim", "48", "--codec", "all", "--json"])
got = [c["codec"] for c in json.loads(out)["codecs"]] if rc == 0 else []
check(rc == 0 and "fp16" in got and "kivi128" in got and "oscar" not in got and
      "kvpack eval: oscar skipped: it does not take pages of heads 2, head_dim 48" in err,
      f"eval --codec all, head_dim 48: exit {rc}, codecs {got}, {err[-300:]!r}")

# 6. every --node item HOST:PORT, port 1..65535, checked with the options
for bad, why in [("127.0.0.1", "it has no :PORT"), ("127.0.0.1:0", "1..65535"),
                 ("127.0.0.1:70000", "1..65535"), ("127.0.0.1:8x", "1..65535"),
                 (":80", "it has no HOST")]:
    for cmd, args in [("put", ["--session", "x", "--kvd", missing]),
                      ("get", ["--session", "x", "--out", os.path.join(tmp, "o.kvd")]),
                      ("ls", []), ("rm", ["--session", "x"]), ("repair", ["--replicas", "1"]),
                      ("stat", []), ("scrub", [])]:
        usage_error(cmd, ["--node", bad, *args], f"--node '{bad}' is not HOST:PORT", why)
usage_error("ls", ["--node", f"{NODE},127.0.0.1"], "--node '127.0.0.1' is not HOST:PORT")
usage_error("ls", ["--node", f"{NODE},,127.0.0.1:2"], "has an empty item")
usage_error("ls", ["--node", f"{NODE}, {NODE}"], f"--node lists {NODE} twice")
# one node under two names: it would count as two copies (and repair drop one as surplus)
usage_error("ls", ["--node", "127.0.0.1:1,localhost:1"],
            "--node lists 127.0.0.1:1 and localhost:1: one node (the same port and address) twice")
usage_error("loadtest", ["--node", "127.0.0.1"], "--node '127.0.0.1' is not HOST:PORT")

# 7. odd values refused before any work: a session id out of 1..127 bytes (get and rm used to ask
#    the nodes and say "no session"), --ns that is not 1..16 hex digits (a sign, a blank, an
#    overflow were taken), an empty output path (it failed after the work), --impl by name,
#    --sessions past the 1e15 cap, bench store's empty --dir, loadtest's budget and node binary
long_sid = "a" * 128
for cmd, args in [("get", ["--out", os.path.join(tmp, "o.kvd")]), ("rm", []),
                  ("put", ["--kvd", missing])]:
    for sid in ("", long_sid):
        usage_error(cmd, ["--node", NODE, "--session", sid, *args],
                    f"--session wants 1..127 bytes, got {len(sid)}")
for ns in ("ffffffffffffffffff", " a76ffc62625455ed", "+a76ffc62625455ed", "0x", "12g"):
    usage_error("get", ["--node", NODE, "--session", "x", "--ns", ns, "--out",
                        os.path.join(tmp, "o.kvd")], f"--ns wants a hex namespace", f"'{ns}'")
usage_error("get", ["--node", NODE, "--session", "x", "--out", ""], "--out wants a file name")
usage_error("eval", ["--synthetic", "--codec", "fp16", "--dequant-out", ""],
            "--dequant-out wants a file name")
usage_error("eval", ["--synthetic", "--impl", "nope"], "--impl wants ref or avx2, got 'nope'")
usage_error("plan", ["--layers", "2", "--kv-heads", "2", "--head-dim", "64", "--tokens", "1000", "--sessions",
                     "18446744073709551615"], "--sessions wants at most 1e15")
usage_error("bench store", ["--dir", ""], "--dir wants a directory")
usage_error("loadtest", ["--users", "1", "--rounds", "1", "--turn-tokens", "128",
                         "--dram-budget", "0"], "--dram-budget wants 1 or more, got 0")
usage_error("loadtest", ["--users", "1", "--rounds", "1", "--turn-tokens", "128", "--kvpackd",
                         os.path.join(tmp, "nope")], "--kvpackd", "No such file or directory")

# 7b. where a .kvd is written (eval --dequant-out, as get --out and model --dump-kv): through a
#     symlink its target is replaced and the link stays; a device is written in place (a device
#     used to be replaced by a regular file, /dev/full included)
small = ["eval", "--synthetic", "--codec", "kivi", "--layers", "1", "--tokens", "256",
         "--heads", "2", "--head-dim", "64", "--queries", "4", "--dequant-out"]
target, link = os.path.join(tmp, "target.kvd"), os.path.join(tmp, "link.kvd")
open(target, "wb").write(b"old")
os.symlink(target, link)
rc, _, err = run([KVPACK, *small, link])
check(rc == 0 and os.path.islink(link) and os.path.getsize(target) == 24 + 2 * 256 * 2 * 64 * 4,
      f"--dequant-out through a symlink: {rc} {err!r}, link kept {os.path.islink(link)}")
rc, _, err = run([KVPACK, *small, "/dev/null"])
check(rc == 0 and os.path.exists("/dev/null") and not os.path.isfile("/dev/null"),
      f"--dequant-out /dev/null: {rc} {err!r}")
fifo = os.path.join(tmp, "pipe.kvd")
os.mkfifo(fifo)
with open(os.path.join(tmp, "from_pipe"), "wb") as sink:  # a file: a pipe back here would fill
    reader = subprocess.Popen(["cat", fifo], stdout=sink)
    rc, _, err = run([KVPACK, *small, fifo])
    reader.wait(timeout=60)
got = open(os.path.join(tmp, "from_pipe"), "rb").read()
check(rc == 0 and len(got) == 24 + 2 * 256 * 2 * 64 * 4 and got[:4] == b"KVD1",
      f"--dequant-out to a FIFO: {rc} {err!r}, {len(got)} bytes read")

# 8. bench: which benchmarks there are
bench = "(codec|store|node|transfer|stream|attn)"
one_line([KVPACK, "bench", "frob"], 2, f"kvpack bench: unknown benchmark 'frob' {bench}")
one_line([KVPACK, "bench"], 2, f"kvpack bench: which benchmark? {bench}")
one_line([KVPACK, "frob"], 2, "kvpack: unknown command 'frob' (demo|", "|bench)")
one_line([KVPACK], 2, "kvpack: which command? (demo|")

# 9. quickstart --help: the header comment, not the first line of code after it
rc, out, _ = run(["bash", os.path.join(kvptest.REPO, ".ci", "quickstart"), "--help"])
check(rc == 0 and out.startswith("quickstart - ") and "set -e" not in out and
      out.rstrip().endswith("ctest over the whole suite"), f".ci/quickstart --help: {out!r}")

# 10. nodes --help says what a dead node's line says: down
rc, out, _ = run([KVPACK, "nodes", "--help"])
check(rc == 0 and "says down" in out and "says unreachable" not in out,
      "kvpack nodes --help does not say a killed node prints down")

if kvptest.FAILS:
    print(f"check_cli_usage: {len(kvptest.FAILS)} checks failed")
    sys.exit(1)
print("check_cli_usage: all checks passed")
