#!/usr/bin/env python3
"""check_demo.py - runs `kvpack demo --json` (a real kvpackd, two client processes, a node
restart) and checks the figures issue 2 asks for: exit 0, compression_ratio >= 5 for kivi,
finite attention error, every page CRC-verified and byte-identical after the restart."""
import json
import math
import subprocess
import sys

kvpack = sys.argv[1]
args = sys.argv[2:]
p = subprocess.run([kvpack, "demo", "--json", *args], capture_output=True, text=True, timeout=600)
sys.stderr.write(p.stderr)
if p.returncode != 0:
    print(f"kvpack demo exited {p.returncode}\n{p.stdout}")
    sys.exit(1)
r = json.loads(p.stdout)
print(json.dumps(r, indent=1))
fails = []
if r["codec"] == "kivi" and not r["compression_ratio"] >= 5.0:
    fails.append(f"compression_ratio {r['compression_ratio']} < 5.0")
if r["attn_rel_err"] is None or not math.isfinite(r["attn_rel_err"]):
    fails.append("attn_rel_err is not finite")
if not 0 < r["attn_rel_err"] < 1.0:
    fails.append(f"attn_rel_err {r['attn_rel_err']} outside (0, 1)")
if r["pages_crc_verified"] != r["pages"]:
    fails.append("not every page was CRC-verified")
if r["resume_identical"] is not True:
    fails.append("session not byte-identical after node restart")
if r["ok"] is not True:
    fails.append("demo reported ok=false")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
