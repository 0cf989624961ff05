#!/usr/bin/env python3
"""check_smollm2_quality.py - issue 4's quality bar on a real model, end to end through the CLI:
`kvpack model` teacher-forces 2,048 tokens of Emma through SmolLM2-135M-Instruct with five cache lanes
and this script checks the JSON it prints:
  * the best 2-bit lane (oscar with a 128-token fp16 sink and its reference 256-token residual) has
    perplexity within 10 % of fp16 and top-1 agreement >= 0.9;
  * at matched bits and matched cache regions oscar beats kivi, and kvarn beats kivi128, on
    perplexity and on KL(fp16 || codec);
  * every lane's page bits are what its codec stores (2-bit codecs about 2.3-3.1, fp16 16).
Usage: check_smollm2_quality.py BIN_DIR FETCH_SCRIPT EMMA_TXT. Exits 77 (skipped) with a message
when the model cannot be fetched (offline) or Emma is missing."""
import json
import os
import subprocess
import sys

LANES = ["fp16", "oscar@s1e256", "kivi@s1e256", "kvarn", "kivi128@kvarn"]


def main():
    if len(sys.argv) != 4:
        print("usage: check_smollm2_quality.py BIN_DIR FETCH_SCRIPT EMMA_TXT", file=sys.stderr)
        return 2
    bin_dir, fetch, emma = sys.argv[1:]
    if not os.path.isfile(emma):
        print(f"SKIP: {emma} is missing")
        return 77
    got = subprocess.run(["sh", fetch], capture_output=True, text=True)
    gguf = got.stdout.strip()
    if got.returncode != 0 or not gguf or not os.path.isfile(gguf):
        print(f"SKIP: SmolLM2-135M GGUF could not be fetched (offline? see {fetch}): "
              f"{got.stderr.strip()[-200:]}")
        return 77
    cmd = [os.path.join(bin_dir, "kvpack"), "model", "--model", gguf, "--text", emma,
           "--tokens", "2048", "--codec", ",".join(LANES), "--json"]
    print("running:", " ".join(cmd), flush=True)
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL: kvpack model exited {run.returncode}: {run.stderr[-2000:]}")
        return 1
    rep = json.loads(run.stdout)
    lanes = {c["codec"]: c for c in rep["codecs"]}
    fails = []

    def expect(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            fails.append(what)

    expect(sorted(lanes) == sorted(LANES), f"lanes reported: {sorted(lanes)}")
    if fails:
        return 1
    for name in LANES:
        c = lanes[name]
        print(f"  {name:16s} ppl {c['ppl']:8.3f} kl {c['kl_mean']:.4f} top1 {c['top1_agree']:.3f} "
              f"bits {c['bits_per_elem']:.3f} page {c['bits_page']:.3f}")
    fp16 = lanes["fp16"]
    expect(fp16["kl_mean"] == 0 and fp16["top1_agree"] == 1 and 15.9 < fp16["bits_page"] < 16.1,
           "fp16 lane is the reference (KL 0, top-1 1, 16 bits)")
    expect(20 < rep["ppl_fp16"] < 40, f"fp16 perplexity {rep['ppl_fp16']:.3f} is that of a 135M model on Emma")
    best = lanes["oscar@s1e256"]
    expect(best["ppl"] <= 1.10 * rep["ppl_fp16"],
           f"best 2-bit lane ppl {best['ppl']:.3f} within 10 % of fp16 {rep['ppl_fp16']:.3f}")
    expect(best["top1_agree"] >= 0.9, f"best 2-bit lane top-1 agreement {best['top1_agree']:.3f} >= 0.9")
    for a, b in (("oscar@s1e256", "kivi@s1e256"), ("kvarn", "kivi128@kvarn")):
        la, lb = lanes[a], lanes[b]
        expect(abs(la["bits_page"] - lb["bits_page"]) < 0.35 and 2.0 < lb["bits_page"] < 3.2,
               f"{a} {la['bits_page']:.3f} and {b} {lb['bits_page']:.3f} page bits are matched")
        expect(la["regions"] == lb["regions"], f"{a} and {b} use the same cache regions")
        expect(la["ppl"] < lb["ppl"], f"{a} ppl {la['ppl']:.3f} < {b} {lb['ppl']:.3f}")
        expect(la["kl_mean"] < lb["kl_mean"], f"{a} KL {la['kl_mean']:.4f} < {b} {lb['kl_mean']:.4f}")
    print("PASS" if not fails else f"FAIL: {len(fails)} check(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
