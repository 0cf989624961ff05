#!/usr/bin/env python3
"""check_session_cli.py - `kvpack put / get / ls / rm` against a real kvpackd (write-through, so
sessions are on disk): an fp16 session round-trips bit-exactly (tail included); a kivi session
comes back exactly as `kvpack eval --dequant-out` dequantizes it, and within kivi's error with a
tail; ls lists both (paged with --page); two sessions put over the same --tokens share pages and
rm of one leaves the other intact; rm then get is a clear error; a delete survives a node restart;
a get says whether the node read the session back from its SSD tier (pages, bytes) or had it in DRAM;
a malformed .kvd, a .kvd holding a value no codec stores (named by its place), a directory given
as a file, a wrong --codec and a dead node each give exit 1 and lose nothing (an output file that
cannot be written: exit 2 before any work); a node of
the default --durability spill keeps its DRAM-only sessions across a SIGTERM (spilled as it stops),
not across a SIGKILL. `get --out /dev/stdout` into a pipe carries the .kvd alone; get keeps an
existing file's mode, follows a dangling symlink, and a get ended by SIGTERM while it writes
(held in its fsync by gate_preload.so) leaves the old file and no stray file. ls prints a control
byte in a session id escaped; put --tokens reads a pipe; stat --json of a dead node is an object.
usage: check_session_cli.py KVPACK KVPACKD GATE_PRELOAD_SO"""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack, kvpackd, gate_so = sys.argv[1], sys.argv[2], sys.argv[3]
tmp = tempfile.mkdtemp(prefix="kvp_cli_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
node = {"proc": None, "addr": None}


def start_node(data="data", durability=("--durability", "write-through")):
    node["proc"], node["addr"] = kvptest.start_kvpackd(
        kvpackd, os.path.join(tmp, "ready"),
        ["--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, data), "--dram-budget", "64M",
         *durability], env=env)


def stop_node():
    node["proc"].terminate()
    node["proc"].wait(timeout=60)


def kv(cmd, *args, node_addr=None):
    """Run `kvpack CMD --node ADDR ARGS`; returns (exit status, stdout, stderr)."""
    argv = [kvpack, cmd, "--node", node_addr or node["addr"], *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    if p.stderr:
        sys.stderr.write(p.stderr)
    return p.returncode, p.stdout, p.stderr


def write_kvd(path, L, T, H, D, seed):
    """Values k/64 for integers k in [-256, 256]: exact in fp16, so fp16 pages lose nothing."""
    rnd = random.Random(seed)
    n = L * T * H * D
    vals = [rnd.randint(-256, 256) / 64.0 for _ in range(2 * n)]
    kvptest.write_kvd(path, L, T, H, D, vals)
    return vals


def read_kvd(path):
    data = open(path, "rb").read()
    L, T, H, D = struct.unpack_from("<4I", data, 8)
    return (L, T, H, D), list(struct.unpack_from(f"<{2 * L * T * H * D}f", data, 24))


def rel_err(x_hat, x):
    num = sum((a - b) ** 2 for a, b in zip(x_hat, x))
    den = sum(b * b for b in x)
    return math.sqrt(num / den)


def ls_json(*args):
    rc, out, _ = kv("ls", "--json", *args)
    check(rc == 0, f"ls exited {rc}")
    return json.loads(out) if rc == 0 else {"sessions": [], "count": 0}


def p(name):
    return os.path.join(tmp, name)


try:
    start_node()
    L, H, D, P = 2, 2, 64, 128
    # fp16 with a tail: bit-exact
    write_kvd(p("a.kvd"), L, 300, H, D, 1)
    rc, out, _ = kv("put", "--session", "f16", "--kvd", p("a.kvd"), "--codec", "fp16", "--json")
    check(rc == 0, f"put fp16 exited {rc}")
    put = json.loads(out) if rc == 0 else {}
    check(put.get("pages") == 3 * L and put.get("tail_tokens") == 300 - 2 * P, f"put fp16: {put}")
    rc, _, _ = kv("get", "--session", "f16", "--out", p("a_back.kvd"))
    check(rc == 0 and open(p("a.kvd"), "rb").read() == open(p("a_back.kvd"), "rb").read(),
          "fp16 put -> get is not bit-exact")

    # --out /dev/stdout into a pipe: the stream holds the .kvd alone, the report goes to stderr
    for extra in ([], ["--json"]):
        pr = subprocess.run([kvpack, "get", "--node", node["addr"], "--session", "f16", "--out",
                             "/dev/stdout", *extra], capture_output=True, env=env, timeout=120)
        check(pr.returncode == 0 and pr.stdout == open(p("a.kvd"), "rb").read() and
              b"f16" in pr.stderr, f"get {extra} --out /dev/stdout: exit {pr.returncode}, "
              f"{len(pr.stdout)} bytes on stdout, stderr {pr.stderr[-200:]!r}")
    # an existing file keeps its mode; a dangling symlink gets its target created, the link stays
    with open(p("priv.kvd"), "wb") as f:
        f.write(b"old")
    os.chmod(p("priv.kvd"), 0o600)
    os.symlink("made_by_get.kvd", p("dangling.kvd"))
    rc, _, _ = kv("get", "--session", "f16", "--out", p("priv.kvd"))
    rc2, _, _ = kv("get", "--session", "f16", "--out", p("dangling.kvd"))
    check(rc == 0 and os.stat(p("priv.kvd")).st_mode & 0o777 == 0o600 and
          open(p("priv.kvd"), "rb").read() == open(p("a.kvd"), "rb").read(),
          f"get over a 0600 file: exit {rc}, mode {oct(os.stat(p('priv.kvd')).st_mode)}")
    check(rc2 == 0 and os.path.islink(p("dangling.kvd")) and
          open(p("made_by_get.kvd"), "rb").read() == open(p("a.kvd"), "rb").read(),
          f"get through a dangling symlink: exit {rc2}, link kept {os.path.islink(p('dangling.kvd'))}")
    # a get interrupted while it writes leaves the old file and no stray file beside it
    gate = p("fsync_gate")
    with open(p("priv.kvd"), "wb") as f:
        f.write(b"the old file")
    slow = subprocess.Popen([kvpack, "get", "--node", node["addr"], "--session", "f16", "--out",
                             p("priv.kvd")],
                            env=dict(env, LD_PRELOAD=gate_so, KVP_TEST_FSYNC_GATE=gate),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):  # until it waits in the fsync of its file beside the target
        if [n for n in os.listdir(tmp) if n.startswith("fsync_gate.waiting")] or \
                slow.poll() is not None:
            break
        time.sleep(0.05)
    stray = [n for n in os.listdir(tmp) if n.startswith("priv.kvd.")]
    slow.terminate()
    slow.wait(timeout=60)
    check(len(stray) == 1 and slow.returncode == -15 and
          not [n for n in os.listdir(tmp) if n.startswith("priv.kvd.")]
          and open(p("priv.kvd"), "rb").read() == b"the old file",
          f"get ended by SIGTERM mid-write: {slow.returncode}, held {stray}, left {os.listdir(tmp)}")

    # kivi, T a multiple of P: exactly what eval dequantizes; with a tail: kivi's error + exact tail
    write_kvd(p("k.kvd"), L, 2 * P, H, D, 2)
    rc, out, _ = kv("put", "--session", "kv", "--kvd", p("k.kvd"), "--codec", "kivi", "--json")
    check(rc == 0 and json.loads(out)["ratio"] > 3.0, "put kivi failed or ratio <= 3")
    rc, _, _ = kv("get", "--session", "kv", "--codec", "kivi", "--out", p("k_back.kvd"))
    ev = subprocess.run([kvpack, "eval", "--input", p("k.kvd"), "--codec", "kivi",
                         "--dequant-out", p("k_eval.kvd")], capture_output=True, env=env)
    check(rc == 0 and ev.returncode == 0 and
          open(p("k_back.kvd"), "rb").read() == open(p("k_eval.kvd"), "rb").read(),
          "kivi get differs from kvpack eval --dequant-out")
    orig = write_kvd(p("t.kvd"), L, 2 * P + 50, H, D, 3)
    rc, _, _ = kv("put", "--session", "kvt", "--kvd", p("t.kvd"), "--codec", "kivi")
    rc2, _, _ = kv("get", "--session", "kvt", "--out", p("t_back.kvd"))
    check(rc == 0 and rc2 == 0, "kivi with a tail: put or get failed")
    if rc2 == 0:
        shape, back = read_kvd(p("t_back.kvd"))
        check(shape == (L, 2 * P + 50, H, D), f"kivi get shape {shape}")
        row = H * D
        sealed = [i for i in range(len(orig)) if (i // row) % (2 * P + 50) < 2 * P]
        tail = [i for i in range(len(orig)) if (i // row) % (2 * P + 50) >= 2 * P]
        err = rel_err([back[i] for i in sealed], [orig[i] for i in sealed])
        print(f"kivi sealed rel err {err:.4f}")
        check(0.01 < err < 0.5, f"kivi rel err {err} outside (0.01, 0.5)")
        check(all(back[i] == orig[i] for i in tail), "fp16 tail not exact")

    # wrong codec: refused, nothing written
    rc, _, err = kv("get", "--session", "kv", "--codec", "oscar", "--out", p("wrong.kvd"))
    check(rc == 1 and "kivi" in err and not os.path.exists(p("wrong.kvd")),
          "get --codec oscar of a kivi session not refused cleanly")

    # a session shorter than one page holds fp16 tail pages only: --model-id cannot find its
    # namespace (no codec page fixed its shape); the error says so and --ns gets it
    write_kvd(p("short.kvd"), L, 50, H, D, 4)
    rc, _, _ = kv("put", "--session", "short", "--kvd", p("short.kvd"), "--codec", "oscar")
    rc2, _, err = kv("get", "--session", "short", "--model-id", "kvd", "--codec", "oscar",
                     "--out", p("short_back.kvd"))
    check(rc == 0 and rc2 == 1 and "pass --ns" in err and not os.path.exists(p("short_back.kvd")),
          f"get --model-id of a tail-only session: exit {rc2}: {err}")
    ns_short = [s["ns"] for s in ls_json()["sessions"] if s["session"] == "short"]
    rc, _, _ = kv("get", "--session", "short", "--ns", ns_short[0] if ns_short else "0",
                  "--out", p("short_back.kvd"))
    check(rc == 0 and open(p("short_back.kvd"), "rb").read() == open(p("short.kvd"), "rb").read(),
          "get --ns of a tail-only session is not byte-identical")
    rc, _, _ = kv("rm", "--session", "short")

    # ls: every session, paged
    lj = ls_json("--page", "2")
    names = {s["session"]: s for s in lj["sessions"]}
    check(lj["count"] == 3 and lj["requests"] == 2 and not lj["truncated"], f"ls paging: {lj}")
    f16 = names.get("f16", {})
    check(f16.get("tokens") == 300 and f16.get("layers") == L and f16.get("codec") == "fp16" and
          f16.get("on_disk") is True and f16.get("ns") == put.get("ns") and
          f16.get("bytes") == put.get("bytes"), f"ls entry of f16: {f16}")
    check(names.get("kvt", {}).get("codec") == "kivi", "ls codec of kvt")
    lj = ls_json("--max", "2")
    check(lj["count"] == 2 and lj["truncated"] is True, f"ls --max 2: {lj}")

    # shared prefix: two sessions over one token file; rm of one keeps the other whole
    with open(p("ids.bin"), "wb") as f:
        f.write(struct.pack("<300I", *range(1000, 1300)))
    pages = []
    for sid in ("sh1", "sh2"):
        rc, _, _ = kv("put", "--session", sid, "--kvd", p("a.kvd"), "--codec", "kivi",
                      "--tokens", p("ids.bin"))
        check(rc == 0, f"put {sid} with --tokens failed")
        rc, out, _ = kv("stat", "--json")
        pages.append(json.loads(out)["dram_pages"] if rc == 0 else -1)
    check(pages[0] > 0 and pages[1] == pages[0], f"sh2 did not share sh1's pages: {pages}")
    rc, _, _ = kv("get", "--session", "sh2", "--out", p("sh2_before.kvd"))
    rc, out, _ = kv("rm", "--session", "sh1", "--json")
    check(rc == 0 and json.loads(out)["deleted"] is True, "rm sh1 failed")
    rc, _, err = kv("get", "--session", "sh1", "--out", p("sh1.kvd"))
    check(rc == 1 and "no session" in err and not os.path.exists(p("sh1.kvd")),
          "get after rm is not a clear error")
    rc, _, err = kv("rm", "--session", "sh1")
    check(rc == 1 and "no session" in err, "second rm is not a clear error")
    rc, _, _ = kv("get", "--session", "sh2", "--out", p("sh2_after.kvd"))
    check(rc == 0 and open(p("sh2_before.kvd"), "rb").read() ==
          open(p("sh2_after.kvd"), "rb").read(), "rm sh1 damaged sh2's shared pages")
    # --tokens from a pipe (no size to seek to): the same ids share sh2's pages; a control byte in
    # a session id is escaped in ls's text, so it cannot fake a row
    before = json.loads(kv("stat", "--json")[1])["dram_pages"]
    pr = subprocess.run([kvpack, "put", "--node", node["addr"], "--session", "evil\n0000 fake",
                         "--kvd", p("a.kvd"), "--codec", "kivi", "--tokens", "/dev/stdin"],
                        input=open(p("ids.bin"), "rb").read(), capture_output=True, env=env,
                        timeout=120)
    after = json.loads(kv("stat", "--json")[1])["dram_pages"]
    check(pr.returncode == 0 and after == before,
          f"put --tokens /dev/stdin: exit {pr.returncode} {pr.stderr[-200:]!r}, pages {before} -> {after}")
    rc, out, _ = kv("ls")
    check(rc == 0 and "evil\\x0a0000 fake" in out and not any(
        line.startswith("0000 fake") for line in out.splitlines()), f"ls text: {out!r}")
    check(kv("rm", "--session", "evil\n0000 fake")[0] == 0, "rm of the id with a newline")
    # without --tokens the chunk keys follow the dump's KV: a session put again with other KV
    # reads back as the new dump (its keys were the session id's, so the store kept the first
    # put's pages under them and served them with the second put's tail, no error); the same KV
    # under another session id shares the pages (no new page in DRAM)
    write_kvd(p("r1.kvd"), L, 300, H, D, 11)
    write_kvd(p("r2.kvd"), L, 300, H, D, 12)
    for sid, f in (("re", "r1.kvd"), ("re", "r2.kvd"), ("re_ref", "r2.kvd")):
        rc, _, _ = kv("put", "--session", sid, "--kvd", p(f), "--codec", "kivi")
        check(rc == 0, f"put {sid} {f} failed")
    rc, _, _ = kv("get", "--session", "re", "--out", p("re_back.kvd"))
    rc2, _, _ = kv("get", "--session", "re_ref", "--out", p("re_ref.kvd"))
    check(rc == 0 and rc2 == 0 and
          open(p("re_back.kvd"), "rb").read() == open(p("re_ref.kvd"), "rb").read(),
          "a session put again with other KV does not read back as the new dump")
    rc, out, _ = kv("stat", "--json")
    before = json.loads(out)["dram_pages"] if rc == 0 else -1
    rc, _, _ = kv("put", "--session", "re_twin", "--kvd", p("r2.kvd"), "--codec", "kivi")
    rc2, out, _ = kv("stat", "--json")
    after = json.loads(out)["dram_pages"] if rc2 == 0 else -2
    check(rc == 0 and after == before, f"the same KV under another id made pages: {before} -> {after}")
    for sid in ("re", "re_ref", "re_twin"):
        kv("rm", "--session", sid)

    # a session id that is not UTF-8 (ids are any bytes): --json output stays valid JSON text,
    # well-formed UTF-8 as it is, other bytes as \u00XX (they used to be copied raw)
    odd = b"caf\xc3\xa9-\xff"
    raw = [os.fsencode(kvpack)]
    pr = subprocess.run(raw + [b"put", b"--node", node["addr"].encode(), b"--session", odd,
                               b"--kvd", p("a.kvd").encode(), b"--codec", b"kivi", b"--json"],
                        capture_output=True, timeout=120, env=env)
    check(pr.returncode == 0, f"put of a non-UTF-8 session id: exit {pr.returncode}")
    for what, out in (("put", pr.stdout), ("ls", subprocess.run(
            raw + [b"ls", b"--node", node["addr"].encode(), b"--json"], capture_output=True,
            timeout=120, env=env).stdout)):
        try:
            j = json.loads(out.decode("utf-8"))
        except ValueError as e:
            check(False, f"{what} --json is not valid UTF-8 JSON: {e}")
            continue
        names = [j.get("session")] if what == "put" else [s["session"] for s in j["sessions"]]
        check("caf\u00e9-\u00ff" in names, f"{what} --json: {names}")
    pr = subprocess.run(raw + [b"rm", b"--node", node["addr"].encode(), b"--session", odd],
                        capture_output=True, timeout=120, env=env)
    check(pr.returncode == 0, f"rm of the non-UTF-8 session id: exit {pr.returncode}")
    bad_tokens = p("ids_short.bin")
    with open(bad_tokens, "wb") as f:
        f.write(struct.pack("<10I", *range(10)))
    rc, _, err = kv("put", "--session", "bt", "--kvd", p("a.kvd"), "--tokens", bad_tokens)
    check(rc == 1 and "uint32" in err, "a short --tokens file is not a clear error")
    # a directory where a file is wanted: refused at open, not read as garbage (it used to be
    # sized by ftell as 2^63 - 1 bytes)
    rc, _, err = kv("put", "--session", "bt", "--kvd", p("a.kvd"), "--tokens", tmp)
    check(rc == 1 and "Is a directory" in err, f"a directory as --tokens: {err!r}")
    for argv in (["eval", "--input", tmp], ["plan", "--model", "llama-3.1-8b", "--trace", tmp]):
        ev = subprocess.run([kvpack, *argv], capture_output=True, text=True, timeout=60, env=env)
        check(ev.returncode in (1, 2) and "Is a directory" in ev.stderr,
              f"a directory to {argv[0]}: {ev.returncode} {ev.stderr!r}")
    # an output file that cannot be written: refused before the work that would fill it
    rc, _, err = kv("get", "--session", "f16", "--out", tmp)
    check(rc == 2 and "it is a directory" in err, f"get --out DIR: {rc} {err!r}")
    ev = subprocess.run([kvpack, "eval", "--synthetic", "--codec", "kivi", "--dequant-out",
                         os.path.join(tmp, "no", "x.kvd")], capture_output=True, text=True,
                        timeout=60, env=env)
    check(ev.returncode == 2 and "No such file" in ev.stderr and ev.stdout == "",
          f"eval --dequant-out in a missing directory: {ev.returncode} {ev.stderr!r}")

    # malformed .kvd: exit 1, nothing stored, nothing changed
    with open(p("bad.kvd"), "wb") as f:
        f.write(b"KVD1" + struct.pack("<5I", 1, 2, 300, 2, 64) + b"\0" * 100)
    before = ls_json()["sessions"]
    rc, _, err = kv("put", "--session", "f16", "--kvd", p("bad.kvd"))
    check(rc == 1 and ".kvd" in err, "malformed .kvd is not a clear error")
    check(ls_json()["sessions"] == before, "a failed put changed the node")
    # values no codec stores (NaN, Inf, past fp16 range): put and eval name the first one, exit 1,
    # and the node is unchanged
    L, T, H, D = 2, 40, 2, 16
    for name, bad in (("nan", float("nan")), ("inf", float("-inf")), ("big", 1e30)):
        vals = [0.25] * (2 * L * T * H * D)
        vals[L * T * H * D + ((1 * T + 33) * H + 1) * D + 5] = bad  # V[1][33][1][5]
        kvptest.write_kvd(p(name + ".kvd"), L, T, H, D, vals)
        for codec in ("fp16", "kivi"):
            rc, _, err = kv("put", "--session", "x" + name, "--kvd", p(name + ".kvd"),
                            "--codec", codec, "--page-tokens", "16")
            check(rc == 1 and "V[layer 1][token 33][head 1][dim 5]" in err and "65504" in err,
                  f"put of a .kvd holding {bad} ({codec}) is not a clear error: {err!r}")
        ev = subprocess.run([kvpack, "eval", "--input", p(name + ".kvd"), "--codec", "all"],
                            capture_output=True, text=True, timeout=120, env=env)
        check(ev.returncode == 1 and "V[layer 1][token 33][head 1][dim 5]" in ev.stderr,
              f"eval of a .kvd holding {bad} is not a clear error: {ev.stderr!r}")
    check(ls_json()["sessions"] == before, "a refused put changed the node")

    # delete survives a restart (write-through: the others are on disk and come back)
    rc, _, _ = kv("rm", "--session", "kvt")
    check(rc == 0, "rm kvt failed")
    stop_node()
    start_node()
    names = {s["session"] for s in ls_json()["sessions"]}
    check(names == {"f16", "kv", "sh2"}, f"after restart ls shows {sorted(names)}")
    rc, _, err = kv("get", "--session", "kvt", "--out", p("kvt.kvd"))
    check(rc == 1 and "no session" in err, "deleted session is back after a restart")
    rc, out, _ = kv("get", "--session", "f16", "--out", p("a_restart.kvd"), "--json")
    check(rc == 0 and open(p("a.kvd"), "rb").read() == open(p("a_restart.kvd"), "rb").read(),
          "fp16 session not bit-exact after the restart")
    # the first get after a restart reads the session back from disk and says so; the next one
    # finds it in DRAM
    got = json.loads(out) if rc == 0 else {}
    check(got.get("disk_pages", 0) == got.get("pages", -1) and got.get("disk_bytes", 0) > 0,
          f"get after a restart does not report its disk read: {got}")
    rc, out, _ = kv("get", "--session", "f16", "--out", p("a_restart2.kvd"), "--json")
    got = json.loads(out) if rc == 0 else {}
    check(rc == 0 and got.get("disk_pages") == 0 and got.get("disk_bytes") == 0,
          f"second get reports a disk read: {got}")
    rc, out, _ = kv("get", "--session", "kv", "--out", p("kv_restart.kvd"))
    check(rc == 0 and "back from its SSD tier" in out, f"get does not say it read the disk: {out!r}")

    # dead node: an error, not a hang
    addr = node["addr"]
    stop_node()
    for cmd, args in (("put", ["--session", "x", "--kvd", p("a.kvd")]), ("ls", []),
                      ("get", ["--session", "f16", "--out", p("dead.kvd")]),
                      ("rm", ["--session", "f16"])):
        rc, _, err = kv(cmd, "--timeout-ms", "2000", *args, node_addr=addr)
        check(rc == 1 and err.strip() != "", f"{cmd} to a dead node: exit {rc}")
    check(not os.path.exists(p("dead.kvd")), "get from a dead node wrote a file")
    rc, out, _ = kv("stat", "--json", "--timeout-ms", "2000", node_addr=addr)
    st = json.loads(out) if out.strip() else {}
    check(rc == 1 and st.get("ok") is False and st.get("node") == addr and st.get("error"),
          f"stat --json of a dead node: exit {rc}, {out!r}")

    # --durability spill (the default): a put lives only in DRAM, a SIGTERM spills it before the
    # node exits (a restart finds it byte-identical), a SIGKILL loses it
    start_node("spill", [])
    for sid in ("sp1", "sp2"):
        rc, _, _ = kv("put", "--session", sid, "--kvd", p("a.kvd"), "--codec", "kivi")
        check(rc == 0, f"put {sid} to a spill node")
    rc, _, _ = kv("get", "--session", "sp1", "--out", p("sp1.kvd"))
    stop_node()
    start_node("spill", [])
    rc, out, _ = kv("ls", "--json")
    names = {s["session"] for s in json.loads(out)["sessions"]} if rc == 0 else set()
    check(names == {"sp1", "sp2"}, f"a SIGTERMed spill node did not keep its DRAM sessions: {names}")
    rc, _, _ = kv("get", "--session", "sp1", "--out", p("sp1_restart.kvd"))
    check(rc == 0 and open(p("sp1.kvd"), "rb").read() == open(p("sp1_restart.kvd"), "rb").read(),
          "sp1 not byte-identical after the stop and start")
    rc, _, _ = kv("put", "--session", "sp3", "--kvd", p("a.kvd"), "--codec", "kivi")
    node["proc"].kill()
    node["proc"].wait()
    start_node("spill", [])
    rc, out, _ = kv("ls", "--json")
    names = {s["session"] for s in json.loads(out)["sessions"]} if rc == 0 else set()
    check(names == {"sp1", "sp2"}, f"after a SIGKILL (sp3 was only in DRAM): {names}")
    stop_node()

    # a request over the node's --max-msg that still goes eager (~300 KB of fp16 pages against
    # 64K): refused "too large" at once, not dropped unanswered until the client's deadline
    start_node("small", ["--max-msg", "64K"])
    rc, _, err = kv("put", "--session", "big", "--kvd", p("a.kvd"), "--codec", "fp16",
                    "--timeout-ms", "3000")
    check(rc != 0 and "too large" in err.lower() and "deadline" not in err,
          f"put over --max-msg 64K: exit {rc}, {err.strip()[-200:]!r} (want a too-large refusal)")
    rc, _, _ = kv("stat")
    check(rc == 0, "the node serves on after refusing a too-large request")
    stop_node()
finally:
    if node["proc"] is not None and node["proc"].poll() is None:
        node["proc"].kill()
        node["proc"].wait()
    shutil.rmtree(tmp, ignore_errors=True)

print("check_session_cli:", "FAILED" if fails else "all checks passed")
sys.exit(1 if fails else 0)
