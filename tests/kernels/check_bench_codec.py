#!/usr/bin/env python3
"""check_bench_codec.py - `kvpack bench codec` in paired rounds (a memcpy of the working set, then
a codec window) and with --threads N splitting the pages over N threads: every implementation
still encodes and decodes (exit 0, positive finite figures, the JSON says how many threads and
rounds), each ratio is the median of the rounds' ratios (between their min and max, which are
reported), for an even and an uneven split (3 threads over 8 pages); bad thread counts and
rounds are refused with a clear error. Speed is never asserted (shared, noisy machines).
usage: check_bench_codec.py KVPACK"""
import json
import math
import subprocess
import sys


def run(kvpack, threads, rounds):
    cmd = [kvpack, "bench", "codec", "--codec", "kvarn", "--mib", "4", "--rounds", str(rounds),
           "--window-s", "0.02", "--threads", str(threads), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    if d.get("threads") != threads:
        sys.exit(f"FAIL: threads {d.get('threads')} reported, {threads} asked")
    if d.get("rounds") != rounds:
        sys.exit(f"FAIL: rounds {d.get('rounds')} reported, {rounds} asked")
    if d.get("pages") != 8 or not d.get("results"):
        sys.exit(f"FAIL: unexpected pages/results: {p.stdout[:200]}")
    for r in d["results"]:
        for k in ("encode_gbs", "decode_gbs", "decode_rotated_gbs", "memcpy_gbs"):
            v = r.get(k)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                sys.exit(f"FAIL: {r['codec']}/{r['impl']} {k} = {v} with {threads} threads")
        for k in ("encode_vs_memcpy", "decode_vs_memcpy"):
            lo, mid, hi = r[k + "_min"], r[k], r[k + "_max"]
            if not 0 < lo <= mid <= hi:
                sys.exit(f"FAIL: {r['codec']}/{r['impl']} {k} {mid} not within its rounds "
                         f"[{lo}, {hi}]")
            if rounds == 1 and lo != hi:
                sys.exit(f"FAIL: one round but {k} ranges over [{lo}, {hi}]")
    print(f"ok: {threads} threads, {rounds} rounds, {len(d['results'])} implementations")


def refused(kvpack, opt, arg, msg):
    p = subprocess.run([kvpack, "bench", "codec", opt, arg], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 2 or msg not in p.stderr:
        sys.exit(f"FAIL: {opt} {arg}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
    print(f"ok: {opt} {arg} refused: {p.stderr.strip()}")


def main():
    kvpack = sys.argv[1]
    run(kvpack, 1, 5)
    run(kvpack, 1, 1)
    run(kvpack, 2, 3)
    run(kvpack, 3, 3)
    refused(kvpack, "--threads", "0", "--threads wants 1..64, got 0")
    refused(kvpack, "--threads", "65", "--threads wants 1..64, got 65")
    refused(kvpack, "--rounds", "0", "--rounds wants 1..1000, got 0")
    refused(kvpack, "--window-s", "0", "--window-s wants above 0 and at most 60, got 0")
    # 1-token pages: a 2-bit page (a group's fp16 scale and min per channel) is larger than the
    # fp16 page, which the page slots used to be sized by: every codec runs, none is cut short
    cmd = [kvpack, "bench", "codec", "--codec", "all", "--page-tokens", "1", "--mib", "1",
           "--rounds", "1", "--window-s", "0.02", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    got = {r["codec"] for r in json.loads(p.stdout)["results"]}
    if got != {"fp16", "kivi", "kivi128", "oscar", "kvarn", "naive2"}:
        sys.exit(f"FAIL: P=1 benchmarked only {sorted(got)}")
    print(f"ok: P=1 benchmarks every codec ({p.stderr.strip()})")


if __name__ == "__main__":
    main()
