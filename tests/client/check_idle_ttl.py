#!/usr/bin/env python3
"""check_idle_ttl.py - `kvpackd --idle-ttl S` against a real node (write-through, so sessions are
also on disk): a session nobody put or fetched for longer than S is gone (get: exit 1, "no session";
`kvpack_expired_sessions_total` 1 in /metrics), one used within S is served, and after a warm
restart on the same data directory the expired one stays gone while the other comes back. A node
asked nothing but STAT and LIST still lets an idle session go (its sweeper runs once a second;
the sweep used to run only as data requests arrived, so `ls`, `stat` and /metrics kept showing
it). Bad values are refused with exit 2. The TTL is 3 s and the margins 1.5 s either side.
usage: check_idle_ttl.py KVPACK KVPACKD"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack, kvpackd = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="kvp_ttl_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
node = kvptest.CliNode(kvpack, kvpackd, tmp, env)


def start_node():
    node.start(["--durability", "write-through", "--idle-ttl", "3"])


stop_node, kv, metric = node.stop, node.kv, node.metric


try:
    for bad in ["x", "-1", ""]:
        p = subprocess.run([kvpackd, "--idle-ttl", bad], capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and "--idle-ttl wants seconds" in p.stderr,
              f"--idle-ttl '{bad}' not refused: {p.returncode} {p.stderr!r}")
    start_node()
    kvd = os.path.join(tmp, "a.kvd")
    kvptest.write_kvd(kvd, 2, 200, 2, 64, [((i * 7) % 512 - 256) / 64.0 for i in range(2 * 2 * 200 * 2 * 64)])
    rc, _ = kv("put", "--session", "old", "--kvd", kvd, "--codec", "kivi")
    check(rc == 0, "put old")
    time.sleep(3.0)
    rc, _ = kv("put", "--session", "young", "--kvd", kvd, "--codec", "kivi")
    check(rc == 0, "put young")
    time.sleep(1.5)  # old idle >= 4.5 s, young about 1.5 s
    rc, err = kv("get", "--session", "old", "--out", os.path.join(tmp, "old.kvd"))
    check(rc == 1 and "no session 'old'" in err, f"old session not expired: exit {rc}")
    rc, _ = kv("get", "--session", "young", "--out", os.path.join(tmp, "young.kvd"))
    check(rc == 0, "young session not served")
    check(metric("kvpack_expired_sessions_total") == 1.0,
          f"expired counter {metric('kvpack_expired_sessions_total')}")
    stop_node()
    start_node()  # warm restart: the expired session left the disk too
    rc, _ = kv("get", "--session", "old", "--out", os.path.join(tmp, "old2.kvd"))
    check(rc == 1, "expired session came back after a restart")
    rc, _ = kv("get", "--session", "young", "--out", os.path.join(tmp, "young2.kvd"))
    check(rc == 0, "young session lost across the restart")
    time.sleep(6.0)  # young idle past the TTL (+ the 1 s sweep); only ls and stat from here
    p = subprocess.run([kvpack, "ls", "--node", node.addr], capture_output=True, text=True,
                       timeout=60, env=env)
    rc, _ = kv("stat")
    check(p.returncode == 0 and "young" not in p.stdout and "0 sessions" in p.stdout and
          metric("kvpack_expired_sessions_total") == 1.0,
          f"an idle node kept its expired session: ls {p.stdout!r}, expired "
          f"{metric('kvpack_expired_sessions_total')}")
    stop_node()
finally:
    node.kill()
    shutil.rmtree(tmp, ignore_errors=True)

print("FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
