#!/usr/bin/env python3
"""check_repair_watch.py - `kvpack repair --etcd URL --replicas 2 --watch` as a long-running agent on
a real etcd and 3 real kvpackd --etcd (TTL 2 s, write-through): its start pass finds 10 sessions put
with r = 2 already at their targets. SIGKILL one node: once its lease expires and the members are
stable for --settle, a pass (trigger membership) copies every session it held to a survivor, so each
session is on 2 live nodes, byte-identical. While it is down one session it held is rm'ed and another
is put again with other contents. Restart the node on its port and data dir: a pass deletes its copy
of the rm'ed session (deleted_tombstoned), replaces its old copy of the re-put one with the new version
(replaced_stale, byte-identical) and removes the stand-in copies (each session exactly on its rank's
first 2 nodes again). A 4th node joins: a
pass moves the sessions it now ranks among its first 2 onto it. That node restarted at once after a
SIGKILL (same key, another pid) is a membership change too: a pass follows. The start reports no
membership change (it used to say "members changed" for the list it started with). SIGTERM: the agent stops at once,
exit 0; a one-shot `repair --etcd` then finds nothing to do. One JSON object per pass (--json),
numbered, with its trigger. Exit 77 without etcd.
usage: check_repair_watch.py KVPACK KVPACKD LIBKVPACK"""
import base64
import json
import os
import queue
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack, kvpackd, lib = sys.argv[1], sys.argv[2], sys.argv[3]
ETCD = kvptest.etcd_or_skip()
kvpack_py = kvptest.load_kvpack(lib)
tmp = tempfile.mkdtemp(prefix="kvp_rwatch_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
nodes = {}  # k -> (Popen, addr)
URL = None
NS = None  # the namespace the puts used (from ls)


def start_node(k, port=0):
    nodes[k] = kvptest.start_kvpackd(
        kvpackd, os.path.join(tmp, f"ready{k}"),
        ["--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(tmp, f"n{k}"),
         "--durability", "write-through", "--dram-budget", "32M", "--etcd", URL,
         "--etcd-ttl", "2"], env=env, what=f"kvpackd {k}")
    return nodes[k][1]


def kv(*args):
    p = subprocess.run([kvpack, *args, "--timeout-ms", "5000"], capture_output=True, text=True,
                       timeout=120, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
    return p.returncode, p.stdout


def held_by(addr):
    rc, out = kv("ls", "--node", addr, "--json")
    check(rc == 0, f"ls --node {addr} exited {rc}")
    return {s["session"] for s in json.loads(out)["sessions"]} if rc == 0 else set()


def placement(addrs):
    """Each session's nodes among addrs (their own ls)."""
    held = {a: held_by(a) for a in addrs}
    return {sid: sorted(a for a in addrs if sid in held[a]) for sid in sids}


def targets(addrs):
    """Each session's first 2 nodes of its rendezvous rank over addrs (libkvpack's own rank)."""
    cl = kvpack_py.Cluster(peers=addrs, replicas=2)
    try:
        return {sid: sorted(cl.rank(NS, sid)[:2]) for sid in sids}
    finally:
        cl.close()


class Agent:
    """The repair agent; its stdout lines (one JSON object per pass) go to a queue."""

    def __init__(self, *extra):
        self.err = open(os.path.join(tmp, "agent.err"), "w+")
        self.p = subprocess.Popen([kvpack, "repair", "--etcd", URL, "--replicas", "2", "--watch",
                                   "--json", "--timeout-ms", "3000", *extra],
                                  stdout=subprocess.PIPE, stderr=self.err, text=True, env=env)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.q.put(line)

    def next_pass(self, deadline_s, want=None):
        """The next pass report (with trigger want, skipping others), or None past the deadline."""
        end = time.time() + deadline_s
        while time.time() < end:
            try:
                rep = json.loads(self.q.get(timeout=max(0.1, end - time.time())))
            except queue.Empty:
                break
            if want is None or rep.get("trigger") == want:
                return rep
        return None


def make_kvd(path, L, T, H, D, scale=1.0):
    kvptest.write_kvd(path, L, T, H, D, (scale * ((i * 7919) % 513 - 256) / 64.0
                                          for i in range(2 * L * T * H * D)))


agent = None
etcd = None
sids = [f"w{i:02d}" for i in range(10)]
try:
    etcd, URL = kvptest.start_etcd(ETCD, os.path.join(tmp, "etcd"))
    addrs = [start_node(k) for k in range(3)]
    kvd = os.path.join(tmp, "a.kvd")
    make_kvd(kvd, 2, 150, 2, 64)
    original = open(kvd, "rb").read()
    for sid in sids:
        rc, _ = kv("put", "--etcd", URL, "--replicas", "2", "--session", sid, "--kvd", kvd,
                   "--codec", "fp16")
        check(rc == 0, f"put {sid} exited {rc}")

    rc, out = kv("ls", "--etcd", URL, "--json")
    NS = int(json.loads(out)["sessions"][0]["ns"], 16) if rc == 0 else 0
    agent = Agent("--settle", "1", "--every", "3600")
    rep = agent.next_pass(30)
    check(rep is not None and rep["pass"] == 1 and rep["trigger"] == "start" and
          rep["sessions"] == 10 and rep["already_ok"] == 10 and rep["copied"] == 0 and
          rep["unreachable"] == [], f"start pass: {rep}")
    agent.err.seek(0)  # the members it started with are no change (it said "changed" at start)
    said = agent.err.read()
    check("members changed" not in said, f"a change reported at start: {said!r}")

    # SIGKILL the node holding the most sessions: after the TTL + settle, a membership pass
    before = placement(addrs)
    dead = max(addrs, key=lambda a: sum(a in on for on in before.values()))
    k_dead = next(k for k in nodes if nodes[k][1] == dead)
    lost = [s for s in sids if dead in before[s]]
    nodes[k_dead][0].kill()
    nodes[k_dead][0].wait()
    rep = agent.next_pass(30, "membership")
    live = [a for a in addrs if a != dead]
    check(rep is not None and rep["sessions"] == 10 and rep["copied"] == len(lost) and
          rep["failed"] == 0 and rep["unreachable"] == [], f"pass after a node died: {rep}")
    after = placement(live)
    check(all(len(after[s]) == 2 for s in sids),
          f"not every session on 2 live nodes after the repair: {after}")
    for sid in lost:
        out = os.path.join(tmp, f"{sid}.kvd")
        rc, _ = kv("get", "--node", ",".join(live), "--session", sid, "--out", out)
        check(rc == 0 and open(out, "rb").read() == original, f"{sid} not byte-identical")

    # while it is down: rm one session it held, put another again with other contents
    gone, reput = lost[0], lost[1]
    rc, _ = kv("rm", "--etcd", URL, "--replicas", "2", "--session", gone)
    check(rc == 0, f"rm {gone} exited {rc}")
    sids.remove(gone)
    kvd2, toks = os.path.join(tmp, "b.kvd"), os.path.join(tmp, "b.tok")
    make_kvd(kvd2, 2, 150, 2, 64, scale=0.5)
    with open(toks, "wb") as f:  # other tokens: other chunk keys, other pages
        f.write(struct.pack("<150I", *[(t * 7919 + 11) % 32000 for t in range(150)]))
    rc, _ = kv("put", "--etcd", URL, "--replicas", "2", "--session", reput, "--kvd", kvd2,
               "--tokens", toks, "--codec", "fp16")
    check(rc == 0, f"re-put {reput} exited {rc}")

    # the node comes back warm: its rm'ed copy deleted, its old copy of the re-put session
    # replaced, stand-ins removed, each session on its rank's first 2
    start_node(k_dead, dead.split(":")[1])
    rep = agent.next_pass(30, "membership")
    check(rep is not None and rep["failed"] == 0 and rep["deleted_surplus"] == len(lost) - 1 and
          rep["copied"] == 1 and rep["replaced_stale"] == 1 and rep["deleted_tombstoned"] == 1,
          f"pass after the node came back: {rep}")
    now = placement(addrs)
    want = targets(addrs)
    check(all(now[s] == want.get(s) for s in sids), f"not back on their first 2 of 3: {now}")
    check(held_by(dead).isdisjoint({gone}), f"{gone} is back on {dead}")
    for a in now.get(reput, []):
        out = os.path.join(tmp, f"{reput}.{a}.kvd")
        rc, _ = kv("get", "--node", a, "--session", reput, "--out", out)
        check(rc == 0 and open(out, "rb").read() == open(kvd2, "rb").read(),
              f"{reput} on {a} is not the new version")

    # a 4th node joins: the sessions it ranks among their first 2 move onto it
    new = start_node(3)
    four = addrs + [new]
    rep = agent.next_pass(30, "membership")
    want = targets(four)
    moved = sum(new in want.get(s, []) for s in sids)
    check(rep is not None and rep["failed"] == 0 and rep["copied"] == moved and
          rep["deleted_surplus"] == moved, f"pass after a 4th node joined ({moved} move): {rep}")
    now = placement(four)
    check(all(now[s] == want.get(s) for s in sids), f"not at the 4-node targets: {now} vs {want}")

    # a node restarted at once after a SIGKILL: another process (pid, since), which may have
    # missed writes; it starts once the old key's lease (TTL 2 s) runs out (a live key is never
    # taken over: start_kvpackd starts it again meanwhile), and a membership pass follows (a
    # restart used to count as no change, leaving its stale copies until --every)
    k_quick = next(k for k in nodes if nodes[k][1] == new)
    nodes[k_quick][0].kill()
    nodes[k_quick][0].wait()
    start_node(k_quick, new.split(":")[1])
    rep = agent.next_pass(30, "membership")
    check(rep is not None and rep["failed"] == 0, f"no pass after a quick restart: {rep}")

    # members that never settle (a key that comes and goes every 0.3 s, faster than --settle 1:
    # a crash-looping node) held off every pass; now one runs 3 x --settle after the first change
    # (trigger "unsettled"). The flapping key names a node nobody runs: such a pass fails on it
    # (exit status of a pass: 1), and passes go on; once it is gone for good a membership pass
    # finds every session at its targets.
    flap_key = base64.b64encode(b"/kvpack/nodes/127.0.0.1:1").decode()
    flap_val = base64.b64encode(b'{"addr":"127.0.0.1:1"}').decode()

    def etcd_post(path, body):
        req = urllib.request.Request(URL + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()
    got, end = None, time.time() + 20
    while got is None and time.time() < end:
        etcd_post("/v3/kv/put", {"key": flap_key, "value": flap_val})
        time.sleep(0.15)
        etcd_post("/v3/kv/deleterange", {"key": flap_key})
        try:
            while got is None:
                rep = json.loads(agent.q.get(timeout=0.15))
                got = rep if rep.get("trigger") == "unsettled" else None
        except queue.Empty:
            pass
    check(got is not None, "no pass while the members kept changing faster than --settle")
    # once it stops, a pass finds every session at its targets: the unsettled one itself when
    # its snapshot lacked the key, else a later one (membership, or the retry of a failed pass)
    rep, end = got, time.time() + 30
    while not (rep is not None and rep["failed"] == 0 and rep["unreachable"] == []) and \
            time.time() < end:
        rep = agent.next_pass(max(0.1, end - time.time()))
    check(rep is not None and rep["failed"] == 0 and rep["unreachable"] == [],
          f"no clean pass once the flapping stopped: {rep}")

    # SIGTERM: stops at once, exit 0
    t0 = time.time()
    agent.p.send_signal(signal.SIGTERM)
    rc = agent.p.wait(timeout=20)
    agent.err.seek(0)
    err = agent.err.read()
    check(rc == 0 and "stopped after" in err, f"agent exit {rc} after SIGTERM: {err[-600:]!r}")
    # the one-shot repair reads the same members from etcd: nothing left to do
    rc, out = kv("repair", "--etcd", URL, "--replicas", "2", "--json")
    one = json.loads(out) if out else {}
    check(rc == 0 and one.get("already_ok") == len(sids) and one.get("copied") == 0,
          f"one-shot repair --etcd after the agent: exit {rc}, {one}")
    # more replicas than etcd lists nodes (some left): repaired to all of them, said, exit 1 (it
    # used to be a usage error, exit 2, and nothing was repaired)
    p = subprocess.run([kvpack, "repair", "--etcd", URL, "--replicas", "9", "--dry-run",
                        "--timeout-ms", "5000"], capture_output=True, text=True, timeout=120,
                       env=env)
    check(p.returncode == 1 and "repairing to 4 copies" in p.stderr and "plan:" in p.stdout,
          f"one-shot repair --replicas 9 of 4 nodes: exit {p.returncode} {p.stdout[-200:]!r} "
          f"{p.stderr[-300:]!r}")
    print(f"repair --watch: {len(lost)} sessions re-replicated after a kill, stand-ins removed "
          f"on return, {moved} moved to a joining node; stopped in {time.time() - t0:.2f} s")
finally:
    if agent is not None and agent.p.poll() is None:
        agent.p.kill()
        agent.p.wait()
    for proc, _ in nodes.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if etcd is not None and etcd.poll() is None:
        etcd.kill()
        etcd.wait()
    shutil.rmtree(tmp, ignore_errors=True)

print("check_repair_watch:", "FAILED" if fails else "all checks passed")
sys.exit(1 if fails else 0)
