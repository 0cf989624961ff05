#!/usr/bin/env python3
"""check_repair_safety.py - kvpack repair deletes a surplus copy only when the target's copy can
stand in for it. Each case is one a review reproduced as a lost session or a lost write, with
repair exiting 0:
- a target under --durability spill (the default) took the copy in DRAM only; the surplus copy
  on disk was dropped and a SIGKILL of the target lost the session. Now the target spills it
  first: after the repair and a SIGKILL of the target, the session reads back byte-identical;
- the same when the surplus copy lists in DRAM only, its node put again under spill after an
  older version was spilled (a review found repair then skipped the spill: the surplus node's
  older record on disk went with the drop, and a SIGKILL of the target lost both);
- a target without --data-dir cannot hold it on disk: the surplus copy on disk stays, repair
  exits 1 and says why;
- a target whose copy has a bad page nobody has read yet (scrubber off) listed it healthy, and
  the only good copy was dropped. Now the target's copy is read back (CRC-checked) first: the
  surplus stays, exit 1, and the next pass, which sees the copy damaged, heals it;
- a one-node append (Client.append) kept the record's version, so the longer copy looked the
  same as the shorter one and was dropped. Now the append stamps a newer version, and repair
  keeps the longer copy.
usage: check_repair_safety.py KVPACK KVPACKD LIBKVPACK"""
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
kvpack_py = kvptest.load_kvpack(LIB)
TMP = tempfile.mkdtemp(prefix="kvp_rsafe_")
ENV = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
nodes = kvptest.Nodes(KVPACKD, TMP, ENV)
L, T, H, D = 2, 200, 2, 64  # 200 tokens: one 128-token chunk and a 72-token tail


def start(name, *args):
    """A node; args: its durability or data-dir options ("nodisk": no --data-dir)."""
    opts = ["--dram-budget", "64M"]
    if "nodisk" not in args:
        opts += ["--data-dir", os.path.join(TMP, name)]
    return nodes.start(name, opts + [a for a in args if a != "nodisk"])


def cli(*args):
    return kvptest.run_cli(KVPACK, ENV, *args)


def put(node, sid, kvd, replicas=1):
    rc, out, err = cli("put", "--node", node, "--replicas", str(replicas), "--session", sid,
                       "--kvd", kvd, "--codec", "fp16", "--json")
    check(rc == 0, f"put {sid} on {node}: exit {rc} {err}")
    return json.loads(out) if rc == 0 else {}


def get(node, sid):
    return kvptest.get_kvd(KVPACK, ENV, node, sid, os.path.join(TMP, "got.kvd"))[0]


def repair(pair, *extra):
    """`kvpack repair --replicas 1 --json` over pair: (exit status, report, stderr)."""
    rc, out, err = cli("repair", "--node", pair, "--replicas", "1", "--json", *extra)
    return rc, json.loads(out) if out.strip() else {}, err


def plan_of(pair, sid):
    rc, rep, _ = repair(pair, "--dry-run")
    acts = [a for a in rep.get("actions") or [] if a.get("session") == sid]
    return acts[0] if acts else {}


def sid_copied_to(pair, holder, target, kvd, prefix):
    """A session put on holder alone whose r = 1 plan copies it to target (other ids removed)."""
    for i in range(40):
        sid = f"{prefix}{i}"
        put(holder, sid, kvd)
        if plan_of(pair, sid).get("copy_to") == [target]:
            return sid
        cli("rm", "--node", holder, "--session", sid)
    check(False, f"no session id whose target is {target}")
    return None


def tokens_on(node, sid):
    rc, out, _ = cli("ls", "--node", node, "--json")
    for s in json.loads(out)["sessions"] if rc == 0 else []:
        if s["session"] == sid:
            return s["tokens"]
    return None


try:
    kvd = os.path.join(TMP, "in.kvd")
    kvptest.write_kvd(kvd, L, T, H, D,
                      array.array("f", (((i * 40503) % 511 - 255) / 32.0 for i in range(2 * L * T * H * D))))
    with open(kvd, "rb") as f:
        ref = f.read()

    # a target under --durability spill: the copy is spilled before the surplus goes
    a, b = start("a"), start("b", "--durability", "write-through")
    ab = f"{a},{b}"
    sid = sid_copied_to(ab, b, a, kvd, "d")
    rc, rep, err = repair(ab)
    check(rc == 0 and rep.get("copied") == 1 and rep.get("deleted_surplus") == 1,
          f"repair onto a spill target: exit {rc} {rep} {err}")
    nodes.procs["a"].kill()  # before its spiller would have written it
    nodes.procs["a"].wait()
    a = start("a")
    ab = f"{a},{b}"
    check(get(ab, sid) == ref, f"{sid} lost after the spill target was SIGKILLed")
    nodes.stop("a")
    nodes.stop("b")

    # both under spill, the surplus copy put again after its older version was spilled: it lists
    # in DRAM only, and the target is still spilled before it goes
    s_, t = start("s"), start("t")
    st = f"{s_},{t}"
    sid = sid_copied_to(st, s_, t, kvd, "w")
    rc, out, _ = cli("ls", "--node", s_, "--json")
    ns = [int(e["ns"], 16) for e in json.loads(out)["sessions"] if e["session"] == sid][0]
    with kvpack_py.Client(s_) as cl:
        cl.spill(ns, sid)
    kvd2 = os.path.join(TMP, "in2.kvd")
    kvptest.write_kvd(kvd2, L, T, H, D,
                      array.array("f", (((i * 7919) % 509 - 254) / 32.0 for i in range(2 * L * T * H * D))))
    with open(kvd2, "rb") as f:
        ref2 = f.read()
    put(s_, sid, kvd2)
    rc, out, _ = cli("ls", "--node", s_, "--json")
    where = [(e["in_dram"], e["on_disk"]) for e in json.loads(out)["sessions"] if e["session"] == sid]
    check(where == [(True, False)], f"the re-put is not listed in DRAM only: {where}")
    rc, rep, err = repair(st)
    check(rc == 0 and rep.get("deleted_surplus") == 1, f"repair: exit {rc} {rep} {err}")
    nodes.procs["t"].kill()
    nodes.procs["t"].wait()
    t = start("t")
    check(get(f"{s_},{t}", sid) == ref2, f"{sid} lost: the target was not spilled")
    nodes.stop("s")
    nodes.stop("t")

    # a target without a data dir, the surplus copy on disk: it stays, exit 1, and why
    e, f_ = start("e", "nodisk"), start("f", "--durability", "write-through")
    ef = f"{e},{f_}"
    sid = sid_copied_to(ef, f_, e, kvd, "m")
    rc, rep, err = repair(ef)
    print("repair onto a DRAM-only target:", {k: rep.get(k) for k in ("copied", "deleted_surplus",
                                                                      "failed")})
    check(rc == 1 and rep.get("deleted_surplus") == 0 and rep.get("failed") == 1 and
          "DRAM only" in err, f"the surplus on disk went: exit {rc} {rep} {err}")
    check(get(f_, sid) == ref, f"{sid} not on its disk node any more")
    nodes.stop("e")
    nodes.stop("f")

    # a target with a bad page not found yet (no scrubber, no get): read back, so kept
    scrub_off = ("--durability", "write-through", "--scrub-mib-s", "0")
    c, d = start("c", *scrub_off), start("d", *scrub_off)
    cd = f"{c},{d}"
    put(cd, "bad", kvd, replicas=2)
    plan = plan_of(cd, "bad")
    surplus = plan.get("delete_from") or []
    check(len(surplus) == 1, f"the dry run's plan: {plan}")
    target = "c" if surplus == [d] else "d"
    nodes.stop(target)
    check(len(kvptest.flip_segment_byte(os.path.join(TMP, target))) == 1, "a segment to damage")
    start(target, *scrub_off)  # on its port again: cd still names both
    rc, rep, err = repair(cd)
    print("repair onto an unread bad copy:", {k: rep.get(k) for k in ("deleted_surplus", "failed")})
    check(rc == 1 and rep.get("deleted_surplus") == 0 and "read back" in err,
          f"the good surplus copy went: exit {rc} {rep} {err}")
    check(get(cd, "bad") == ref, "the session is lost")
    rc, rep, err = repair(cd)  # the read found the page bad: now a damaged copy, put again
    check(rc == 0 and rep.get("replaced_damaged") == 1 and rep.get("deleted_surplus") == 1,
          f"the next pass did not heal it: exit {rc} {rep} {err}")
    check(get(c if target == "c" else d, "bad") == ref, "the target after the second pass")
    nodes.stop("c")
    nodes.stop("d")

    # a one-node append on the surplus copy: a newer version, so it is the one kept
    g, h = start("g", "--durability", "write-through"), start("h", "--durability", "write-through")
    gh = f"{g},{h}"
    info = put(gh, "ap", kvd, replicas=2)
    plan = plan_of(gh, "ap")
    surplus = (plan.get("delete_from") or [None])[0]
    check(surplus in (g, h), f"the dry run's plan: {plan}")
    ntok = 10
    k = array.array("f", [0.5] * (L * ntok * H * D))
    v = array.array("f", [0.25] * len(k))
    with kvpack_py.Client(surplus) as cl:
        cl.append(int(info.get("ns", "0"), 16), "ap", "fp16", (L, H, D, 128), k, v,
                  list(range(T - 128 + ntok)), T)
    check(tokens_on(surplus, "ap") == T + ntok, "the append did not land")
    rc, rep, err = repair(gh)
    check(rc == 0 and rep.get("copied") == 1 and rep.get("deleted_surplus") == 1,
          f"repair after a one-node append: exit {rc} {rep} {err}")
    kept = h if surplus == g else g
    check(tokens_on(kept, "ap") == T + ntok and tokens_on(surplus, "ap") is None,
          f"the appended tokens were lost: {tokens_on(kept, 'ap')} tokens on the target")
finally:
    nodes.kill_all()
    shutil.rmtree(TMP, ignore_errors=True)

print("FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
