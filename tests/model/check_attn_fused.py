#!/usr/bin/env python3
"""check_attn_fused.py - `kvpack model --attn fused` (attention straight over the sealed pages,
kvp_attn_compute) against the default decode-then-attend path on stories260K teacher-forced over
512 tokens of Emma, one lane per codec (bare or with regions that have no V window): per lane the
same top-1 agreement (within 1 prediction), KL within 0.002 and perplexity within 0.2 % (the two
paths differ only in fp32 summation order). Also: --attn fused refuses a lane with a V window
(kivi's reference regions) with a one-line error and a non-zero exit, and --attn bogus exits 2.
Usage: check_attn_fused.py KVPACK_BIN REALDATA_DIR. Exits 77 when the real data is absent."""
import json
import os
import subprocess
import sys

LANES = "fp16,kivi@bare,kivi128@bare,oscar,kvarn,oscar@s1e256"


def run(kvpack, rd, attn, codec=LANES):
    cmd = [kvpack, "model", "--model", os.path.join(rd, "stories260K.bin"), "--tokenizer",
           os.path.join(rd, "tok512.bin"), "--text", os.path.join(rd, "emma.txt"), "--tokens",
           "512", "--codec", codec, "--attn", attn, "--json"]
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    if len(sys.argv) != 3:
        print("usage: check_attn_fused.py KVPACK_BIN REALDATA_DIR", file=sys.stderr)
        return 2
    kvpack, rd = sys.argv[1:]
    if not os.path.isfile(os.path.join(rd, "stories260K.bin")):
        print(f"SKIP: real data absent ({rd}/stories260K.bin)")
        return 77
    out = {}
    for attn in ("decode", "fused"):
        r = run(kvpack, rd, attn)
        if r.returncode != 0:
            print(f"FAIL: --attn {attn} exited {r.returncode}: {r.stderr[-1000:]}")
            return 1
        js = json.loads(r.stdout)
        if js.get("attn") != attn:
            print(f"FAIL: JSON says attn {js.get('attn')}, asked {attn}")
            return 1
        out[attn] = {c["codec"]: c for c in js["codecs"]}
    bad = 0
    n = 511
    for name, d in out["decode"].items():
        f = out["fused"][name]
        print(f"{name:14s} top1 {d['top1_agree']:.4f} / {f['top1_agree']:.4f}  kl {d['kl_mean']:.4f} / "
              f"{f['kl_mean']:.4f}  ppl {d['ppl']:.3f} / {f['ppl']:.3f}  (decode / fused)")
        if abs(d["top1_agree"] - f["top1_agree"]) * n > 1.01:
            print(f"FAIL: {name}: top-1 agreement differs by more than one prediction")
            bad += 1
        if abs(d["kl_mean"] - f["kl_mean"]) > 0.002 or abs(d["ppl"] / f["ppl"] - 1) > 0.002:
            print(f"FAIL: {name}: KL or perplexity moved")
            bad += 1
    r = run(kvpack, rd, "fused", "kivi")
    if r.returncode == 0 or "V window" not in r.stderr:
        print(f"FAIL: --attn fused with kivi's V window: exit {r.returncode}, {r.stderr.strip()}")
        bad += 1
    r = run(kvpack, rd, "bogus")
    if r.returncode != 2:
        print(f"FAIL: --attn bogus exited {r.returncode}")
        bad += 1
    if bad:
        return 1
    print("check_attn_fused: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
