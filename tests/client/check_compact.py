#!/usr/bin/env python3
"""check_compact.py - `kvpackd --segment-mib 1 --compact-ratio 0.4` against a real node
(write-through, so every session is in the segment files): 12 sessions of about 0.8 MiB fill six
1 MiB segment files two by two; `kvpack rm` of two thirds of them leaves files half dead, which the
node's compactor empties and removes by itself (kvpack_compact_segments_total > 0 in /metrics; the
segment bytes end within what the ratio allows: live / 0.6 plus the active file). Every kept session reads back byte-identical to what
it read before the compaction, and again after a warm restart. Bad values are refused with exit 2.
usage: check_compact.py KVPACK KVPACKD"""
import array
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
tmp = tempfile.mkdtemp(prefix="kvp_compact_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
node = kvptest.CliNode(kvpack, kvpackd, tmp, env)
N = 12


def start_node():
    node.start(["--durability", "write-through", "--segment-mib", "1", "--compact-ratio", "0.4"])


stop_node, metric = node.stop, node.metric


def kv(cmd, *args):
    return node.kv(cmd, *args)[0]


def read_back(sid, tag):
    out = os.path.join(tmp, f"{sid}.{tag}.kvd")
    rc = kv("get", "--session", sid, "--out", out)
    check(rc == 0, f"get {sid} ({tag}): exit {rc}")
    return open(out, "rb").read() if rc == 0 else None


try:
    for opt, bad in [("--compact-ratio", "x"), ("--compact-ratio", "1.5"), ("--compact-ratio", "-0.1"),
                     ("--segment-mib", "0"), ("--segment-mib", "x")]:
        p = subprocess.run([kvpackd, opt, bad], capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and f"{opt} wants" in p.stderr,
              f"{opt} '{bad}' not refused: {p.returncode} {p.stderr!r}")
    start_node()
    L, T, H, D = 2, 1024, 4, 128
    vals = array.array("f", (((i * 7919) % 1021 - 510) / 128.0 for i in range(2 * L * T * H * D)))
    kvd = os.path.join(tmp, "a.kvd")
    kvptest.write_kvd(kvd, L, T, H, D, vals)
    sids = [f"s{i:02d}" for i in range(N)]
    for i, sid in enumerate(sids):  # one dump, token ids of each session's own: no page shared
        ids = kvptest.write_token_ids(os.path.join(tmp, f"{sid}.ids"), T, i * T)
        check(kv("put", "--session", sid, "--kvd", kvd, "--codec", "kivi", "--tokens", ids) == 0,
              f"put {sid}")
    bytes_full, live_full = metric("kvpack_disk_bytes"), metric("kvpack_disk_live_bytes")
    live_per = live_full / N
    check(live_full > 0 and bytes_full >= live_full, f"disk after the puts: {bytes_full} {live_full}")
    keep = [sid for i, sid in enumerate(sids) if i % 3 == 0]
    before = {sid: read_back(sid, "before") for sid in keep}
    for i, sid in enumerate(sids):
        if i % 3 != 0:
            check(kv("rm", "--session", sid) == 0, f"rm {sid}")
    live = metric("kvpack_disk_live_bytes")
    check(live == len(keep) * live_per, f"live bytes {live} after rm, want {len(keep) * live_per}")
    deadline = time.monotonic() + 20  # the compactor looks every 2 s: wait until it is done
    last, still = None, 0
    while time.monotonic() < deadline and still < 3:
        segs = metric("kvpack_compact_segments_total")
        still = still + 1 if segs and segs == last else 0
        last = segs
        time.sleep(1.0)
    segs, freed = metric("kvpack_compact_segments_total"), metric("kvpack_compact_freed_bytes_total")
    bytes1 = metric("kvpack_disk_bytes")
    print(f"full: {bytes_full:.0f} bytes; after rm and compaction: {bytes1:.0f} bytes in "
          f"{metric('kvpack_disk_segment_files'):.0f} files ({live:.0f} live); compaction removed "
          f"{segs:.0f} files ({freed:.0f} bytes), moved {metric('kvpack_compact_moved_bytes_total'):.0f}")
    check(segs is not None and segs >= 1 and freed > 0, "the compactor removed no segment file")
    # what may stay: at most 40 % dead in each full file, plus the active file (1 MiB + one put)
    check(bytes1 <= live / 0.6 + (1 << 20) + live_per,
          f"segment bytes {bytes1} too far above the live {live}")
    check(metric("kvpack_disk_live_bytes") == live, "live bytes changed")
    check(metric("kvpack_disk_errors_total") == 0 and metric("kvpack_crc_failures_total") == 0,
          "disk errors or CRC failures")
    for sid in keep:
        check(read_back(sid, "after") == before[sid], f"{sid} differs after the compaction")
    for i, sid in enumerate(sids):
        if i % 3 != 0:
            check(kv("get", "--session", sid, "--out", os.path.join(tmp, "gone.kvd")) == 1,
                  f"removed {sid} came back")
    stop_node()
    start_node()  # warm restart on the compacted files
    for sid in keep:
        check(read_back(sid, "restart") == before[sid], f"{sid} differs after a restart")
    stop_node()
finally:
    node.kill()
    shutil.rmtree(tmp, ignore_errors=True)

print("FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
