#!/usr/bin/env python3
"""check_repair_damaged.py - a damaged copy heals from its replica. Two kvpackd nodes
(write-through data dirs), session s1 put with --replicas 2; with node B stopped one byte of s1's
first page is flipped in B's segment file. B back: before any get, B's scrubber (default
--scrub-mib-s 4) finds the page bad and drops it, so `kvpack ls --node A,B` shows s1 damaged on B
within seconds; `kvpack get --node B` fails (exit 1, no file), a get over both nodes is still
served byte-identical (from A), `kvpack repair --replicas 2` puts s1
on B again (replaced_damaged 1), and B then serves it byte-identical and lists it healthy. Then the
damaged copy is the newest one (s2 at v2 on C only, v1 on D): repair drops it at its own version
and copies v1 there, so the session converges instead of every repair failing ERR_STALE. Last,
a target killed and restarted (spill durability: its copy gone) while repair waits before dropping
the surplus copy: the surplus stays (exit 1), and the next pass copies it back to the target.
usage: check_repair_damaged.py KVPACK KVPACKD"""
import array
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

KVPACK, KVPACKD = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="kvp_dmg_")
ENV = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
nodes = kvptest.Nodes(KVPACKD, TMP, ENV)


def start(name):
    return nodes.start(name, ["--data-dir", os.path.join(TMP, name), "--dram-budget", "64M",
                              "--durability", "write-through"])


stop = nodes.stop


def cli(*args):
    p = subprocess.run([KVPACK, *args], capture_output=True, text=True, timeout=120, env=ENV)
    if p.stderr:
        sys.stderr.write(p.stderr)
    return p.returncode, p.stdout


def get(nodes, out, sid="s1"):
    if os.path.exists(out):
        os.unlink(out)
    rc, _ = cli("get", "--node", nodes, "--session", sid, "--out", out)
    return rc, open(out, "rb").read() if rc == 0 and os.path.exists(out) else None


def ls(nodes):
    rc, out = cli("ls", "--node", nodes, "--json")
    check(rc == 0, f"ls {nodes}: exit {rc}")
    return {s["session"]: s for s in json.loads(out)["sessions"]} if rc == 0 else {}


def repair_restarting(nodes_s, pause, name, restart):
    """`kvpack repair --replicas 1` over nodes_s, paused before its first drop
    (KVP_REPAIR_PAUSE_FILE) while node `name` is SIGKILLed and restart(name) brings it back;
    (the process, its JSON report or {})."""
    rp = subprocess.Popen([KVPACK, "repair", "--node", nodes_s, "--replicas", "1", "--json"],
                          stdout=subprocess.PIPE, text=True,
                          env=dict(ENV, KVP_REPAIR_PAUSE_FILE=pause))
    deadline = time.monotonic() + 60
    while not os.path.exists(pause) and rp.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    check(os.path.exists(pause), "repair did not reach the drop")
    nodes.procs[name].kill()
    nodes.procs[name].wait()
    restart(name)
    os.unlink(pause)
    out, _ = rp.communicate(timeout=120)
    return rp, json.loads(out) if out.strip() else {}


def repair(nodes, replicas, *extra):
    """`kvpack repair --json` over nodes: (exit status, its JSON report or {})."""
    rc, out = cli("repair", "--node", nodes, "--replicas", str(replicas), *extra, "--json")
    return rc, json.loads(out) if out.strip() else {}


try:
    a, b = start("a"), start("b")
    both = f"{a},{b}"
    kvd = os.path.join(TMP, "s1.kvd")
    L, T, H, D = 2, 300, 2, 64
    kvptest.write_kvd(kvd, L, T, H, D,
                      array.array("f", (((i * 37) % 509 - 254) / 64.0 for i in range(2 * L * T * H * D))))
    rc, _ = cli("put", "--node", both, "--replicas", "2", "--session", "s1", "--kvd", kvd, "--codec", "kivi")
    check(rc == 0, f"put: exit {rc}")
    rc, ref = get(a, os.path.join(TMP, "ref.kvd"))
    check(rc == 0 and ref, "get from A")

    stop("b")  # flip one payload byte of the first page in B's only segment file
    segs = kvptest.flip_segment_byte(os.path.join(TMP, "b"))
    check(len(segs) == 1, f"B's segment files: {segs}")
    b = start("b")
    both = f"{a},{b}"

    deadline = time.monotonic() + 15  # the scrubber finds it; no get reads it before
    while time.monotonic() < deadline and not ls(both).get("s1", {}).get("damaged"):
        time.sleep(0.2)
    info = ls(both).get("s1", {})
    check(info.get("damaged") is True and info.get("damaged_on") == [b] and
          sorted(info.get("nodes", [])) == sorted([a, b]),
          f"the scrubber did not find B's copy damaged: {info}")
    rc, got = get(b, os.path.join(TMP, "b1.kvd"))
    check(rc == 1 and got is None, f"get of the damaged copy from B: exit {rc}")
    rc, got = get(both, os.path.join(TMP, "both.kvd"))
    check(rc == 0 and got == ref, "a get over both nodes is not served byte-identical")

    rc, rep = repair(both, 2)
    print("repair:", {k: rep.get(k) for k in ("sessions", "repaired", "failed", "copied",
                                              "replaced_damaged")})
    check(rc == 0 and rep.get("replaced_damaged") == 1 and rep.get("copied") == 1 and
          rep.get("failed") == 0, f"repair did not put the damaged copy back: exit {rc} {rep}")
    rc, got = get(b, os.path.join(TMP, "b2.kvd"))
    check(rc == 0 and got == ref, "B does not serve s1 byte-identical after the repair")
    info = ls(both).get("s1", {})
    check(info.get("damaged") is False and info.get("damaged_on") == [], f"still damaged: {info}")
    rc, rep = repair(both, 2)
    check(rc == 0 and rep.get("already_ok") == 1 and rep.get("copied") == 0,
          f"a second repair is not a no-op: {rep}")
    stop("a")
    stop("b")

    # the newest copy is the damaged one: s2 put at v1 on D, then again (other tokens) at v2 on C
    # only, and C loses a page of it. Its data is gone, but repair must still converge: C's node
    # refuses anything older than its v2 record, so the damaged copy is dropped at v2 before v1
    # is copied there (every repair used to fail ERR_STALE, C answering ERR_CORRUPT for good)
    c, d = start("c"), start("d")
    cd = f"{c},{d}"
    kvd2, tok2 = os.path.join(TMP, "s2.kvd"), os.path.join(TMP, "s2.tok")
    kvptest.write_kvd(kvd2, L, T, H, D,
                      array.array("f", (((i * 91) % 509 - 254) / 64.0 for i in range(2 * L * T * H * D))))
    with open(tok2, "wb") as f:
        f.write(array.array("I", range(1000, 1000 + T)).tobytes())
    rc, _ = cli("put", "--node", d, "--session", "s2", "--kvd", kvd, "--codec", "kivi")
    rc2, _ = cli("put", "--node", c, "--session", "s2", "--kvd", kvd2, "--codec", "kivi",
                 "--tokens", tok2)
    check(rc == 0 and rc2 == 0, f"puts of s2: exit {rc}, {rc2}")
    stop("c")
    segs = kvptest.flip_segment_byte(os.path.join(TMP, "c"))
    check(len(segs) == 1, f"C's segment files: {segs}")
    c = start("c")
    cd = f"{c},{d}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not ls(cd).get("s2", {}).get("damaged"):
        time.sleep(0.2)
    check(ls(cd).get("s2", {}).get("damaged_on") == [c], f"s2 not damaged on C: {ls(cd)}")
    rc, rep = repair(cd, 2)
    check(rc == 0 and rep.get("failed") == 0 and rep.get("replaced_damaged") == 1,
          f"repair over a newer damaged copy: exit {rc} {rep}")
    rc, got = get(c, os.path.join(TMP, "c2.kvd"), "s2")
    check(rc == 0 and got == ref, "C does not serve the surviving version of s2 after the repair")
    info = ls(cd).get("s2", {})
    check(info.get("damaged") is False and sorted(info.get("nodes", [])) == sorted([c, d]),
          f"s2 after the repair: {info}")
    stop("c")
    stop("d")

    # a target that restarts between the list and the drop of the surplus copy: s3 on E and F
    # (--durability spill: in DRAM only), repair to one copy; while it waits before the drop
    # (KVP_REPAIR_PAUSE_FILE) the target is SIGKILLed and comes back without s3. Its STAT
    # answers (the client reconnects), but its start moved: the surplus copy must stay (it was
    # dropped: s3 then lived nowhere), and the next pass copies it back to the target.
    def start_spill(name):
        return nodes.start(name, ["--data-dir", os.path.join(TMP, name), "--dram-budget", "64M",
                                  "--durability", "spill"])

    e, f_ = start_spill("e"), start_spill("f")
    ef = f"{e},{f_}"
    rc, _ = cli("put", "--node", ef, "--replicas", "2", "--session", "s3", "--kvd", kvd,
                "--codec", "kivi")
    check(rc == 0, f"put of s3: exit {rc}")
    rc, dry = repair(ef, 1, "--dry-run")
    plan = (dry.get("actions") or [{}])[0]
    surplus = plan.get("delete_from") or []
    check(len(surplus) == 1, f"the dry run's plan for s3: {plan}")
    target = "e" if surplus == [f_] else "f"
    pause = os.path.join(TMP, "pause")
    rp, rep = repair_restarting(ef, pause, target, start_spill)  # the paused run's report
    print("repair over a restarted target:", {k: rep.get(k) for k in ("failed", "deleted_surplus")})
    check(rp.returncode == 1 and rep.get("deleted_surplus") == 0,
          f"repair dropped the surplus copy of a restarted target: exit {rp.returncode} {rep}")
    rc, got = get(ef, os.path.join(TMP, "s3.kvd"), "s3")
    check(rc == 0 and got == ref, "s3 is lost")
    rc, rep = repair(ef, 1)
    check(rc == 0 and rep.get("copied") == 1 and rep.get("deleted_surplus") == 1,
          f"the next pass: exit {rc} {rep}")
    rc, got = get(ef, os.path.join(TMP, "s3b.kvd"), "s3")
    check(rc == 0 and got == ref, "s3 after the second pass")

    # the same for a target repair has just copied to: a put under spill is acknowledged from
    # DRAM, so a restart before the drop loses it too (the check skipped such targets: the
    # only copy was dropped and repair exited 0). A session held by the node that is not its
    # target: put there alone, the first id whose r = 1 plan copies it over.
    for i in range(40):
        sid = f"t{i}"
        rc, _ = cli("put", "--node", e, "--session", sid, "--kvd", kvd, "--codec", "kivi")
        rc2, dry = repair(ef, 1, "--dry-run")
        plan = [a for a in dry.get("actions") or [] if a.get("session") == sid]
        if rc == 0 and plan and plan[0].get("copy_to") == [f_]:
            break
        cli("rm", "--node", ef, "--session", sid)
    check(plan and plan[0].get("copy_to") == [f_], f"no session that F is the target of: {plan}")
    if os.path.exists(pause):
        os.unlink(pause)
    rp, rep = repair_restarting(ef, pause, "f", start_spill)
    check(rp.returncode == 1 and rep.get("deleted_surplus") == 0,
          f"repair dropped the only copy after copying to a target that restarted: exit "
          f"{rp.returncode} {rep}")
    rc, got = get(ef, os.path.join(TMP, "t.kvd"), sid)
    check(rc == 0 and got == ref, f"{sid} is lost")
    stop("e")
    stop("f")
finally:
    nodes.kill_all()
    shutil.rmtree(TMP, ignore_errors=True)

print("FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
