#!/usr/bin/env python3
"""check_cluster_versions.py - what a cluster client was told holds for the next get. Each case is
one a review reproduced, with no node down at the get:
- an overwrite the first-ranked node refuses for a reason of its own (a session over its DRAM
  budget) lands on the next node and is acknowledged; the refusing node's older copy was served
  to every later get. Now the put drops it there, and the get serves the overwrite;
- an rm acknowledged while the node holding a stand-in copy was stopped: after it came back, a
  get walked past the tombstones of the nodes ranked before it and served the deleted session.
  Now a node's NOT_FOUND carries its tombstone's version, and a later node's copy no newer than
  that counts as deleted;
- a put that a replica refuses as older than what it holds (another writer whose clock is ahead)
  was acknowledged OK because another node took it, though the next repair replaces it. Now it
  fails ERR_STALE (exit 1);
- a copy the first-ranked node kept while it was down for an overwrite: a plain get serves it
  (documented, until repair); `get --latest` asks every node first and serves the overwrite;
  with the node holding the overwrite stopped it serves the newest copy of the nodes that answer
  and names the one that did not.
usage: check_cluster_versions.py KVPACK KVPACKD LIBKVPACK"""
import array
import json
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

KVPACK, KVPACKD, LIB = sys.argv[1], sys.argv[2], sys.argv[3]
kvpack = kvptest.load_kvpack(LIB)
TMP = tempfile.mkdtemp(prefix="kvp_cver_")
ENV = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
nodes = kvptest.Nodes(KVPACKD, TMP, ENV)
L, H, D = 2, 2, 64


def start(name, budget="64M"):
    return nodes.start(name, ["--data-dir", os.path.join(TMP, name), "--dram-budget", budget])


def kvd(name, T, seed):
    path = os.path.join(TMP, name)
    kvptest.write_kvd(path, L, T, H, D, array.array(
        "f", (((i * 40503 + seed * 7919) % 511 - 255) / 32.0 for i in range(2 * L * T * H * D))))
    with open(path, "rb") as f:
        return path, f.read()


def cli(*args):
    return kvptest.run_cli(KVPACK, ENV, *args)


def put(peers, sid, path, replicas=1):
    return cli("put", "--node", peers, "--replicas", str(replicas), "--session", sid, "--kvd",
               path, "--codec", "fp16", "--json")


def get(peers, sid, *extra):
    return kvptest.get_kvd(KVPACK, ENV, peers, sid, os.path.join(TMP, "got.kvd"), *extra)


def sid_ranked(peers, ns, want, prefix):
    """The first id prefix<i> whose rank over peers starts with the addresses in want."""
    with kvpack.Cluster(peers=peers) as cl:
        for i in range(500):
            if cl.rank(ns, f"{prefix}{i}")[:len(want)] == want:
                return f"{prefix}{i}"
    check(False, f"no id ranked {want}")
    return None


try:
    small, v1 = kvd("v1.kvd", 200, 1)   # ~200 KiB of fp16
    big, v2 = kvd("v2.kvd", 3000, 2)    # ~3 MiB: over a 1M DRAM budget
    other, v3 = kvd("v3.kvd", 200, 3)

    # an overwrite the first node cannot hold: acknowledged on the next, and what a get serves
    a, b = start("a", "1M"), start("b")
    ab = f"{a},{b}"
    rc, out, err = put(a, "probe", small)
    ns = int(json.loads(out)["ns"], 16) if rc == 0 else 0
    sid = sid_ranked(ab, ns, [a], "o")
    rc, out, err = put(ab, sid, small)
    check(rc == 0 and json.loads(out)["nodes"] == [a], f"v1 not on A: {rc} {out} {err}")
    rc, out, err = put(ab, sid, big)
    check(rc == 0 and json.loads(out)["nodes"] == [b], f"v2 not taken by B: {rc} {out} {err}")
    got, err = get(ab, sid)
    check(got == v2, f"the acknowledged overwrite is not what a get serves ({err.strip()[-200:]})")
    nodes.stop("a")
    nodes.stop("b")

    # an rm that a stopped node holding a stand-in copy missed: not served once it is back
    x, y, z = start("x"), start("y"), start("z")
    xyz = f"{x},{y},{z}"
    sid = sid_ranked(xyz, ns, [x, y, z], "r")
    rc, _, err = put(f"{y},{z}", sid, small, replicas=2)  # z a stand-in while x was down
    check(rc == 0, f"put on y and z: {err}")
    nodes.stop("z")
    rc, out, err = cli("rm", "--node", xyz, "--replicas", "2", "--session", sid, "--ns",
                       "%016x" % ns, "--timeout-ms", "3000")
    print("rm with z stopped: exit", rc)
    check(rc == 0, f"rm: exit {rc} {err}")  # z is past the first 2 of the rank
    start("z")  # on its port again: xyz names it
    got, err = get(xyz, sid)
    check(got is None and "not found" in err, f"the deleted session was served ({err.strip()})")
    nodes.stop("x")
    nodes.stop("y")
    nodes.stop("z")

    # a replica holding another writer's newer version: the put is not acknowledged
    c, d = start("c"), start("d")
    cd = f"{c},{d}"
    sid = sid_ranked(cd, ns, [c], "s")
    rc, _, err = put(d, sid, other)
    check(rc == 0, f"put on d: {err}")
    with kvpack.Client(d) as cl:  # the other writer's record, its clock 5 s ahead
        sp = cl.get_session(ns, sid)
        cl.put_session(ns, sid, sp.desc, version=sp.version + 5_000_000_000)
        check(cl.get_session(ns, sid).version == sp.version + 5_000_000_000, "the newer record")
    rc, out, err = put(cd, sid, small, replicas=2)
    print("put under a newer version:", rc, err.strip()[-160:])
    check(rc == 1 and "older version" in err, f"a put that loses was acknowledged: {rc} {out}")
    nodes.stop("c")
    nodes.stop("d")

    # the first-ranked node down for an overwrite, back with its older copy: --latest serves the
    # overwrite; with the overwrite's only node stopped it fails, the older copy not served
    e, f = start("e"), start("f")
    ef = f"{e},{f}"
    sid = sid_ranked(ef, ns, [e], "t")
    rc, _, err = put(ef, sid, small, replicas=2)
    check(rc == 0, f"v1 on e and f: {err}")
    nodes.stop("e")
    rc, _, err = cli("put", "--node", ef, "--replicas", "1", "--session", sid, "--kvd", other,
                     "--codec", "fp16", "--timeout-ms", "3000")
    check(rc in (0, 3), f"the overwrite with e stopped: exit {rc} {err}")
    start("e")  # on its port again, with v1
    got, err = get(ef, sid)
    print("plain get after the overwrite:", "v1 (older copy)" if got == v1 else
          "v3" if got == v3 else err.strip()[-120:])
    got, err = get(ef, sid, "--latest")
    check(got == v3, f"get --latest did not serve the overwrite ({err.strip()[-200:]})")
    nodes.stop("f")  # the newest copy's node gone: the newest of those that answer, and a word
    got, err = get(ef, sid, "--latest", "--timeout-ms", "3000")
    check(got == v1 and f"{f} did not answer" in err and "a newer one may be there" in err,
          f"get --latest with f stopped: {err.strip()[-200:]}")
finally:
    nodes.kill_all()
    shutil.rmtree(TMP, ignore_errors=True)

print("FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
