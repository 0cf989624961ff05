#!/usr/bin/env python3
"""check_chaos.py - acknowledged data survives nodes dying at random under a stream of CLI puts,
re-puts of a session with other KV, and rms. Three kvpackd (--durability sync, 16 MiB DRAM so
sessions spill), --replicas 2; a killer thread SIGKILLs a random node every 0.4-1.6 s and brings
it back on its port and data dir 0.2-1.0 s later, while the main thread runs CHAOS_S seconds of
seeded operations over 24 session ids (each put a fresh dump). Then every node is up, `kvpack
repair --replicas 2` runs, and each session must read back as exactly what its last acknowledged
operation left (a put: byte-identical to `kvpack eval --dequant-out` of that dump; an rm: no
session), or as a later operation that failed (its outcome is unknown to the client: it may have
landed on some node, and last writer wins). A second repair pass finds nothing to do.
A session put again with other KV used to read back as the first put's pages with the second
put's tail: this soak found it (25 of 37 sessions wrong). Seeded, so a failure reruns the same
operations; the kill instants still depend on timing.
usage: check_chaos.py KVPACK KVPACKD [CHAOS_S]"""
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

KVPACK, KVPACKD = sys.argv[1], sys.argv[2]
CHAOS_S = float(sys.argv[3]) if len(sys.argv) > 3 else 25.0
check = kvptest.check
tmp = tempfile.mkdtemp(prefix="kvp_chaos_")
env = dict(os.environ, KVP_PROGRESS="0")
L, H, D, P = 2, 2, 64, 128
NAMES = ["n0", "n1", "n2"]
nodes = kvptest.Nodes(KVPACKD, tmp, env)
lock = threading.Lock()  # nodes.procs: the killer replaces entries while the end reads them
stop = threading.Event()
kills = [0]


def node_args(name):
    return ["--data-dir", os.path.join(tmp, name), "--durability", "sync", "--dram-budget", "16M",
            "--log-level", "error"]


def kvd_path(seed):
    """The dump of operation seed: T a multiple of P (no fp16 tail: the whole session is kivi
    pages, which eval --dequant-out reproduces bit for bit); written once."""
    path = os.path.join(tmp, f"d{seed}.kvd")
    if not os.path.exists(path):
        rnd = random.Random(seed)
        T = P * rnd.choice([1, 2, 3])
        kvptest.write_kvd(path, L, T, H, D, [rnd.gauss(0, 1) for _ in range(2 * L * T * H * D)])
    return path


def digest(path):
    return hashlib.sha1(open(path, "rb").read()).hexdigest()


def cli(*args, timeout=120):
    p = subprocess.run([KVPACK, *args], capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def killer():
    rnd = random.Random(7)
    while not stop.wait(rnd.uniform(0.4, 1.6)):
        name = rnd.choice(NAMES)
        with lock:
            nodes.procs[name].send_signal(signal.SIGKILL)
            nodes.procs[name].wait()
        kills[0] += 1
        if stop.wait(rnd.uniform(0.2, 1.0)):
            break
        with lock:
            nodes.start(name, node_args(name))


try:
    addrs = [nodes.start(n, node_args(n)) for n in NAMES]
    peers = ",".join(addrs)
    th = threading.Thread(target=killer)
    th.start()
    # per session: the outcome of its last acknowledged operation ("put:SEED", "rm", or None if
    # none was acked), and the outcomes of the failed ones since
    acked, maybe = {}, {}
    rnd = random.Random(1)
    ops = failed = seed = 0
    t_end = time.monotonic() + CHAOS_S
    while time.monotonic() < t_end:
        sid = f"s{rnd.randrange(24)}"
        ops += 1
        if sid in acked and rnd.random() < 0.15:
            what, rc = "rm", cli("rm", "--node", peers, "--session", sid, "--replicas", "2",
                                 "--timeout-ms", "3000")[0]
        else:
            seed += 1
            what = f"put:{seed}"
            rc = cli("put", "--node", peers, "--session", sid, "--kvd", kvd_path(seed),
                     "--replicas", "2", "--timeout-ms", "3000")[0]
        if rc == 0:
            acked[sid], maybe[sid] = what, set()
        else:
            failed += 1
            maybe.setdefault(sid, set()).add(what)
    stop.set()
    th.join()
    with lock:
        for n in NAMES:
            if nodes.procs[n].poll() is not None:
                nodes.start(n, node_args(n))
    print(f"{ops} operations ({failed} failed) while {kills[0]} nodes were killed")
    check(kills[0] >= 5 and ops - failed >= 20, f"too little chaos: {kills[0]} kills, "
                                                 f"{ops - failed} acked operations")

    rc, out, err = cli("repair", "--node", peers, "--replicas", "2", "--json", timeout=300)
    check(rc == 0, f"repair exited {rc}: {err[-300:]}")
    rc, out, err = cli("repair", "--node", peers, "--replicas", "2", "--json", timeout=300)
    rep = json.loads(out) if rc == 0 else {}
    check(rc == 0 and rep.get("sessions") == rep.get("already_ok"),
          f"a second repair pass still had work: {out[-400:]} {err[-300:]}")

    want_digest = {}
    for sid in sorted(set(acked) | set(maybe)):
        allowed = ({acked[sid]} if sid in acked else {None}) | maybe.get(sid, set())
        out = os.path.join(tmp, "get.kvd")
        if os.path.exists(out):
            os.unlink(out)
        rc, _, err = cli("get", "--node", peers, "--session", sid, "--out", out,
                         "--timeout-ms", "10000")
        if rc != 0:
            ok = ("rm" in allowed or None in allowed) and "no session" in err
            check(ok, f"{sid}: get failed ({err.strip()[-200:]}), allowed {sorted(map(str, allowed))}")
            continue
        got = digest(out)
        for w in allowed:
            if w and w.startswith("put:") and w not in want_digest:
                ref = os.path.join(tmp, "ref.kvd")
                e = subprocess.run([KVPACK, "eval", "--input", kvd_path(int(w[4:])), "--codec",
                                    "kivi", "--dequant-out", ref], capture_output=True, env=env)
                want_digest[w] = digest(ref) if e.returncode == 0 else None
        match = [w for w in allowed if w and want_digest.get(w) == got]
        check(len(match) == 1, f"{sid}: read back as none of {sorted(map(str, allowed))}")
    print(f"{len(set(acked) | set(maybe))} sessions checked")
finally:
    stop.set()
    nodes.kill_all()
    shutil.rmtree(tmp, ignore_errors=True)

if kvptest.FAILS:
    print(f"check_chaos: {len(kvptest.FAILS)} checks failed")
    sys.exit(1)
print("check_chaos: all checks passed")
