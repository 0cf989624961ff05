#!/usr/bin/env python3
"""check_scrub_cli.py - `kvpack scrub` (SCRUB) against a real kvpackd whose background scrubber is
off (--scrub-mib-s 0), write-through. Two sessions put: a pass checks every page byte on disk and
finds nothing (exit 0). The node stopped, one byte of s1's first page flipped in its segment file,
the node back: before any get, `kvpack scrub --json` finds exactly that page (bad_pages 1, exit 3),
`kvpack ls` then lists s1 damaged and s2 not, a second pass finds nothing more (exit 0); text
output; the Python binding's Client.scrub on the same node; a node without a data dir answers
UNSUPPORTED and an unreachable one is named (exit 1 both); Cluster.scrub over both nodes (a result
and the KvpError) and of one; --help, and no node (one line, exit 2). A node stopped (SIGTERM) while
a pass over 24 MiB of pages is in its first read (held there by gate_preload.so) ends the pass
after that read (the client gets "shutting down") and exits 0: a pass over a large disk held the
stop, and so the stop-time spill, for as long as it took.
usage: check_scrub_cli.py KVPACK KVPACKD LIBKVPACK GATE_PRELOAD_SO"""
import array
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

KVPACK, KVPACKD, LIB, GATE_SO = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
TMP = tempfile.mkdtemp(prefix="kvp_scrub_")
ENV = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
kvpack = kvptest.load_kvpack(LIB)
nodes = kvptest.Nodes(KVPACKD, TMP, ENV)


def start(name, data=True):
    return nodes.start(name, ["--dram-budget", "64M", "--scrub-mib-s", "0",
                              *(["--data-dir", os.path.join(TMP, name), "--durability",
                                 "write-through"] if data else [])])


stop = nodes.stop


def cli(*args):
    p = subprocess.run([KVPACK, *args], capture_output=True, text=True, timeout=300, env=ENV)
    return p.returncode, p.stdout, p.stderr


def scrub(node):
    rc, out, err = cli("scrub", "--node", node, "--json")
    print(f"scrub {node}: exit {rc} {out.strip()} {err.strip()}")
    return rc, (json.loads(out) if out.strip() else {})


def ls(node):
    rc, out, _ = cli("ls", "--node", node, "--json")
    check(rc == 0, f"ls {node}: exit {rc}")
    return {s["session"]: s for s in json.loads(out)["sessions"]} if rc == 0 else {}


try:
    rc, out, _ = cli("scrub", "--help")
    check(rc == 0 and "usage: kvpack scrub" in out and "--timeout-ms" in out, f"--help: {rc}")
    rc, _, err = cli("scrub")
    check(rc == 2 and err.count("\n") == 1 and "which nodes?" in err, f"no node: exit {rc} {err!r}")

    a = start("a")
    L, T, H, D = 2, 300, 2, 64
    for sid, mul in (("s1", 37), ("s2", 41)):
        kvd = os.path.join(TMP, sid + ".kvd")
        kvptest.write_kvd(kvd, L, T, H, D, array.array(
            "f", (((i * mul) % 509 - 254) / 64.0 for i in range(2 * L * T * H * D))))
        rc, _, err = cli("put", "--node", a, "--session", sid, "--kvd", kvd, "--codec", "kivi")
        check(rc == 0, f"put {sid}: exit {rc} {err}")
    seg_bytes = sum(os.path.getsize(f) for f in glob.glob(os.path.join(TMP, "a", "seg", "*.seg")))

    rc, rep = scrub(a)
    node = (rep.get("nodes") or [{}])[0]
    check(rc == 0 and node.get("ok") is True and node.get("bad_pages") == 0 and
          node.get("index_rebuilt") is False and 0 < node.get("bytes", 0) <= seg_bytes and
          rep.get("failed") == 0, f"a clean pass: exit {rc} {rep}")

    stop("a")  # one payload byte of the first page in A's only segment file
    segs = kvptest.flip_segment_byte(os.path.join(TMP, "a"))
    check(len(segs) == 1, f"A's segment files: {segs}")
    a = start("a")
    rc, rep = scrub(a)
    check(rc == 3 and rep.get("bad_pages") == 1 and rep["nodes"][0].get("bad_pages") == 1 and
          rep.get("damaged_sessions") == 1 and rep["nodes"][0].get("damaged_sessions") == 1,
          f"the pass did not find the flipped byte: exit {rc} {rep}")
    held = ls(a)
    check(held.get("s1", {}).get("damaged") is True and held.get("s2", {}).get("damaged") is False,
          f"ls after the pass: {held}")
    # a second pass finds no new bad page, but s1 still lists as damaged: exit 3 until repaired
    # (it used to say 0 bad, exit 0, for a node holding a damaged session)
    rc, rep = scrub(a)
    check(rc == 3 and rep.get("bad_pages") == 0 and rep.get("damaged_sessions") == 1,
          f"a second pass: exit {rc} {rep}")
    rc, out, _ = cli("scrub", "--node", a)
    check(rc == 3 and "KiB of pages checked" in out and
          ": 0 bad; 1 session listed damaged (kvpack repair)" in out, f"text: {rc} {out}")
    rc, _, err = cli("rm", "--node", a, "--session", "s1")
    check(rc == 0, f"rm s1: exit {rc} {err}")
    rc, rep = scrub(a)
    check(rc == 0 and rep.get("bad_pages") == 0 and rep.get("damaged_sessions") == 0,
          f"a pass once the damaged session is gone: exit {rc} {rep}")

    with kvpack.Client(a, timeout_ms=60000) as c:
        r = c.scrub()
        check(r["bad_pages"] == 0 and r["bytes"] > 0 and r["index_rebuilt"] is False,
              f"Client.scrub: {r}")

    d = start("dram", data=False)
    rc, rep = scrub(d)
    check(rc == 1 and rep.get("failed") == 1 and rep["nodes"][0].get("error") == "unsupported",
          f"a DRAM-only node: exit {rc} {rep}")
    rc, _, err = cli("scrub", "--node", "127.0.0.1:1", "--timeout-ms", "3000")
    check(rc == 1 and "127.0.0.1:1" in err, f"an unreachable node: exit {rc} {err}")
    with kvpack.Cluster(peers=f"{a},{d}", timeout_ms=60000) as cl:
        every = cl.scrub()
        check(every[a]["bad_pages"] == 0 and every[a]["bytes"] > 0 and
              isinstance(every[d], kvpack.KvpError) and kvpack.status_name(every[d].status) == "ERR_UNSUPPORTED",
              f"Cluster.scrub over both: {every}")
        check(cl.scrub(a)["bytes"] == every[a]["bytes"], "Cluster.scrub of one node")
        check(cl.stat(a).sessions == 1 and isinstance(cl.stat()[d], kvpack.NodeStat),
              "Cluster.stat after the refactor (s1 removed above)")
    stop("a")
    stop("dram")

    # SIGTERM during a pass: the pass ends after its current read, the node exits 0 at once
    big = os.path.join(TMP, "big.kvd")
    rc, _, err = cli("eval", "--synthetic", "--layers", "2", "--tokens", "3072", "--heads", "8",
                     "--head-dim", "128", "--codec", "fp16", "--dequant-out", big)
    check(rc == 0, f"eval --dequant-out big.kvd: exit {rc} {err[-300:]}")
    gate = os.path.join(TMP, "read_gate")
    open(gate, "w").close()  # open while the session is put
    proc, g = kvptest.start_kvpackd(
        KVPACKD, os.path.join(TMP, "g.ready"),
        ["--listen", "127.0.0.1:0", "--dram-budget", "64M", "--scrub-mib-s", "0", "--data-dir",
         os.path.join(TMP, "g"), "--durability", "write-through", "--http", "127.0.0.1:0",
         "--http-ready-file", os.path.join(TMP, "g.http")],
        env=dict(ENV, LD_PRELOAD=GATE_SO, KVP_TEST_GATE=gate))
    health = f"http://127.0.0.1:{open(os.path.join(TMP, 'g.http')).read().strip()}/health"
    rc, _, err = cli("put", "--node", g, "--session", "big", "--kvd", big, "--codec", "fp16")
    check(rc == 0, f"put big: exit {rc} {err[-300:]}")
    os.unlink(gate)  # segment reads wait from here
    sc = subprocess.Popen([KVPACK, "scrub", "--node", g, "--json", "--timeout-ms", "60000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    waiting = []
    for _ in range(600):
        waiting = glob.glob(gate + ".waiting.*")
        if waiting or sc.poll() is not None:
            break
        time.sleep(0.05)
    check(waiting, "the pass never read a segment file")
    proc.terminate()
    # the gate opens once the node says it is shutting down: it cancels the pass right after
    # (a fixed 0.3 s used to be too short on a loaded machine, and the pass then ran to its end)
    for _ in range(600):
        try:
            urllib.request.urlopen(health, timeout=5).close()
        except urllib.error.HTTPError as e:
            if e.code == 503:
                break
        except OSError:
            break  # no answer: past the HTTP server too
        time.sleep(0.05)
    time.sleep(0.1)
    open(gate, "w").close()
    out, err = sc.communicate(timeout=120)
    node_rc = proc.wait(timeout=60)
    rep = json.loads(out) if out.strip() else {}
    got = (rep.get("nodes") or [{}])[0]
    print(f"scrub during the stop: exit {sc.returncode} {out.strip()} {err.strip()[-300:]}")
    check(sc.returncode == 1 and got.get("ok") is False and "shutting down" in
          str(got.get("error", "")) + err and node_rc == 0,
          f"scrub during SIGTERM: exit {sc.returncode}, node exit {node_rc}, {rep} {err[-300:]}")
finally:
    nodes.kill_all()
    shutil.rmtree(TMP, ignore_errors=True)

if fails:
    sys.exit(f"{len(fails)} check(s) failed")
print("scrub cli: all checks passed")
