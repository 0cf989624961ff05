#!/usr/bin/env python3
"""check_disk_full.py - a node whose data dir fills up, on a real 96 MiB tmpfs (in a private mount
namespace: root, or unshare -rm; else skipped, exit 77). kvpackd --durability write-through
--disk-reserve-mib 24 (index memtable 8 MiB: 3x that is the least). Without the reserve, RocksDB 7.8 refused every write
after a flush met the full disk, deletes included, until a restart: `kvpack rm` could not free
anything. Checked here:
1. the 24 MiB reserve file is held at start (metrics and the file);
2. sessions of index-held (inline) and segment pages put until one is refused: exit 1 with
   ERR_NO_SPACE, counted in kvpack_disk_full_refusals_total and `kvpack stat` (with the free
   space); every acked one reads back byte-identical;
3. `kvpack rm` of half of them works, and a put goes through again within 30 s (the deleted
   records' space given back by the index compaction the node runs then, which may use the
   reserve file's room: the file is made again before the put);
4. another process fills the disk to the last byte: a put is refused and the reserve file goes
   (RocksDB would abort on an assertion in Debian's 7.8 build when a table write fails), gets and
   rm work, puts stay refused; a start with no room at all is refused with a clear error (RocksDB
   aborted there too), one with the reserve file held gives it up; once the filler is gone a put
   works and the reserve file is made again;
5. a restart keeps exactly the acked, not removed sessions, byte-identical; 6. a --durability
   spill node whose sessions are only in DRAM when the disk fills spills them as it stops into the
   reserve's room (only the next start's room is kept), and they come back byte-identical;
   7. the same with no reserve (--disk-reserve-mib 0, the file removed): the stop cannot save
   them, and the node exits 1 saying so (it exited 0, so a supervisor saw a clean stop while
   acked sessions were gone); a bad value is refused (exit 2).
usage: check_disk_full.py KVPACK KVPACKD"""
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
NS_FLAG = "KVP_DISKFULL_NS"
MIB = 1 << 20

if os.environ.get(NS_FLAG) != "1":  # a mount namespace of our own: the tmpfs goes with us
    env = dict(os.environ, **{NS_FLAG: "1"})
    for pre in (["unshare", "--mount", "--propagation", "private"], ["unshare", "-rm"]):
        if shutil.which(pre[0]) is None:
            break
        if subprocess.run([*pre, "true"], capture_output=True).returncode == 0:
            os.execvpe(pre[0], [*pre, sys.executable, *sys.argv], env)
    print("SKIP: cannot make a private mount namespace for a small tmpfs (needs root or user "
          "namespaces, and unshare)")
    sys.exit(77)

TMP = tempfile.mkdtemp(prefix="kvp_diskfull_")
DATA = os.path.join(TMP, "data")
os.makedirs(DATA)
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", DATA]).returncode != 0:
    print("SKIP: cannot mount a tmpfs")
    sys.exit(77)
ENV = dict(os.environ, KVP_PROGRESS="0")
check = kvptest.check
node = kvptest.CliNode(KVPACK, KVPACKD, TMP, ENV)
ARGS = ["--durability", "write-through", "--scrub-mib-s", "0", "--segment-mib", "1",
        "--disk-reserve-mib", "24"]
RESERVE = os.path.join(DATA, "kvpack.reserve")

L, T, H, D = 2, 1024, 2, 64
KVD = os.path.join(TMP, "s.kvd")
kvptest.write_kvd(KVD, L, T, H, D, array.array(
    "f", (((i * 37) % 509 - 254) / 64.0 for i in range(2 * L * T * H * D))))


def put(sid):
    """page-tokens 32 gives 3 KiB pages (kept inline in the index), 128 gives 12 KiB ones
    (segment files): sessions alternate by the parity of their number"""
    n = int(sid.lstrip("abcdefghijklmnopqrstuvwxyz") or 0)
    pt = "32" if n % 2 == 0 else "128"
    ids = kvptest.write_token_ids(os.path.join(TMP, "ids"), T, (ord(sid[0]) % 8 * 2000 + n) * T)
    return node.kv("put", "--session", sid, "--kvd", KVD, "--codec", "kivi", "--page-tokens", pt,
                   "--tokens", ids)


def get(sid):
    out = os.path.join(TMP, sid + ".out.kvd")
    rc, err = node.kv("get", "--session", sid, "--out", out)
    data = open(out, "rb").read() if rc == 0 else None
    if rc == 0:
        os.unlink(out)
    return rc, data, err


def held():
    p = subprocess.run([KVPACK, "ls", "--node", node.addr, "--json"], capture_output=True,
                       text=True, timeout=60, env=ENV)
    return sorted(s["session"] for s in json.loads(p.stdout)["sessions"]) if p.returncode == 0 \
        else None


def fill():
    """another process takes every free byte"""
    fd = os.open(os.path.join(DATA, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    for size in (MIB, 4096, 1):
        try:
            while os.write(fd, b"\xa5" * size) > 0:
                pass
        except OSError:
            pass
    os.close(fd)


try:
    rc = subprocess.run([KVPACKD, "--disk-reserve-mib", "x"], capture_output=True, text=True)
    check(rc.returncode == 2 and "--disk-reserve-mib" in rc.stderr, f"a bad value: {rc.stderr}")

    # 1. the reserve at start
    node.start(ARGS)
    check(node.metric("kvpack_disk_reserve_bytes") == 24 * MIB and
          os.path.getsize(RESERVE) == 24 * MIB, "no 24 MiB reserve file at start")
    free0 = node.metric("kvpack_disk_free_bytes")
    check(free0 is not None and 30 * MIB < free0 < 80 * MIB, f"free space at start: {free0}")

    # 2. puts until the reserve is reached
    acked, refused_err = [], ""
    for i in range(200):
        rc, err = put(f"s{i}")
        if rc != 0:
            refused_err = err
            break
        acked.append(f"s{i}")
    print(f"{len(acked)} sessions acked before the disk was full")
    check(len(acked) >= 4 and "ERR_NO_SPACE" in refused_err, f"the refused put: {refused_err!r}")
    refusals = node.metric("kvpack_disk_full_refusals_total")
    check(refusals >= 1, "refusal not counted")
    p = subprocess.run([KVPACK, "stat", "--node", node.addr, "--json"], capture_output=True,
                       text=True, timeout=60, env=ENV)
    st = json.loads(p.stdout) if p.returncode == 0 else {}
    free_now = node.metric("kvpack_disk_free_bytes")
    check(st.get("disk_full_refusals") == refusals and st.get("disk_free_bytes", 0) > 0 and
          abs(st.get("disk_free_bytes", 0) - free_now) < 4 * MIB, f"kvpack stat --json: {st}")
    p = subprocess.run([KVPACK, "stat", "--node", node.addr], capture_output=True, text=True,
                       timeout=60, env=ENV)
    check(f"({int(refusals)} writes refused at the reserve)" in p.stdout, f"kvpack stat: {p.stdout}")
    ref = {}
    for sid in (acked[0], acked[1], acked[-2], acked[-1]):
        rc, ref[sid], err = get(sid)
        check(rc == 0, f"get {sid} on the full disk: {err}")

    # 3. rm half; a put goes through again once the space is back
    gone = acked[: len(acked) // 2]
    for sid in gone:
        rc, err = node.kv("rm", "--session", sid)
        check(rc == 0, f"rm {sid} on a full disk: exit {rc} {err}")
    ok, t0 = False, time.monotonic()
    while not ok and time.monotonic() - t0 < 30:
        time.sleep(1)
        ok = put("s1000")[0] == 0
    check(ok, "no put went through within 30 s of removing half the sessions")
    print(f"put accepted again {time.monotonic() - t0:.1f} s after the rm")
    kept = [s for s in acked if s not in gone] + (["s1000"] if ok else [])

    # 4. another process fills the disk while the node runs
    releases = node.metric("kvpack_disk_reserve_releases_total")  # the index compaction after
    # the rm may have used the reserve's room; the put that went through made the file again
    check(os.path.getsize(RESERVE) == 24 * MIB, "no reserve file before the disk filled")
    fill()
    rc, err = put("s1002")
    check(rc == 1 and "ERR_NO_SPACE" in err, f"put on a disk another process filled: {rc} {err}")
    rc, data, err = get(acked[-1])
    check(rc == 0 and data == ref[acked[-1]], f"get on the filled disk: {err}")
    # that commit found less free than RocksDB needs to flush: the reserve file went for it
    check(node.metric("kvpack_disk_reserve_releases_total") == releases + 1 and
          not os.path.exists(RESERVE), "the reserve file was not given up when the disk filled")
    for _ in range(2):  # the second after the compactor's tick had its chance at the index
        rc, err = node.kv("rm", "--session", kept[0])
        check(rc == 0, f"rm on the filled disk: exit {rc} {err}")
        gone.append(kept.pop(0))
        time.sleep(2.5)
    rc, err = put("s1003")
    check(rc == 1 and "ERR_NO_SPACE" in err, f"put with the reserve file given up: {rc} {err}")
    # stopped, the last bytes taken too: the start is refused with a clear error (RocksDB 7.8
    # would abort on an assertion opening there)
    node.stop()
    fill()
    p = subprocess.run([KVPACKD, "--data-dir", DATA, *ARGS, "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60, env=ENV)
    check(p.returncode == 1 and "cannot be opened on this full disk" in p.stderr,
          f"a start without room: exit {p.returncode} {p.stderr}")
    os.unlink(os.path.join(DATA, "filler"))
    node.start(ARGS)
    rc, err = put("s1004")
    check(rc == 0, f"put once the filler is gone: {err}")
    kept.append("s1004")
    check(node.metric("kvpack_disk_reserve_bytes") == 24 * MIB and
          os.path.getsize(RESERVE) == 24 * MIB, "the reserve file was not made again")
    # stopped with the disk full and the reserve file held: the start gives it up for RocksDB
    node.stop()
    fill()
    node.start(ARGS)
    check(node.metric("kvpack_disk_reserve_releases_total") == 1 and not os.path.exists(RESERVE),
          "the start on a full disk did not give up the reserve file")
    rc, data, err = get(acked[-1])
    check(rc == 0 and data == ref[acked[-1]], f"get after a start on the full disk: {err}")
    os.unlink(os.path.join(DATA, "filler"))

    # 5. a restart keeps what was acked and not removed
    node.stop()
    node.start(ARGS)
    now = held()
    check(now == sorted(kept), f"sessions after the restart: {now} != {sorted(kept)}")
    for sid, data in ref.items():
        if sid in kept:
            rc, again, err = get(sid)
            check(rc == 0 and again == data, f"{sid} after the restart: {err}")

    # 6. --durability spill: sessions only in DRAM when another process fills the disk; the stop
    # spills them into the reserve's room (keeping what the next start needs), so they survive
    node.stop()
    spill_args = [*ARGS[:1], "spill", *ARGS[2:]]
    node.start(spill_args)
    hot = [f"h{i}" for i in range(4)]
    for sid in hot:
        rc, err = put(sid)
        check(rc == 0, f"put {sid} to the spill node: {err}")
    rc, ref["h1"], err = get("h1")
    fill()
    node.stop()
    os.unlink(os.path.join(DATA, "filler"))
    node.start(ARGS)
    now = held()
    check(now == sorted(kept + hot), f"after a stop on a full disk: {now} != {sorted(kept + hot)}")
    rc, again, err = get("h1")
    check(rc == 0 and again == ref["h1"], f"h1 after the stop on a full disk: {err}")
    kept += hot
    node.stop()
    node.start([*spill_args[:-2], "--disk-reserve-mib", "0"])
    check(not os.path.exists(RESERVE) and node.metric("kvpack_disk_reserve_bytes") == 0,
          "--disk-reserve-mib 0 kept the file")
    # 7. no reserve to spill into: sessions only in DRAM cannot be saved at the stop: exit 1
    lost = [f"x{i}" for i in range(1, 33, 2)]  # past what the open segment file has room for
    for sid in lost:
        rc, err = put(sid)
        check(rc == 0, f"put {sid} to the spill node without a reserve: {err}")
    fill()
    node.proc.terminate()
    stop_rc = node.proc.wait(timeout=60)
    os.unlink(os.path.join(DATA, "filler"))
    check(stop_rc == 1, f"a stop that lost sessions only in DRAM exited {stop_rc}, not 1")
    node.start(ARGS)
    now = held() or []
    check(set(kept) <= set(now) and not set(lost) <= set(now),
          f"after the stop that could not spill (a group that fit may be kept): {now}")
    node.stop()
finally:
    node.kill()
    subprocess.run(["umount", DATA])
    shutil.rmtree(TMP, ignore_errors=True)

if kvptest.FAILS:
    sys.exit(f"{len(kvptest.FAILS)} check(s) failed")
print("disk full: all checks passed")
