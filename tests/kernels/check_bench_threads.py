#!/usr/bin/env python3
"""check_bench_threads.py - `kvpack bench codec --threads N` splits the pages over N threads:
every codec/implementation still encodes and decodes (exit 0, positive finite figures, the JSON
says how many threads), for an even and an uneven split (3 threads over 8 pages), and bad thread
counts are refused with a clear error. Speed is never asserted (shared, noisy machines).
usage: check_bench_threads.py KVPACK"""
import json
import math
import subprocess
import sys


def run(kvpack, threads):
    cmd = [kvpack, "bench", "codec", "--codec", "kvarn", "--mib", "4", "--repeat", "1",
           "--max-s", "0.1", "--threads", str(threads), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    if d.get("threads") != threads:
        sys.exit(f"FAIL: threads {d.get('threads')} reported, {threads} asked")
    if d.get("pages") != 8 or not d.get("results"):
        sys.exit(f"FAIL: unexpected pages/results: {p.stdout[:200]}")
    for r in d["results"]:
        for k in ("encode_gbs", "decode_gbs", "decode_rotated_gbs", "memcpy_gbs"):
            v = r.get(k)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                sys.exit(f"FAIL: {r['codec']}/{r['impl']} {k} = {v} with {threads} threads")
    print(f"ok: {threads} threads, {len(d['results'])} implementations")


def refused(kvpack, arg):
    p = subprocess.run([kvpack, "bench", "codec", "--threads", arg], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 2 or "--threads must be 1..64" not in p.stderr:
        sys.exit(f"FAIL: --threads {arg}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
    print(f"ok: --threads {arg} refused: {p.stderr.strip()}")


def main():
    kvpack = sys.argv[1]
    for t in (1, 2, 3):
        run(kvpack, t)
    refused(kvpack, "0")
    refused(kvpack, "65")


if __name__ == "__main__":
    main()
