#!/usr/bin/env python3
"""check_bench_store.py - `kvpack bench store` at a small size runs every part against a real
store on this filesystem and reports it consistently: every session spilled and restored with no
CRC failure, write amplification of at least 1, the background spiller writing every small
session with fewer syncs when grouped, one compaction that removed segment files and gave their
bytes back without errors and held the tier's lock for a measured (non-zero) time, index rates;
bad options exit 2. Speed is never asserted (shared, noisy machines).
usage: check_bench_store.py KVPACK"""
import json
import math
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack = sys.argv[1]
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check


def pos(v):
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


cmd = [kvpack, "bench", "store", "--sessions", "4", "--chunks", "4", "--layers", "4",
       "--index-pages", "4096", "--small-sessions", "32", "--json"]
p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode} {p.stderr.strip()[-300:]}")
d = json.loads(p.stdout) if p.returncode == 0 else {}
check(d.get("sessions") == 4 and d.get("spills") == 4 and d.get("restores") == 4 and
      d.get("crc_failures") == 0, f"spills/restores: {d.get('spills')} {d.get('restores')}")
check(d.get("total_bytes") == 4 * d.get("session_bytes", -1), "total bytes")
for k in ("raw_write_gbs", "raw_read_gbs", "spill_gbs", "restore_gbs", "warm_restart_ms"):
    check(pos(d.get(k)), f"{k}: {d.get(k)}")
check(d.get("spill_write_amplification", 0) >= 1.0, f"WA {d.get('spill_write_amplification')}")
s = d.get("small_sessions", {})
runs = s.get("runs", [{}, {}])
check(all(r.get("spills") == 32 for r in runs), f"small sessions spilled: {runs}")
check(runs[0].get("syncs", 0) > runs[-1].get("syncs", 0) >= 1, f"group syncs: {runs}")
c = d.get("compaction", {})
check(c.get("errors") == 0 and c.get("segments_removed", 0) >= 1 and c.get("freed_bytes", 0) > 0
      and c.get("moved_bytes", 0) > 0, f"compaction: {c}")
check(pos(c.get("tier_lock_max_ms")), f"compaction tier lock hold: {c.get('tier_lock_max_ms')}")
for k in ("put_ops", "get_ops"):
    check(pos(d.get("index", {}).get(k)), f"index {k}")
for bad in (["--sessions", "0"], ["--frobnicate"]):
    q = subprocess.run([kvpack, "bench", "store", *bad], capture_output=True, text=True)
    check(q.returncode == 2 and q.stderr.strip(), f"bench store {bad}: exit {q.returncode}")
if not fails:
    print(f"spill {d['spill_gbs']:.2f} GB/s, restore {d['restore_gbs']:.2f} GB/s, compaction lock "
          f"<= {c['tier_lock_max_ms']:.2f} ms")
print(f"{len(fails)} check(s) failed" if fails else "bench store: ok")
sys.exit(1 if fails else 0)
