#!/usr/bin/env python3
"""check_loadtest_cluster.py - `kvpack loadtest` over several nodes. synthetic / replay: 3 local
nodes, --replicas 2, budget large enough that nothing is evicted: every request done, 0 CRC
failures, hits == the placed reference <= the single-cache reference (and on the synthetic workload,
where users share nothing, placed == single), hit_ratio_note names placement exactly when it cost
hits, each node holds exactly the sessions its rank names
(2 copies per session), and a replay interrupted mid-run still has hits == the placed reference
(the references count only the requests that ran); kill: 3 nodes started here and warmed up (spills, restores), one
SIGKILLed mid-run: the run finishes every request from the other replica, names the dead node's
failures, exits 3, and no node counter goes negative (the dead node counts with its last
statistics); kill_r1: the same with --replicas 1: a resume whose only copy died is counted
lost and the run goes on (exit 3); dead_peer: a --node that is down from the start holds none of
the run's sessions, so its failed deletes leave none behind (cleanup.left 0); rerun: the same run twice against one node, the second hits only what the first did
(each run's namespace is salted), and each leaves the node as it found it (no session, no DRAM
byte), as does one interrupted mid-run; with --keep-sessions the node keeps exactly the run's
sessions, under the namespace its report names; versions: 2 nodes, --replicas 2
--keep-sessions: both copies of every session carry one version (it is taken once per request),
and `kvpack repair --dry-run` finds nothing to replace; errors: bad combinations exit 2 with a
clear message.
usage: check_loadtest_cluster.py CASE KVPACK KVPACKD [TRACE]"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

case, KVPACK, KVPACKD = sys.argv[1], sys.argv[2], sys.argv[3]
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check


def loadtest(args, timeout=120):
    p = subprocess.run([KVPACK, "loadtest", "--json", *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def check_placed(r, nodes, replicas):
    ref = r["reference"]
    print(f"hits {r['hit_blocks']}, placed reference {ref['placed_hit_blocks']}, single cache "
          f"{ref['single_cache_hit_blocks']}, per node",
          [(n["sessions"], n["expected_sessions"]) for n in r["nodes"]])
    check(r["ok"] and r["requests"] == sum(w["requests"] for w in r["windows"]) > 0,
          "not every request done")
    check(r["node_stats"]["crc_failures"] == 0, "CRC failures")
    check(r["node_stats"]["spills"] == 0, "spills: the budget was meant to hold everything")
    check(r["hit_blocks"] == ref["placed_hit_blocks"], "hits != placed reference")
    check(ref["placed_hit_blocks"] <= ref["single_cache_hit_blocks"], "placed > single-cache")
    check(len(r["nodes"]) == nodes and r["replicas"] == replicas, "node list / replicas")
    # the note explains the hits: where placement cost some (placed < single cache), it says so
    # and does not blame partial blocks alone (it used to, never looking at the node count)
    note = r["hit_ratio_note"]
    print(f"hit_ratio_note: {note}")
    if r["hit_blocks"] < ref["single_cache_hit_blocks"]:
        check("placement" in note and "placed_hit_blocks" in note and "only where" not in note,
              f"hits below the single-cache reference, the note does not say placement: {note!r}")
    else:
        check("placement" not in note, f"no hit lost to placement, the note says so: {note!r}")
    check(all(n["sessions"] == n["expected_sessions"] and n["failures"] == 0 for n in r["nodes"]),
          "a node's session count differs from its rank's")
    check(sum(n["sessions"] for n in r["nodes"]) == r["node_stats"]["sessions"] and
          sum(n["expected_sessions"] for n in r["nodes"]) % replicas == 0,
          "sessions summed over nodes: not r copies each")


def case_synthetic():
    U, R, T = 6, 4, 700
    rc, r, err = loadtest(["--local-nodes", "3", "--replicas", "2", "--users", str(U), "--rounds",
                           str(R), "--turn-tokens", str(T), "--dram-budget", "256M"])
    check(rc == 0, f"exit {rc}: {err[-300:]}")
    check_placed(r, 3, 2)
    check(r["node_stats"]["sessions"] == 2 * U, "want 2 copies of each of the users' sessions")
    check(r["reference"]["placed_hit_blocks"] == r["reference"]["single_cache_hit_blocks"],
          "users share nothing: placement cannot cost a hit")
    check(r["hit_blocks"] > 0, "no hits")
    # --dram-budget is per node; the total is named so (dram_budget was the sum over the nodes)
    check(r["dram_budget"] == 256 << 20 and r["dram_budget_total"] == 3 * (256 << 20),
          f"dram_budget {r['dram_budget']}, total {r.get('dram_budget_total')}")


def case_replay(trace):
    if not os.path.exists(trace):
        print(f"SKIP: trace {trace} not present (../shared/traces beside the repository)")
        sys.exit(77)
    rc, r, err = loadtest(["--local-nodes", "3", "--replicas", "2", "--trace", trace,
                           "--max-requests", "300", "--dram-budget", "2G"])
    check(rc == 0, f"exit {rc}: {err[-300:]}")
    check_placed(r, 3, 2)
    check(r["reference"]["single_cache_hit_blocks"] <= r["unbounded_hit_blocks"],
          "single-cache reference above the id-level unbounded count")
    # interrupted: the references count the requests that ran, as the hits do (they counted the
    # whole trace, so the note blamed missing pages on an interrupted run that lost none)
    lt = subprocess.Popen([KVPACK, "loadtest", "--json", "--local-nodes", "3", "--replicas", "2",
                           "--trace", trace, "--dram-budget", "2G"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # where the interrupt lands, not a speed check: the whole trace takes minutes
    lt.send_signal(signal.SIGINT)
    out, err = lt.communicate(timeout=120)  # a hang guard
    r = json.loads(out) if out.strip() else {}
    ref = r.get("reference", {})
    print(f"interrupted: exit {lt.returncode}, {r.get('requests')} requests, hits "
          f"{r.get('hit_blocks')}, placed reference {ref.get('placed_hit_blocks')}")
    check(lt.returncode == 130 and r.get("ok") is False and r.get("requests", 0) > 0,
          f"interrupted: exit {lt.returncode}, ok {r.get('ok')}: {err[-300:]!r}")
    check(r.get("hit_blocks") == ref.get("placed_hit_blocks") and
          ref.get("placed_hit_blocks", 0) <= ref.get("single_cache_hit_blocks", -1) and
          "were not there" not in r.get("hit_ratio_note", ""),
          f"interrupted: hits vs the references of the requests that ran: {r.get('hit_blocks')} "
          f"{ref} {r.get('hit_ratio_note')!r}")


def start_node(d, k, http=False, budget="256M"):
    """Node k; with http, also its /metrics (the HTTP port in d/httpK once it listens)."""
    extra = ["--http", "127.0.0.1:0", "--http-ready-file", os.path.join(d, f"http{k}")] if http else []
    return kvptest.start_kvpackd(KVPACKD, os.path.join(d, f"ready{k}"),
                                 ["--listen", "127.0.0.1:0", "--data-dir", os.path.join(d, f"n{k}"),
                                  "--dram-budget", budget, *extra], stderr=subprocess.DEVNULL,
                                 what=f"kvpackd {k}")


def stop_nodes(nodes, d):
    """Kill the nodes still running (start_node's (proc, addr) pairs), remove their dir d."""
    for p, _ in nodes:
        if p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run(["rm", "-rf", d])


def sessions_of(url):
    """kvpack_sessions from a node's /metrics (a plain HTTP GET: no UCX set-up per poll)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("kvpack_sessions "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0


def case_kill(replicas=2):
    """replicas 2: every request is served by the other copy. replicas 1: a session whose only
    copy was on the dead node cannot be resumed; that resume is counted lost (resumes_lost), the
    request's put sends its pages again, and the run goes on (it used to stop every client with
    "resume (get of the previous turn) failed: peer unreachable", exit 1)."""
    d = tempfile.mkdtemp(prefix="kvp_ltc_kill_")
    nodes = [start_node(d, k, http=k == 1, budget="16M") for k in range(3)]
    try:
        with open(os.path.join(d, "http1")) as f:
            metrics = f"http://127.0.0.1:{f.read().strip()}/metrics"
        peers = ",".join(a for _, a in nodes)
        # warm-up (another geometry, so another namespace): ~50 MiB a node through 16 MiB budgets
        # leaves every node with spills and restores counted. The run below then starts from them,
        # and once node 1 is dead its counters must still count (they used to drop out of the
        # window ends only: negative spills in JSON, 1.8e19 in text)
        rc, r, err = loadtest(["--node", peers, "--replicas", "2", "--layers", "4", "--users", "32",
                               "--rounds", "3", "--turn-tokens", "2048"])
        check(rc == 0 and r["node_stats"]["spills"] > 0, f"warm-up: exit {rc}: {err[-300:]}")
        before = sessions_of(metrics)
        # 24 users (one session each): with 4, the ports' rendezvous ranks could leave node 1 out
        # of every session's two copies, and the kill never came (2 runs of 25); with one copy,
        # node 1 must be the first of at least two users' ranks (it fails to be for 12 users in
        # 5 % of runs, for 24 in 0.08 %), so that one's session is still there, a resume ahead,
        # when the kill lands (one client: one request at a time, the kill inside one user's)
        lt = subprocess.Popen([KVPACK, "loadtest", "--json", "--node", peers, "--replicas",
                               str(replicas), "--users", "24", "--rounds", "10", "--turn-tokens",
                               "256", "--timeout-ms", "3000"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # once node 1 holds a session the run is under way: freeze the load generator, kill the
        # node, let the run go on (so the kill always lands mid-run, however fast or loaded the
        # machine: node 1's /metrics is polled over plain HTTP, a few ms a poll, where a
        # `kvpack stat` per poll set up UCX each time and let a loaded run get near its end)
        for _ in range(6000):
            if sessions_of(metrics) > before:
                break
            if lt.poll() is not None:
                check(False, "loadtest ended before node 1 held a session")
                break
            time.sleep(0.005)
        lt.send_signal(signal.SIGSTOP)
        nodes[1][0].send_signal(signal.SIGKILL)
        nodes[1][0].wait()
        lt.send_signal(signal.SIGCONT)
        try:
            out, err = lt.communicate(timeout=120)  # a hang guard, not a speed assertion
        except subprocess.TimeoutExpired:
            lt.kill()
            check(False, "loadtest hung after a node died")
            return
        print("\n".join(err.replace("\r", "\n").strip().splitlines()[-3:]))
        check(lt.returncode == 3, f"exit {lt.returncode}, want 3 (all done, a node failed)")
        r = json.loads(out)
        check(r["ok"] and r["requests"] == 240, "not every request done")
        check(r["nodes"][1]["failures"] > 0 and not r["nodes"][1]["reachable_at_end"],
              "the killed node's failures are not reported")
        check(r["nodes"][0]["failures"] == 0 and r["nodes"][2]["failures"] == 0,
              "failures on a live node")
        check(r["node_stats"]["crc_failures"] == 0, "CRC failures")
        check(nodes[1][1] in err and "skips it" in err, "no line naming the dead node")
        # 24 users x 9 later rounds resume the previous one: each is done or counted lost; with
        # one copy, node 1 held sessions when it died, so a user's next resume is lost. A kill
        # between a put to node 1 and its get loses that get (fetches_lost: the run used to stop
        # there, exit 1), and that user's next resume
        lost, flost = r.get("resumes_lost"), r.get("fetches_lost")
        print(f"resumes {r['resumes']}, lost {lost}, gets lost {flost}")
        check(lost is not None and flost is not None and r["resumes"] + lost == 24 * 9 and
              (lost > 0 if replicas == 1 else lost == 0 and flost == 0),
              f"replicas {replicas}: resumes {r['resumes']} + lost {lost}, want 216; gets lost "
              f"{flost}")
        # a lost resume is not timed as one (its failed get was in the resume percentiles)
        check(r["latency_ms"]["resume"]["n"] == r["resumes"],
              f"resume latencies {r['latency_ms']['resume']['n']} != resumes {r['resumes']}")
        # hits above the placed reference: the failover moved sessions (the note used to blame
        # repeated partial blocks, the single-node text)
        note, ref = r["hit_ratio_note"], r["reference"]
        if r["hit_blocks"] > ref["placed_hit_blocks"]:
            check("above reference.placed_hit_blocks" in note and "only where" not in note,
                  f"hits {r['hit_blocks']} > placed {ref['placed_hit_blocks']}: note {note!r}")
        counters = [(k, r["node_stats"][k]) for k in ("spills", "restores", "crc_failures",
                                                      "disk_errors")]
        wins = [(w["spills"], w["restores"]) for w in r["windows"]]
        print("node_stats", counters, "windows", wins)
        check(all(v >= 0 for _, v in counters) and all(a >= 0 and b >= 0 for a, b in wins),
              "a node counter went negative after the node died")
        check(sum(a for a, _ in wins) == r["node_stats"]["spills"] and
              sum(b for _, b in wins) == r["node_stats"]["restores"],
              "window spills/restores do not add up to the run's")
    finally:
        stop_nodes(nodes, d)


def case_dead_peer():
    """--node lists a node that is down from the start (it never takes a put): the run skips it
    (exit 3), and its cleanup deletes every session from the live nodes. The delete of a session
    ranked first on the dead node reports it unreachable; that session used to count as left
    ("could not be deleted", cleanup.left) though no copy of it stays anywhere."""
    d = tempfile.mkdtemp(prefix="kvp_ltc_peer_")
    nodes = [start_node(d, k) for k in range(2)]
    try:
        with socket.socket() as sk:  # a port nothing listens on
            sk.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{sk.getsockname()[1]}"
        peers = ",".join([nodes[0][1], dead, nodes[1][1]])
        # 30 users: the dead node ranks none of them first with odds (2/3)^30 = 5e-6 (with 12,
        # 0.8 %: a CI run failed so); the ranks are salted afresh every run
        users = 30
        rc, r, err = loadtest(["--node", peers, "--users", str(users), "--rounds", "2",
                               "--turn-tokens", "700", "--timeout-ms", "3000"])
        print("\n".join(err.strip().splitlines()[-3:]))
        check(rc == 3 and r is not None and r["ok"] and r["requests"] == 2 * users,
              f"exit {rc} (want 3, every request done): {err[-300:]!r}")
        if r is None:
            return
        dn = [n for n in r["nodes"] if n["node"] == dead]
        check(len(dn) == 1 and dn[0]["failures"] > 0 and dn[0]["expected_sessions"] > 0,
              f"the dead node ranked no session first, or no failure counted: {dn}")
        c = r["cleanup"]
        check(c["deleted"] == c["sessions"] == users and c["left"] == 0,
              f"every session deleted from the live nodes, none left: {c}")
        check(f"deleted {users} of its {users} sessions from the nodes, 0 could not be" in err,
              f"stderr summary: {err[-300:]!r}")
        for _, addr in nodes:
            sessions, _, ns = node_holds(addr)
            check(sessions == 0 and r["namespace"] not in ns, f"{addr} kept the run's sessions")
        # the text report has no figures for the dead node (it printed "0 sessions ... dram 0")
        p = subprocess.run([KVPACK, "loadtest", "--node", peers, "--users", "2", "--rounds", "1",
                            "--turn-tokens", "700", "--timeout-ms", "3000"], capture_output=True,
                           text=True, timeout=120)
        line = [l for l in p.stdout.splitlines() if l.strip().startswith(f"node {dead}")]
        print(line)
        check(p.returncode == 3 and len(line) == 1 and "unreachable" in line[0] and
              "sessions (" not in line[0] and "dram" not in line[0],
              f"text line of the dead node: exit {p.returncode}, {line}")
    finally:
        stop_nodes(nodes, d)


def node_holds(addr):
    """(sessions, dram_bytes) from `kvpack stat`, and the namespaces `kvpack ls` lists."""
    st = json.loads(subprocess.run([KVPACK, "stat", "--node", addr, "--json"], capture_output=True,
                                   text=True, timeout=60).stdout)
    ls = json.loads(subprocess.run([KVPACK, "ls", "--node", addr, "--json"], capture_output=True,
                                   text=True, timeout=60).stdout)
    return st["sessions"], st["dram_bytes"], [e["ns"] for e in ls["sessions"]]


def check_left_clean(addr, r, err, what):
    """After a run against addr: its sessions were deleted (report, stderr) and the node holds
    nothing (each run leaving its sessions under a new namespace filled the node run by run)."""
    sessions, dram, ns = node_holds(addr)
    print(f"{what}: cleanup {r.get('cleanup')}; node: {sessions} sessions, {dram} DRAM bytes, "
          f"ns {ns}")
    check(sessions == 0 and dram == 0 and ns == [], f"{what}: the node kept the run's sessions")
    c = r.get("cleanup", {})
    check(c.get("mode") == "delete" and c.get("sessions", 0) > 0 and
          c.get("deleted") == c.get("sessions") and c.get("left") == 0,
          f"{what}: the report does not say its sessions were deleted: {c}")
    n = c.get("sessions")
    check(f"deleted {n} of its {n} sessions from the nodes, 0 could not be" in err,
          f"{what}: no summary line on stderr: {err[-300:]!r}")


def case_rerun():
    """The same synthetic run twice against one node: the second's hits are its own, as the
    first's (it used to hit every page the first put: ~100 % next to an unbounded count of a few,
    and a note saying "below"); each run deletes its sessions from the node when it ends (they used
    to stay, a new copy each run), also when interrupted; --keep-sessions keeps them."""
    d = tempfile.mkdtemp(prefix="kvp_ltc_rerun_")
    node = start_node(d, 0, http=True)
    try:
        with open(os.path.join(d, "http0")) as f:
            metrics = f"http://127.0.0.1:{f.read().strip()}/metrics"
        runs = []
        for k in range(2):
            rc, r, err = loadtest(["--node", node[1], "--users", "3", "--rounds", "3",
                                   "--turn-tokens", "700"])
            check(rc == 0 and r is not None, f"exit {rc}: {err[-300:]}")
            if r is None:
                return
            runs.append(r)
            print(f"hit_blocks {r['hit_blocks']} / {r['blocks']}, unbounded "
                  f"{r['unbounded_hit_blocks']}, salt {r.get('run_salt')}, ns {r['namespace']}")
            check_left_clean(node[1], r, err, f"run {k + 1}")
        a, b = runs
        check(b["hit_blocks"] == a["hit_blocks"] and b["hit_chunks"] == a["hit_chunks"],
              "the second run hit pages of the first")
        check(b["hit_blocks"] <= b["unbounded_hit_blocks"], "hits above the unbounded count")
        check(a.get("run_salt") != b.get("run_salt") and a["namespace"] != b["namespace"],
              "both runs in one namespace")
        # interrupted once the node holds a session (its /metrics polled over plain HTTP): the
        # sessions put so far are deleted on the way out, and the exit says interrupted
        lt = subprocess.Popen([KVPACK, "loadtest", "--json", "--node", node[1], "--users", "4",
                               "--rounds", "400", "--turn-tokens", "256"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(6000):
            if sessions_of(metrics) > 0 or lt.poll() is not None:
                break
            time.sleep(0.005)
        lt.send_signal(signal.SIGINT)
        try:
            out, err = lt.communicate(timeout=120)  # a hang guard, not a speed assertion
        except subprocess.TimeoutExpired:
            lt.kill()
            out, err = lt.communicate()
            check(False, "loadtest hung after SIGINT")
        r = json.loads(out) if out.strip() else {}
        check(lt.returncode == 130 and r.get("ok") is False,
              f"interrupted: exit {lt.returncode}, ok {r.get('ok')}: {err[-300:]!r}")
        check_left_clean(node[1], r, err, "interrupted")
        # --keep-sessions: the node keeps the run's sessions, under the namespace it reports
        rc, r, err = loadtest(["--node", node[1], "--users", "3", "--rounds", "2",
                               "--turn-tokens", "700", "--keep-sessions"])
        check(rc == 0 and r is not None, f"--keep-sessions: exit {rc}: {err[-300:]}")
        if r is None:
            return
        sessions, dram, ns = node_holds(node[1])
        print(f"--keep-sessions: cleanup {r['cleanup']}; node: {sessions} sessions, ns {ns}")
        check(sessions == 3 and ns == [r["namespace"]] * 3 and dram > 0,
              "--keep-sessions: the node does not hold exactly the run's 3 sessions")
        check(r["cleanup"] == {"mode": "keep", "sessions": 3, "deleted": 0, "absent": 0, "left": 3,
                               "departed_nodes": 0, "departed_deleted": 0,
                               "departed_unreachable": 0},
              f"--keep-sessions: report {r['cleanup']}")
        check("deleted" not in err, f"--keep-sessions: a delete was reported: {err[-300:]!r}")
    finally:
        node[0].kill()
        node[0].wait()
        subprocess.run(["rm", "-rf", d])

def case_versions():
    """--replicas 2 --keep-sessions on 2 nodes: every session's two copies carry the same version
    (each replica of a request used to get a kvp_version_now() of its own put, so every copy
    looked divergent and repair rewrote them all), and repair --dry-run finds nothing stale."""
    d = tempfile.mkdtemp(prefix="kvp_ltc_ver_")
    nodes = [start_node(d, k) for k in range(2)]
    try:
        peers = ",".join(a for _, a in nodes)
        rc, r, err = loadtest(["--node", peers, "--replicas", "2", "--users", "6", "--rounds", "2",
                               "--turn-tokens", "700", "--keep-sessions"])
        check(rc == 0 and r is not None, f"exit {rc}: {err[-300:]}")
        vers = []
        for _, addr in nodes:
            ls = json.loads(subprocess.run([KVPACK, "ls", "--node", addr, "--json"],
                                           capture_output=True, text=True, timeout=60).stdout)
            vers.append({(e["ns"], e["session"]): e["version"] for e in ls["sessions"]})
        both = set(vers[0]) & set(vers[1])
        diff = sorted(k for k in both if vers[0][k] != vers[1][k])
        print(f"sessions on both nodes: {len(both)}, with different versions: {len(diff)} "
              f"{[(k[1], vers[0][k], vers[1][k]) for k in diff[:3]]}")
        check(len(both) == 6 and set(vers[0]) == set(vers[1]), "not every session on both nodes")
        check(not diff, "the copies of one put carry different versions")
        p = subprocess.run([KVPACK, "repair", "--node", peers, "--replicas", "2", "--dry-run",
                            "--json"], capture_output=True, text=True, timeout=120)
        plan = json.loads(p.stdout) if p.stdout.strip() else {}
        got = {k: plan.get(k) for k in ("sessions", "already_ok", "replaced_stale", "bytes_moved")}
        print("repair --dry-run:", got)
        check(p.returncode == 0 and got == {"sessions": 6, "already_ok": 6, "replaced_stale": 0,
                                            "bytes_moved": 0},
              f"repair --dry-run after the run: exit {p.returncode}, {got}: {p.stderr[-300:]}")
    finally:
        stop_nodes(nodes, d)


def case_errors():
    for args, want in ((["--local-nodes", "2", "--node", "127.0.0.1:1"], "one of --node"),
                       (["--local-nodes", "2", "--replicas", "3"], "--replicas 3"),
                       (["--node", "127.0.0.1:1,127.0.0.1:2", "--replicas", "3"], "--replicas 3"),
                       (["--local-nodes", "0"], "--local-nodes"),
                       (["--replicas", "0"], "--replicas wants 1 or more, got 0"),
                       (["--keep-sessions"], "--keep-sessions applies to --node / --etcd")):
        rc, r, err = loadtest(["--users", "2", "--rounds", "2", "--turn-tokens", "600", *args])
        check(rc == 2 and want in err and len(err.strip().splitlines()) == 1,
              f"{args}: exit {rc}, stderr {err!r}")


{"synthetic": case_synthetic, "replay": lambda: case_replay(sys.argv[4]), "kill": case_kill,
 "kill_r1": lambda: case_kill(1), "dead_peer": case_dead_peer,
 "errors": case_errors, "rerun": case_rerun, "versions": case_versions}[case]()
print("FAILED" if fails else f"check_loadtest_cluster {case}: all checks passed")
sys.exit(1 if fails else 0)
