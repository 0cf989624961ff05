#!/usr/bin/env python3
"""check_cluster_cli.py - `kvpack put/get/ls/rm` over 3 kvpackd nodes (write-through data dirs) with
--replicas 2: each of 12 sessions is on exactly the 2 nodes its rendezvous rank names (per-node ls)
and the merged ls lists it once; stat reports each node and totals that add up; SIGKILL the node
that is primary for the most sessions: every session still gets byte-identical from a survivor, an
unknown session says a node is unreachable, a put skips the dead node, stat names it (exit 1) and
reports the others, an rm of a session it holds is exit 1 (it may keep a copy); restart it on its
port and data dir: it lists its sessions again (warm rejoin), serves the gets it is primary for, the
rm completes; rm removes a session from both replicas; --replicas 4 of 3 is refused, and so is a
node listed twice (one line, exit 2).
usage: check_cluster_cli.py KVPACK KVPACKD"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack, kvpackd = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="kvp_clu_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
procs = {}  # addr -> Popen


def start_node(k, port=0):
    """Node k on 127.0.0.1:port (0: a free one) with data in tmp/nK; returns its address."""
    proc, addr = kvptest.start_kvpackd(
        kvpackd, os.path.join(tmp, f"ready{k}"),
        ["--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(tmp, f"n{k}"),
         "--dram-budget", "32M", "--durability", "write-through"], env=env, what=f"kvpackd {k}")
    procs[addr] = proc
    return addr


def kv(cmd, node, *args):
    """Run `kvpack CMD --node NODE ARGS`; returns (exit status, stdout, stderr)."""
    p = subprocess.run([kvpack, cmd, "--node", node, "--timeout-ms", "5000", *args],
                       capture_output=True, text=True, timeout=120, env=env)
    if p.stderr:
        sys.stderr.write(p.stderr)
    return p.returncode, p.stdout, p.stderr


def held_by(addr):
    """Session ids node addr lists on its own."""
    rc, out, _ = kv("ls", addr, "--json")
    check(rc == 0, f"ls --node {addr} exited {rc}")
    return {s["session"] for s in json.loads(out)["sessions"]} if rc == 0 else set()


def make_kvd(path, L, T, H, D):
    """A .kvd whose values (multiples of 1/64 in [-4, 4]) are exact in fp16."""
    kvptest.write_kvd(path, L, T, H, D, (((i * 7919) % 513 - 256) / 64.0
                                          for i in range(2 * L * T * H * D)))


def p(name):
    return os.path.join(tmp, name)


def get_bytes(nodes, sid, out):
    """get SID over nodes into out; returns (bytes or None, the node that served it)."""
    rc, so, _ = kv("get", nodes, "--session", sid, "--out", p(out), "--json")
    if rc != 0:
        return None, None
    return open(p(out), "rb").read(), json.loads(so).get("from")


try:
    addrs = [start_node(k) for k in range(3)]
    peers = ",".join(addrs)
    make_kvd(p("a.kvd"), 2, 200, 2, 64)
    original = open(p("a.kvd"), "rb").read()
    sids = [f"s{i:02d}" for i in range(12)]
    rank, before = {}, {}
    for i, sid in enumerate(sids):
        codec = "fp16" if i % 2 == 0 else "kivi"
        rc, out, _ = kv("put", peers, "--replicas", "2", "--session", sid, "--kvd", p("a.kvd"),
                        "--codec", codec, "--json")
        check(rc == 0, f"put {sid} exited {rc}")
        if rc == 0:
            put = json.loads(out)
            rank[sid] = put["rank"]
            check(sorted(put["rank"]) == sorted(addrs), f"put {sid} rank {put['rank']}")
            check(put["replicas"] == 2 and put["nodes"] == put["rank"][:2],
                  f"put {sid} went to {put['nodes']}, rank {put['rank']}")
    # each session on exactly its rank's first 2 nodes
    held = {a: held_by(a) for a in addrs}
    for sid in rank:
        on = sorted(a for a in addrs if sid in held[a])
        check(on == sorted(rank[sid][:2]), f"{sid} is on {on}, rank says {rank[sid][:2]}")
    rc, out, _ = kv("ls", peers, "--json")
    merged = json.loads(out) if rc == 0 else {"sessions": []}
    check(rc == 0 and merged["count"] == 12 and merged["unreachable"] == [] and
          all(sorted(s["nodes"]) == sorted(rank[s["session"]][:2]) for s in merged["sessions"]),
          f"merged ls: {merged}")
    # stat over the 3 nodes: each node's own figures, and totals that add them up
    rc, out, _ = kv("stat", peers, "--json")
    st = json.loads(out) if rc == 0 else {"nodes": []}
    check(rc == 0 and [n["node"] for n in st["nodes"]] == addrs and st["answered"] == 3 and
          st["unreachable"] == 0 and all(n["ok"] for n in st["nodes"]), f"stat of 3 nodes: {st}")
    for n in st["nodes"]:
        check(n.get("sessions") == len(held[n["node"]]),
              f"stat says {n['node']} holds {n.get('sessions')} sessions, its ls {len(held[n['node']])}")
    check(st.get("total", {}).get("sessions") == 24 and
          st["total"].get("dram_pages") == sum(n.get("dram_pages", 0) for n in st["nodes"]) and
          "uptime_ms" not in st["total"], f"stat totals: {st.get('total')}")
    for sid in rank:
        before[sid], _ = get_bytes(peers, sid, f"{sid}.kvd")
        check(before[sid] is not None, f"get {sid} failed with all nodes up")
        if int(sid[1:]) % 2 == 0:
            check(before[sid] == original, f"fp16 {sid} not bit-exact")

    # SIGKILL the node that is primary for the most sessions
    primary_of = {a: [s for s in rank if rank[s][0] == a] for a in addrs}
    dead = max(addrs, key=lambda a: len(primary_of[a]))
    dead_port = dead.split(":")[1]
    procs[dead].kill()
    procs[dead].wait()
    for sid in rank:
        got, src = get_bytes(peers, sid, f"{sid}_dead.kvd")
        check(got == before[sid], f"{sid} not byte-identical with {dead} dead (from {src})")
        check(src is None or src != dead, f"{sid} said it came from the dead node")
        if sid in primary_of[dead]:
            check(src == rank[sid][1], f"{sid} came from {src}, not its second {rank[sid][1]}")
    rc, out, err = kv("stat", peers, "--json")
    st = json.loads(out) if out else {"nodes": []}
    bad = [n for n in st["nodes"] if not n["ok"]]
    check(rc == 1 and st["answered"] == 2 and st["unreachable"] == 1 and len(bad) == 1 and
          bad[0]["node"] == dead and "sessions" not in bad[0] and dead in err,
          f"stat with {dead} dead: exit {rc}, {st}, {err!r}")
    rc, out, _ = kv("stat", peers)
    rows = out.splitlines()
    check(rc == 1 and len(rows) == 5 and rows[-1].startswith("total") and
          any(r.startswith(dead) and "unreachable" in r.lower() for r in rows),
          f"stat text with a node dead: exit {rc}\n{out}")
    ns = json.loads(kv("ls", addrs[(addrs.index(dead) + 1) % 3], "--json")[1])["sessions"][0]["ns"]
    rc, _, err = kv("get", peers, "--session", "nope", "--ns", ns, "--out", p("nope.kvd"))
    check(rc == 1 and ("UNREACHABLE" in err or "PEER_GONE" in err or "TIMEOUT" in err) and
          not os.path.exists(p("nope.kvd")),
          f"get of an unknown session with a node dead does not say unreachable: {err!r}")
    rc, out, err = kv("put", peers, "--replicas", "2", "--session", "late", "--kvd", p("a.kvd"),
                      "--codec", "fp16", "--json")
    late = json.loads(out) if rc == 0 else {}
    check(rc == 0 and late.get("replicas") == 2 and dead not in late.get("nodes", [dead]),
          f"put with a node dead: exit {rc}, {late}")
    victim = next(s for s in rank if dead in rank[s][:2])
    rc, _, err = kv("rm", peers, "--replicas", "2", "--session", victim)
    check(rc == 1 and "may still hold it" in err, f"rm {victim} with a replica dead: exit {rc}")
    check(all(victim not in held_by(a) for a in addrs if a != dead),
          f"rm {victim} left it on a live node")

    # warm rejoin: same port, same data dir
    addr = start_node(addrs.index(dead), dead_port)
    check(addr == dead, f"restarted on {addr}, not {dead}")
    back = held_by(dead)
    check(back == held[dead], f"rejoined node lists {sorted(back)}, before {sorted(held[dead])}")
    for sid in primary_of[dead]:
        got, src = get_bytes(peers, sid, f"{sid}_back.kvd")
        check(got == before[sid] and src == dead, f"{sid} after rejoin came from {src}")
    got, _ = get_bytes(peers, "late", "late.kvd")
    check(got == original, "session put while a node was dead not found after its return")
    rc, _, _ = kv("rm", peers, "--replicas", "2", "--session", victim)
    check(rc == 0 and all(victim not in held_by(a) for a in addrs),
          f"second rm of {victim} after the rejoin: exit {rc}")

    # rm takes a session off both replicas
    sid = next(s for s in rank if s != victim)
    rc, out, _ = kv("rm", peers, "--replicas", "2", "--session", sid, "--json")
    check(rc == 0 and json.loads(out).get("nodes_deleted") == 2, f"rm {sid}: exit {rc} {out}")
    check(all(sid not in held_by(a) for a in addrs), f"rm {sid} left a replica")
    rc, _, err = kv("get", peers, "--session", sid, "--out", p("gone.kvd"))
    check(rc == 1 and "no session" in err, f"get after rm: exit {rc}")

    # more replicas than nodes: a usage error, nothing stored
    rc, _, err = kv("put", peers, "--replicas", "4", "--session", "r4", "--kvd", p("a.kvd"))
    check(rc == 2 and "--replicas 4" in err, f"--replicas 4 of 3 nodes: exit {rc} {err!r}")
    check(all("r4" not in held_by(a) for a in addrs), "--replicas 4 stored something")
    rc, _, err = kv("put", f"{addrs[0]},{addrs[0]}", "--session", "dup", "--kvd", p("a.kvd"))
    check(rc == 2 and err.count("\n") == 1 and "listed twice" not in err and
          f"--node lists {addrs[0]} twice" in err, f"a peer listed twice: exit {rc} {err!r}")
finally:
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)

print("check_cluster_cli:", "FAILED" if fails else "all checks passed")
sys.exit(1 if fails else 0)
