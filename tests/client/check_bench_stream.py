#!/usr/bin/env python3
"""check_bench_stream.py - `kvpack bench stream` runs both roles of a session against a real local
node, serial and streamed: prefill (encode + put, and layer by layer over kvp_put_stream) and
decode (get + decode, and runs of pages handed to a decode thread by kvp_client_get_session_cb).
With --replicas 2 --decode-node the prefill goes to two nodes and a decode node (serial:
kvp_cluster_put_session then a put; streamed: kvp_cluster_stream), every copy read back.
It exits 0 only when every put, get and delete succeeded, the streamed session read back
page-identical and the streamed decode gave the serial one's fp16 values; the JSON carries each
half's medians and ratios that agree with them; bad options exit 2. Speed is never asserted
(shared, noisy machines).
usage: check_bench_stream.py KVPACK"""
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


for codec, extra in (("kivi", []), ("fp16", []), ("kivi", ["--replicas", "2", "--decode-node"])):
    cmd = [kvpack, "bench", "stream", "--codec", codec, "--layers", "3", "--tokens", "512",
           "--heads", "2", "--head-dim", "64", "--reps", "2", "--json"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode} {p.stderr.strip()[-300:]}")
    d = json.loads(p.stdout) if p.returncode == 0 else {}
    check(d.get("pages") == 3 * 4 and d.get("layers") == 3 and d.get("tokens") == 512 and
          d.get("replicas") == (2 if extra else 0) and d.get("decode_node") == bool(extra),
          f"{codec} {extra} geometry: {d}")
    codec = codec + (" to 2 replicas and a decode node" if extra else "")
    page = 64 + 2 * 128 * 2 * 64 * 2 if codec == "fp16" else None  # fp16 page: header + K,V
    check(d.get("session_bytes", 0) > 0 and (page is None or d["session_bytes"] == 12 * page),
          f"{codec} session bytes {d.get('session_bytes')}")
    for half, parts in (("prefill", ("encode", "ship")), ("decode", ("get", "decode"))):
        h = d.get(half, {})
        for k in ("serial", "streamed") + parts:
            v = h.get(k + "_s")
            check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
                  f"{codec} {half} {k}_s: {v}")
        if not fails:
            check(abs(h["streamed_vs_serial"] - h["serial_s"] / h["streamed_s"]) < 1e-3 *
                  h["streamed_vs_serial"], f"{codec} {half} streamed_vs_serial")
            print(f"{codec} {half}: serial {h['serial_s'] * 1e3:.1f} ms, streamed "
                  f"{h['streamed_s'] * 1e3:.1f} ms ({h['streamed_vs_serial']:.2f}x)")

for bad in (["--reps", "0"], ["--layers", "1"], ["--codec", "nope"], ["--frobnicate"],
            ["--replicas", "5"], ["--decode-node"]):
    p = subprocess.run([kvpack, "bench", "stream"] + bad, capture_output=True, text=True)
    check(p.returncode == 2 and p.stderr.strip(), f"bench stream {bad}: exit {p.returncode}")

print(f"{len(fails)} check(s) failed" if fails else "bench stream: ok")
sys.exit(1 if fails else 0)
