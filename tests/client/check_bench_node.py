#!/usr/bin/env python3
"""check_bench_node.py - `kvpack bench node` runs both sides: a local node (kvpackd's code) and a
local redis-server, each putting and getting back every session with no failed operation (the
node checks every page's CRC, the Redis side every value's CRC32C), and the JSON carries both
sides' rates and latencies and the ratios; bad options are refused with exit 2. Speed is never
asserted (shared, noisy machines). Without redis-server: skipped (exit 77).
usage: check_bench_node.py KVPACK"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack = sys.argv[1]
if shutil.which("redis-server") is None:
    print("SKIP: redis-server not installed (apt-get install redis-server)")
    sys.exit(77)
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check


cmd = [kvpack, "bench", "node", "--clients", "2", "--sessions", "30", "--pages", "3",
       "--page-tokens", "8", "--json"]
p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode} {p.stderr.strip()[-300:]}")
d = json.loads(p.stdout) if p.returncode == 0 else {}
check(d.get("page_bytes") == 64 + 8 * 128 * 8 * 4 and d.get("session_bytes") == 3 * d.get("page_bytes", 0),
      f"page/session bytes: {d.get('page_bytes')} {d.get('session_bytes')}")
for side in ("kvpack", "redis"):
    for op in ("put", "get"):
        r = d.get(side, {}).get(op, {})
        check(r.get("errors") == 0, f"{side} {op}: errors {r.get('errors')}")
        for k in ("seconds", "sessions_per_s", "gbs", "p50_ms", "p99_ms"):
            v = r.get(k)
            check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{side} {op} {k}: {v}")
for k in ("put_vs_redis", "get_vs_redis"):
    v = d.get(k)
    check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{k}: {v}")
print("kvpack vs redis: put %.2fx get %.2fx" % (d.get("put_vs_redis", 0), d.get("get_vs_redis", 0)))

for bad in (["--clients", "0"], ["--pages", "1000"], ["--bogus"]):
    p = subprocess.run([kvpack, "bench", "node", *bad], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and p.stderr.strip() != "", f"bench node {bad}: exit {p.returncode}")
p = subprocess.run([kvpack, "bench", "node", "--redis-server", "/nonexistent/redis-server",
                    "--clients", "1", "--sessions", "2", "--json"], capture_output=True, text=True,
                   timeout=120)
d = json.loads(p.stdout) if p.returncode == 0 else {}
check(p.returncode == 0 and "not found" in d.get("redis_skipped", "") and "redis" not in d,
      f"a missing redis-server is not said: {p.returncode} {p.stdout[:200]}")

# A Redis that refuses every write (maxmemory 1 MB, noeviction): each failed operation is counted,
# the failed side's rates, latencies and both ratios are null (a failed op moved no session: it
# was once timed as one, so Redis looked faster), the text says "failed", and the exit is 1.
tmp = tempfile.mkdtemp(prefix="kvp-bench-node-")
full = os.path.join(tmp, "redis-full.sh")
with open(full, "w") as f:
    f.write("#!/bin/sh\nexec redis-server \"$@\" --maxmemory 1mb --maxmemory-policy noeviction\n")
os.chmod(full, 0o755)
base = [kvpack, "bench", "node", "--clients", "2", "--sessions", "20", "--redis-server", full]
p = subprocess.run(base + ["--json"], capture_output=True, text=True, timeout=300)
d = json.loads(p.stdout) if p.stdout.strip() else {}
check(p.returncode == 1 and "failed operations" in p.stderr, f"a full redis: exit {p.returncode}")
rput = d.get("redis", {}).get("put", {})
check(rput.get("errors", 0) > 0 and all(rput.get(k, 0) is None for k in
                                        ("sessions_per_s", "gbs", "p50_ms", "p99_ms")),
      f"a full redis's put figures: {rput}")
check(d.get("kvpack", {}).get("put", {}).get("errors") == 0 and
      isinstance(d.get("kvpack", {}).get("put", {}).get("sessions_per_s"), float),
      f"kvpack's side beside a full redis: {d.get('kvpack')}")
check("put_vs_redis" in d and d.get("put_vs_redis", 0) is None and d.get("get_vs_redis", 0) is None,
      f"ratios against a failed side: {d.get('put_vs_redis')} {d.get('get_vs_redis')}")
p = subprocess.run(base, capture_output=True, text=True, timeout=300)
check(p.returncode == 1 and "redis failed:" in p.stdout and "x\n" not in p.stdout.split("put", 1)[-1][:200],
      f"text report with a full redis: {p.stdout[-400:]}")

shutil.rmtree(tmp, ignore_errors=True)

print("FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
