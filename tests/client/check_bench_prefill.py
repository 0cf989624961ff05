#!/usr/bin/env python3
"""check_bench_prefill.py - `kvpack bench prefill` encodes and puts a session both ways (serial,
and streamed layer by layer over kvp_put_stream) against a real local node: it exits 0 only when
every put and delete succeeded and the streamed session read back page-identical; the JSON
carries each median and ratios that agree with them; bad options exit 2. Speed is never
asserted (shared, noisy machines).
usage: check_bench_prefill.py KVPACK"""
import json
import math
import subprocess
import sys

kvpack = sys.argv[1]
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


for codec in ("kivi", "fp16"):
    cmd = [kvpack, "bench", "prefill", "--codec", codec, "--layers", "3", "--tokens", "512",
           "--heads", "2", "--head-dim", "64", "--reps", "2", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode} {p.stderr.strip()[-300:]}")
    d = json.loads(p.stdout) if p.returncode == 0 else {}
    check(d.get("pages") == 3 * 4 and d.get("layers") == 3 and d.get("tokens") == 512,
          f"{codec} geometry: {d}")
    page = 64 + 2 * 128 * 2 * 64 * 2 if codec == "fp16" else None  # fp16 page: header + K,V
    check(d.get("session_bytes", 0) > 0 and (page is None or d["session_bytes"] == 12 * page),
          f"{codec} session bytes {d.get('session_bytes')}")
    for k in ("serial_s", "streamed_s", "encode_s", "ship_s"):
        v = d.get(k)
        check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{codec} {k}: {v}")
    if not fails:
        check(abs(d["streamed_vs_serial"] - d["serial_s"] / d["streamed_s"]) < 1e-3 *
              d["streamed_vs_serial"], f"{codec} streamed_vs_serial {d['streamed_vs_serial']}")
        print(f"{codec}: serial {d['serial_s'] * 1e3:.1f} ms, streamed {d['streamed_s'] * 1e3:.1f} "
              f"ms ({d['streamed_vs_serial']:.2f}x)")

for bad in (["--reps", "0"], ["--layers", "1"], ["--codec", "nope"], ["--frobnicate"]):
    p = subprocess.run([kvpack, "bench", "prefill"] + bad, capture_output=True, text=True)
    check(p.returncode == 2 and p.stderr.strip(), f"bench prefill {bad}: exit {p.returncode}")

print(f"{len(fails)} check(s) failed" if fails else "bench prefill: ok")
sys.exit(1 if fails else 0)
