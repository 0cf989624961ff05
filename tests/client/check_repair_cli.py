#!/usr/bin/env python3
"""check_repair_cli.py - `kvpack repair` over 3 kvpackd nodes (write-through data dirs), --replicas 2,
10 sessions (fp16 and kivi, each with an fp16 tail). Kill node X: --dry-run plans one copy per session X
held and changes nothing; repair puts every session on both survivors, byte-identical (per-node get),
exit 1 naming X. While X is down one session X held is rm'ed (exit 1) and another is put again with
other contents. Restart X on its data dir: repair deletes the rm'ed session's copy on X (its tombstone is
newer: deleted_tombstoned, nothing copied back), replaces X's old copy of the re-put session with the new
version (replaced_stale, byte-identical to the new one), deletes the stand-in copies; every session is on
exactly its rank's first 2 nodes (per-node ls), `ls --deleted` shows the tombstone; a second repair
changes nothing, and so does the start pass of `repair --watch` on the same static list. X dies mid-repair (the repair is stopped by KVP_REPAIR_STOP_AFTER
while the test kills X): exit 1, no session lost a copy on the live nodes, all byte-identical; with X
back, a last repair converges.
usage: check_repair_cli.py KVPACK KVPACKD"""
import array
import json
import os
import shutil
import socket
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

KVPACK, KVPACKD = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="kvp_rep_")
ENV = dict(os.environ, KVP_PROGRESS="0")
failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


class Node:
    """One kvpackd with its own data dir; restart() brings it back on the same port."""

    def __init__(self, k):
        self.k, self.port, self.proc, self.addr = k, 0, None, None

    def start(self):
        self.proc, self.addr = kvptest.start_kvpackd(
            KVPACKD, os.path.join(TMP, f"ready{self.k}"),
            ["--listen", f"127.0.0.1:{self.port}", "--data-dir", os.path.join(TMP, f"data{self.k}"),
             "--dram-budget", "32M", "--durability", "write-through"], env=ENV,
            what=f"kvpackd {self.k}")
        self.port = int(self.addr.rsplit(":", 1)[1])
        return self

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def cli(*args, env=None):
    """kvpack ARGS; returns (exit status, stdout); stderr goes to ours."""
    p = subprocess.run([KVPACK, *args, "--timeout-ms", "5000"], capture_output=True, text=True,
                       timeout=120, env=env or ENV)
    sys.stderr.write(p.stderr)
    return p.returncode, p.stdout


def repair(peers, *extra):
    """kvpack repair --json; returns (exit status, its JSON summary or {})."""
    rc, out = cli("repair", "--node", peers, "--replicas", "2", "--json", *extra)
    return rc, json.loads(out) if out.strip() else {}


def holdings(nodes):
    """{session id: set of node addresses whose own ls lists it} over the given nodes."""
    where = {}
    for n in nodes:
        rc, out = cli("ls", "--node", n.addr, "--json")
        expect(rc == 0, f"ls --node {n.addr} exited {rc}")
        for s in json.loads(out)["sessions"] if rc == 0 else []:
            where.setdefault(s["session"], set()).add(n.addr)
    return where


def fetch(node_list, sid):
    """The .kvd bytes `kvpack get` writes for sid from node_list, or None."""
    path = os.path.join(TMP, "got.kvd")
    if os.path.exists(path):
        os.unlink(path)
    rc, _ = cli("get", "--node", node_list, "--session", sid, "--out", path)
    return open(path, "rb").read() if rc == 0 else None


def identical_everywhere(where, reference, label):
    """Every copy of every session (each holder asked alone) is the reference bytes."""
    for sid, addrs in sorted(where.items()):
        for a in sorted(addrs):
            expect(fetch(a, sid) == reference[sid], f"{label}: {sid} on {a} is not byte-identical")


try:
    nodes = [Node(k).start() for k in range(3)]
    peers = ",".join(n.addr for n in nodes)
    # L=2, T=200 (one 128-token chunk + a 72-token fp16 tail), H=2, D=64; values exact in fp16
    L, T, H, D = 2, 200, 2, 64
    body = array.array("f", (((i * 40503) % 511 - 255) / 32.0 for i in range(2 * L * T * H * D)))
    kvd = os.path.join(TMP, "in.kvd")
    kvptest.write_kvd(kvd, L, T, H, D, body)
    sids = [f"r{i}" for i in range(10)]
    rank, reference = {}, {}
    for i, sid in enumerate(sids):
        rc, out = cli("put", "--node", peers, "--replicas", "2", "--session", sid, "--kvd", kvd,
                      "--codec", "kivi" if i % 2 else "fp16", "--json")
        expect(rc == 0, f"put {sid} exited {rc}")
        rank[sid] = json.loads(out)["rank"] if rc == 0 else []
        reference[sid] = fetch(peers, sid)
    expect(reference["r0"] == open(kvd, "rb").read(), "fp16 session r0 does not round-trip")
    first2 = {sid: set(rank[sid][:2]) for sid in sids}
    expect(holdings(nodes) == first2, "after put, sessions are not on their rank's first 2")

    # node X dies: the busiest in the first two of a rank
    x = max(nodes, key=lambda n: sum(n.addr in first2[s] for s in sids))
    live = [n for n in nodes if n is not x]
    had_x = [s for s in sids if x.addr in first2[s]]
    x.kill()
    rc, plan = repair(peers, "--dry-run")
    expect(rc == 1 and plan.get("unreachable") == [x.addr] and plan.get("copied") == len(had_x)
           and plan.get("deleted_surplus") == 0 and plan.get("already_ok") == 10 - len(had_x),
           f"dry run with {x.addr} dead: exit {rc}, {plan}")
    expect(all(a["status"] == "planned" for a in plan.get("actions", [])), "dry run did not plan")
    # the text names the targets as they are: r = 3 with 2 nodes live is 2 targets, not "their 3"
    rc, out = cli("repair", "--node", peers, "--replicas", "3", "--dry-run")
    expect(rc == 1 and "already at their targets (N = 3, 2 nodes live)" in out,
           f"dry run, r = 3 with {x.addr} dead: exit {rc} {out!r}")
    rc, out = cli("repair", "--node", peers, "--replicas", "2", "--dry-run")
    expect(rc == 1 and "already at their 2 target nodes" in out, f"dry run text: {rc} {out!r}")
    expect(holdings(live) == {s: first2[s] - {x.addr} for s in sids}, "--dry-run changed something")
    gone = had_x[0]  # rm while a replica is down: X keeps its copy (exit 1 says so)
    rc, _ = cli("rm", "--node", peers, "--replicas", "2", "--session", gone)
    expect(rc == 1, f"rm {gone} with {x.addr} dead exited {rc}, not 1")
    reput = had_x[1]  # put again with other contents: X keeps the old version
    kvd2 = os.path.join(TMP, "in2.kvd")
    kvptest.write_kvd(kvd2, L, T, H, D, (v / 2 for v in body))
    toks = os.path.join(TMP, "tokens2.bin")  # other tokens: other chunk keys, other pages
    with open(toks, "wb") as f:
        f.write(array.array("I", ((t * 7919 + 11) % 32000 for t in range(T))).tobytes())
    rc, _ = cli("put", "--node", peers, "--replicas", "2", "--session", reput, "--kvd", kvd2,
                "--tokens", toks, "--codec", "kivi" if int(reput[1:]) % 2 else "fp16")
    expect(rc == 0, f"re-put {reput} with {x.addr} dead exited {rc}")
    old_reput, reference[reput] = reference[reput], fetch(peers, reput)
    expect(reference[reput] not in (None, old_reput), f"re-put {reput} did not change it")
    first2 = {s: v for s, v in first2.items() if s != gone}
    rc, res = repair(peers)
    expect(rc == 1 and res.get("unreachable") == [x.addr] and res.get("failed") == 0 and
           res.get("copied") == len(had_x) - 2 and res.get("deleted_surplus") == 0 and
           res.get("deleted_tombstoned") == 0 and res.get("sessions") == 9 and
           res.get("bytes_moved", 0) > 0 and res.get("unverifiable") == len(had_x) - 1,
           f"repair with {x.addr} dead: exit {rc}, {res}")
    where = holdings(live)
    expect(where == {s: {n.addr for n in live} for s in first2},
           f"after repair with {x.addr} dead, sessions are not on both survivors: {where}")
    identical_everywhere(where, reference, "survivors")

    # X comes back on its port and data dir: its copy of the rm'ed session is deleted (newer
    # tombstone), its old copy of the re-put one replaced, stand-in copies go
    x.start()
    expect(holdings([x]).get(gone) == {x.addr}, f"{x.addr} did not come back with {gone}")
    # every node answers, but there is work: a dry run says so with exit 1 (it exited 0, so a
    # health check built on it always passed)
    rc, plan = repair(peers, "--dry-run")
    expect(rc == 1 and plan.get("unreachable") == [] and plan.get("already_ok", 0) < 9,
           f"dry run with work to do: exit {rc}, {plan}")
    rc, res = repair(peers)
    stand_ins = len(had_x) - 1  # each session X held (but the rm'ed one) has a stand-in copy
    acts = {a["session"]: a for a in res.get("actions", [])}
    expect(rc == 0 and res.get("failed") == 0 and res.get("unreachable") == [] and
           res.get("copied") == 1 and res.get("replaced_stale") == 1 and
           res.get("deleted_tombstoned") == 1 and res.get("deleted_surplus") == stand_ins,
           f"repair after {x.addr} rejoined: exit {rc}, {res}")
    expect(acts.get(gone, {}).get("tombstoned") is True and acts[gone]["copy_to"] == [] and
           acts.get(reput, {}).get("replace_stale") == [x.addr],
           f"per-session actions do not say so: {acts.get(gone)}, {acts.get(reput)}")
    where = holdings(nodes)
    expect(where == first2, f"after the rejoin repair: {where}, rank says {first2}")
    identical_everywhere(where, reference, "rejoined")
    rc, out = cli("ls", "--node", peers, "--deleted", "--json")
    dels = [s for s in json.loads(out)["sessions"] if s.get("deleted")] if rc == 0 else []
    expect(rc == 0 and [s["session"] for s in dels] == [gone],
           f"ls --deleted does not show the tombstone of {gone}: {rc} {dels}")
    rc, out = cli("ls", "--node", peers, "--deleted")
    expect(rc == 0 and out.rstrip().endswith("\n9 sessions, 1 tombstone"),
           f"ls --deleted text counts the tombstone apart: {rc} {out[-200:]!r}")
    rc, res = repair(peers)
    expect(rc == 0 and res.get("copied") == 0 and res.get("deleted_surplus") == 0 and
           res.get("deleted_tombstoned") == 0 and res.get("replaced_stale") == 0 and
           res.get("already_ok") == 9 and res.get("actions") == [],
           f"second repair is not a no-op: exit {rc}, {res}")
    rc, plan = repair(peers, "--dry-run")
    expect(rc == 0 and plan.get("already_ok") == 9, f"dry run with nothing to do: exit {rc}")
    # the --watch agent on the static list: its start pass is the same no-op (it used to repair to
    # 1 copy, the list's nodes uncounted, and delete every second copy as surplus)
    p = subprocess.Popen([KVPACK, "repair", "--node", peers, "--replicas", "2", "--watch",
                          "--json", "--timeout-ms", "5000"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV)
    first_pass = p.stdout.readline()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    res = json.loads(first_pass) if first_pass.strip() else {}
    expect(res.get("replicas") == 2 and res.get("deleted_surplus") == 0 and
           res.get("already_ok") == 9 and holdings(nodes) == first2,
           f"repair --watch --node: {res} {err.strip()}")

    # X dies in the middle of a repair that must delete stand-in copies
    x.kill()
    rc, _ = repair(peers)
    expect(rc == 1, f"repair with {x.addr} dead again exited {rc}")
    x.start()
    order = [s["session"] for s in json.loads(cli("ls", "--node", peers, "--json")[1])["sessions"]]
    later_work = [s for s in order[1:] if x.addr in first2[s]]  # each has a stand-in copy now
    expect(later_work != [], f"no stand-in copy to delete after the first session: {order}")
    p = subprocess.Popen([KVPACK, "repair", "--node", peers, "--replicas", "2", "--json",
                          "--timeout-ms", "5000"], stdout=subprocess.PIPE, text=True,
                         env=dict(ENV, KVP_REPAIR_STOP_AFTER="1"))
    _, status = os.waitpid(p.pid, os.WUNTRACED)
    expect(os.WIFSTOPPED(status), "repair did not stop after its first session")
    x.kill()
    os.kill(p.pid, signal.SIGCONT)
    out, _ = p.communicate(timeout=120)
    res = json.loads(out) if out.strip() else {}
    expect(p.returncode == 1 and res.get("failed", 0) >= len(later_work) and
           x.addr in res.get("unreachable", []), f"repair with X dying: exit {p.returncode}, {res}")
    where = holdings(live)
    for sid in first2:
        expect(fetch(",".join(n.addr for n in live), sid) == reference[sid],
               f"{sid} lost after {x.addr} died mid-repair")
    expect(all(where.get(s) == {n.addr for n in live} for s in later_work),
           f"a stand-in copy was deleted while its target {x.addr} was dead: {where}")
    x.start()
    rc, res = repair(peers)
    expect(rc == 0 and holdings(nodes) == first2, f"last repair did not converge: exit {rc}, {res}")
    # no node answers: exit 1, and under --json the summary all the same, every node unreachable
    # (nothing was printed: a --watch reader saw a gap in the pass numbers)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{sk.getsockname()[1]}"  # bound, not listening: refused
        rc, res = repair(gone, "--replicas", "1")
    expect(rc == 1 and res.get("unreachable") == [gone] and res.get("sessions") == 0,
           f"repair with no node answering: exit {rc}, {res}")
finally:
    for n in nodes:
        if n.proc is not None and n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait()
    shutil.rmtree(TMP, ignore_errors=True)

print("check_repair_cli:", "FAILED" if failures else "all checks passed")
sys.exit(1 if failures else 0)
