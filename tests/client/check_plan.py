#!/usr/bin/env python3
"""check_plan.py - `kvpack plan` without a node: the per-node and workload arithmetic recomputed
here in a few lines from the JSON's session bytes; fp16 sizes recomputed from the page format
(64-byte header + 4*T*H*D) and the session record (44 bytes + 16 per chunk), and what they take in
a node (a DRAM slot per page rounded up to 64 B, or 4 KiB above 4 KiB, the tail pages one slot
together; on SSD a 4 KiB extent per page above 4 KiB, the record with its tail); the model presets'
geometry; trace prefix sharing against an independent count on a small written trace (and the
Mooncake trace when present); node counts placed here from the cluster's rendezvous rank
(plan_rank prints kvp_placement_rank's order of each session): each node holds its sessions and,
with a trace, each chunk they name once, and the count is the fewest nodes, from the lower bound
up, from which every count up to 64 has its fullest node hold its share (the first that fits
is not it: a review found 45 fit, 46-50 not); bad input gives one line and exit 2 (options) or 1
(files); --help documents every JSON field. Usage: check_plan.py KVPACK PLAN_RANK [TRACE]"""
import json, math, os, shutil, subprocess, sys, tempfile
from collections import Counter

KVPACK, PLAN_RANK = sys.argv[1], sys.argv[2]
TRACE = sys.argv[3] if len(sys.argv) > 3 else ""
MAX_NODES = 64  # a cluster's peers at most: more is null
fails = []
placed_above_bound = []  # (what, placed, bound) where placement needed more than the bound


def plan(*args):
    p = subprocess.run([KVPACK, "plan", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def plan_json(*args):
    rc, out, err = plan(*args, "--json")
    if rc != 0:
        raise SystemExit(f"FAIL: kvpack plan {' '.join(args)}: rc {rc}: {err.strip()}")
    return json.loads(out)


def expect(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def close(a, b):
    return abs(a - b) <= 1e-4 * max(abs(a), abs(b), 1e-9)


def slot(n):
    """A node's DRAM pool slot for n bytes."""
    return (n + 63) // 64 * 64 if n <= 4096 else (n + 4095) // 4096 * 4096


def extent(n):
    """What a page of n bytes takes on a node's SSD: a 4 KiB extent above 4 KiB, else inline."""
    return (n + 4095) // 4096 * 4096 if n > 4096 else n


ENVELOPE = 24  # a node writes every record with its version, in a 24-byte envelope


def ranks(j, codec, n):
    """kvp_placement_rank of sessions lt-0..lt-<n-1> over node0..node63, in plan's namespace."""
    out = subprocess.run([PLAN_RANK, j["model"], str(j["layers"]), str(j["kv_heads"]),
                          str(j["head_dim"]), str(j["page_tokens"]), codec, str(n)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [[int(k) for k in line.split()] for line in out.splitlines()]


def moves_by_n(rk):
    """For n = 1..MAX_NODES, the sessions whose node changes when node<n-1> joins, as (session,
    old node or None, new node): a session's node among node0..node<n-1> is the first of its rank
    there, so it moves to node<n-1> exactly when that one ranks before every smaller one."""
    moves = [[] for _ in range(MAX_NODES + 1)]
    for i, rank in enumerate(rk):
        low = MAX_NODES
        for k in rank:
            if k < low:
                moves[k + 1].append((i, k))
                low = k
    cur = [None] * len(rk)
    for n in range(1, MAX_NODES + 1):
        step = []
        for i, k in moves[n]:
            step.append((i, cur[i], k))
            cur[i] = k
        yield n, step


def fullest_by_n(rk, add):
    """{n: the fullest node's figures over node0..node<n-1>}: add(i, node, sign) adds session i
    to (sign 1) or takes it off (sign -1) node's figures and returns them as a tuple, kept here
    per node; the figures are compared as tuples of the same length."""
    per_node, out = {}, {}
    for n, step in moves_by_n(rk):
        for i, old, new in step:
            if old is not None:
                per_node[old] = add(i, old, -1)
            per_node[new] = add(i, new, 1)
        out[n] = tuple(map(max, zip(*per_node.values())))  # each figure's largest
    return out


def placed(lb, fullest, what):
    """The fewest nodes from the lower bound lb up from which every count up to MAX_NODES has its
    fullest node hold its share (fullest(n) says whether it does): not the first that fits, as
    one more node can rank more sessions first on a full node; None without a bound, or when
    MAX_NODES does not fit."""
    if lb is None or lb > MAX_NODES:
        return None
    fail = lb - 1
    for n in range(lb, MAX_NODES + 1):
        if not fullest(n):
            fail = n
    if fail == MAX_NODES:
        return None
    if fail + 1 > lb:
        placed_above_bound.append((what, fail + 1, lb))
    return fail + 1


def fp16_session(L, H, D, P, T):
    """Independent fp16 session size from the documented formats: pages, record, DRAM, SSD."""
    full, r = divmod(T, P)
    page, tail = 64 + 4 * P * H * D, L * (64 + 4 * r * H * D) if r else 0
    rec = 44 + 16 * full
    return (L * full * page + tail, rec, L * full * slot(page) + (slot(tail) if tail else 0),
            L * full * extent(page) + tail + rec + ENVELOPE)


# ---- (2) arithmetic: sessions per node, nodes, bits, ratio, ship time ----
def check_arith(j, live):
    L, H, D, T = j["layers"], j["kv_heads"], j["head_dim"], j["tokens"]
    dram = int(j["dram_gb"] * 1e9 * j["fill"])
    ssd = int(j["ssd_gb"] * 1e9 * j["fill"] * (1 - j["compact_ratio"]))
    fp16 = [c for c in j["codecs"] if c["codec"] == "fp16"][0]
    for c in j["codecs"]:
        sb, sd, ss = c["session_bytes"], c["session_dram_bytes"], c["session_ssd_bytes"]
        name = c["codec"]
        expect(sb == c["page_bytes"] + c["record_bytes"], f"{name}: session = pages + record")
        expect(sb - c["record_bytes"] <= sd and sb <= ss, f"{name}: rounding only adds bytes")
        expect(c["sessions_per_node_dram"] == dram // sd, f"{name}: sessions per node DRAM")
        expect(c["sessions_per_node_ssd"] == ssd // ss, f"{name}: sessions per node SSD")
        pd, ps = dram // sd, ssd // ss
        lb_d = math.ceil(live / pd) if pd else None
        # with spill the sessions live on SSD, DRAM caches them: not the sum of the two
        lb_s = math.ceil(live / max(pd, ps)) if pd else None
        expect(c["nodes_dram_lower_bound"] == lb_d and c["nodes_spill_lower_bound"] == lb_s,
               f"{name}: lower bounds {c['nodes_dram_lower_bound']} / "
               f"{c['nodes_spill_lower_bound']} want {lb_d} / {lb_s}")
        rk = ranks(j, name, live) if pd and lb_s <= MAX_NODES else []
        held = Counter()

        def add(i, k, sign):
            held[k] += sign
            return (held[k],)
        most = fullest_by_n(rk, add) if rk else {}
        want_d = placed(lb_d, lambda n: most[n][0] <= pd, f"{name} dram")
        want_s = placed(lb_s, lambda n: most[n][0] <= max(pd, ps), f"{name} spill")
        expect(c["nodes_dram"] == want_d, f"{name}: nodes_dram {c['nodes_dram']} want {want_d}")
        expect(c["nodes_spill"] == want_s, f"{name}: nodes_spill {c['nodes_spill']} want {want_s}")
        expect(close(c["bytes_per_token"], sb / T), f"{name}: bytes per token")
        expect(close(c["bits_per_elem"], sb * 8 / (2 * L * T * H * D)), f"{name}: bits per elem")
        expect(close(c["ratio_vs_fp16"], 4 * L * T * H * D / sb), f"{name}: ratio vs fp16")
        expect(close(c["ship_ms"], sb * 8 / (j["link_gbps"] * 1e9) * 1e3), f"{name}: ship ms")
        expect(close(c["fp16_ship_ms"], fp16["ship_ms"]), f"{name}: fp16 ship ms")
        expect(close(c["speedup_vs_fp16"], fp16["session_bytes"] / sb), f"{name}: speedup")
    pages, rec, in_dram, on_ssd = fp16_session(L, H, D, j["page_tokens"], T)
    expect(fp16["page_bytes"] == pages and fp16["record_bytes"] == rec,
           f"fp16 bytes {fp16['page_bytes']}+{fp16['record_bytes']} want {pages}+{rec}")
    expect(fp16["session_dram_bytes"] == in_dram and fp16["session_ssd_bytes"] == on_ssd,
           f"fp16 in a node {fp16['session_dram_bytes']} / {fp16['session_ssd_bytes']} B, "
           f"want {in_dram} / {on_ssd}")


j = plan_json("--model", "llama-3.1-8b", "--tokens", "8192", "--sessions", "10000")
check_arith(j, 10000)
kivi = [c for c in j["codecs"] if c["codec"] == "kivi"][0]
expect(abs(kivi["bits_per_elem"] - 3.002) < 0.001, "kivi at 8 x 128, P 128: 3.002 bits (README)")
j = plan_json("--layers", "5", "--kv-heads", "2", "--head-dim", "64", "--page-tokens", "64",
              "--tokens", "1000", "--rate", "3.5", "--ttl", "101", "--dram", "0.2", "--ssd", "3",
              "--fill", "0.75", "--link-gbps", "25", "--sink-tokens", "128", "--compact-ratio", "0.3")
expect(j["live_sessions"] == 354, f"live sessions ceil(3.5 x 101) = 354, got {j['live_sessions']}")
j7 = plan_json("--model", "qwen3-8b", "--tokens", "100", "--rate", "0.07", "--ttl", "100")
expect(j7["live_sessions"] == 7, f"0.07 x 100 live sessions (7.000000000000001 in binary): "
       f"{j7['live_sessions']}")
expect(j["compact_ratio"] == 0.3, "--compact-ratio not taken")
check_arith(j, 354)
# a session larger than a node's DRAM cannot be placed: null nodes, "no fit" in the text table
j = plan_json("--model", "llama-3.1-8b", "--tokens", "8192", "--sessions", "5", "--dram", "0.5",
              "--codec", "fp16")
expect(j["codecs"][0]["nodes_dram"] is None and j["codecs"][0]["nodes_spill"] is None,
       "a session over the DRAM budget: nodes null")
rc, out, _ = plan("--model", "llama-3.1-8b", "--tokens", "8192", "--sessions", "5", "--dram", "0.5")
expect(rc == 0 and "no fit" in out, "text table says no fit")
# no workload: nodes are null
j = plan_json("--model", "qwen3-8b", "--tokens", "100")
expect(all(c["nodes_dram"] is None for c in j["codecs"]), "no workload: nodes null")
expect([c["codec"] for c in j["codecs"]] == ["fp16", "kivi", "kivi128", "oscar", "kvarn"],
       "--codec all = fp16 kivi kivi128 oscar kvarn")

# ---- (3) presets ----
for name, geo in {"llama-3.1-8b": (32, 8, 128), "qwen3-8b": (36, 8, 128),
                  "smollm2-135m": (30, 3, 64)}.items():
    j = plan_json("--model", name, "--tokens", "1")
    expect((j["layers"], j["kv_heads"], j["head_dim"]) == geo, f"preset {name} geometry")
j = plan_json("--model", "qwen3-8b", "--layers", "2", "--tokens", "1")
expect((j["layers"], j["kv_heads"]) == (2, 8), "explicit --layers overrides the preset")


# ---- trace: full chunks shared by (block id, position), counted once ----
def trace_check(path, args, P=128, S=0, L=2):
    H, D = 2, 64
    j = plan_json("--layers", str(L), "--kv-heads", str(H), "--head-dim", str(D), "--page-tokens",
                  str(P), "--sink-tokens", str(S), "--trace", path, *args)
    reqs = [json.loads(l) for l in open(path) if l.strip()]
    seen, per_req = set(), []
    for r in reqs:  # a chunk is the same tokens where every block id up to its block is the same
        h, r["prefix"] = 0, []
        for x in r["hash_ids"]:
            h = hash((h, x))
            r["prefix"].append(h)
        n = r["input_length"]
        for c in range(n // P):
            seen.add((r["prefix"][c * P // 512], c))
        per_req.append(n)
    expect(j["trace"]["requests"] == len(reqs), f"{path}: requests")
    expect(j["trace"]["unique_chunks"] == len(seen), f"{path}: unique chunks")
    expect(j["tokens"] == sum(per_req) // len(reqs), f"{path}: default tokens = mean length")
    dram = int(j["dram_gb"] * 1e9 * j["fill"])
    ssd = int(j["ssd_gb"] * 1e9 * j["fill"] * (1 - j["compact_ratio"]))
    fp16_full = 64 + 4 * P * H * D
    for c in j["codecs"]:
        full = c["full_page_bytes"]

        def tail(n):
            return L * (64 + 4 * (n % P) * H * D) if n % P else 0

        def sealed(n, f=lambda b: b):  # f: a sealed page's bytes in a node
            k = n // P
            s = min(S // P, k)
            return L * (s * f(fp16_full) + (k - s) * f(full))

        def session_dram(n):  # no record in the pool; the tail pages share one slot
            return sealed(n, slot) + (slot(tail(n)) if tail(n) else 0)
        total = sum(sealed(n) + tail(n) + 44 + 16 * (n // P) for n in per_req)
        uniq, uniq_d, uniq_s = 0, 0, 0
        for _, pos in seen:
            page = fp16_full if pos < S // P else full
            uniq, uniq_d, uniq_s = uniq + L * page, uniq_d + L * slot(page), uniq_s + L * extent(page)
        for n in per_req:
            uniq += tail(n) + 44 + 16 * (n // P)
            uniq_d += slot(tail(n)) if tail(n) else 0
            uniq_s += tail(n) + 44 + 16 * (n // P) + ENVELOPE
        expect(c["trace_bytes"] == total, f"{path} {c['codec']}: trace bytes {c['trace_bytes']} want {total}")
        expect(c["trace_unique_bytes"] == uniq,
               f"{path} {c['codec']}: unique bytes {c['trace_unique_bytes']} want {uniq}")
        expect(c["trace_unique_dram_bytes"] == uniq_d and c["trace_unique_ssd_bytes"] == uniq_s,
               f"{path} {c['codec']}: unique in a node {c['trace_unique_dram_bytes']} / "
               f"{c['trace_unique_ssd_bytes']} want {uniq_d} / {uniq_s}")
        fits = session_dram(max(per_req)) <= dram  # the longest session must fit one node's DRAM
        lb_d = math.ceil(uniq_d / dram) if fits else None
        lb_s = min(math.ceil(uniq_d / dram), math.ceil(uniq_s / ssd)) if fits else None
        expect(c["nodes_dram_lower_bound"] == lb_d and c["nodes_spill_lower_bound"] == lb_s,
               f"{path} {c['codec']}: trace lower bounds {c['nodes_dram_lower_bound']} / "
               f"{c['nodes_spill_lower_bound']} want {lb_d} / {lb_s}")
        rk = ranks(j, c["codec"], len(reqs)) if fits and lb_s <= MAX_NODES else []

        d, s, refs = Counter(), Counter(), Counter()

        def add(i, k, sign):
            """Request i on (sign 1) or off (-1) node k: its own tail and record there, each
            chunk it names once on every node whose requests name it (counted by references)."""
            m = reqs[i]["input_length"]
            d[k] += sign * (slot(tail(m)) if tail(m) else 0)
            s[k] += sign * (tail(m) + 44 + 16 * (m // P) + ENVELOPE)
            for ch in range(m // P):
                key = (k, reqs[i]["prefix"][ch * P // 512], ch)
                refs[key] += sign
                if refs[key] == (1 if sign > 0 else 0):  # the first reference, or the last gone
                    page = fp16_full if ch < S // P else full
                    d[k] += sign * L * slot(page)
                    s[k] += sign * L * extent(page)
            return d[k], s[k]
        most = fullest_by_n(rk, add) if rk else {}
        want_d = placed(lb_d, lambda n: most[n][0] <= dram, f"{path} {c['codec']} dram")
        want_s = placed(lb_s, lambda n: most[n][0] <= dram or most[n][1] <= ssd,
                        f"{path} {c['codec']} spill")
        expect(c["nodes_dram"] == want_d,
               f"{path} {c['codec']}: trace nodes_dram {c['nodes_dram']} want {want_d}")
        expect(c["nodes_spill"] == want_s,
               f"{path} {c['codec']}: trace nodes_spill {c['nodes_spill']} want {want_s}")
        checked_fit.add(fits)


checked_fit = set()
tmp = tempfile.mkdtemp(prefix="kvp_plan_")
small = os.path.join(tmp, "t.jsonl")
with open(small, "w") as f:  # two conversations; the second turn repeats the first's blocks;
    # the last names block 2 after another first block: not the same tokens (plan counted it
    # shared by block id and position, where a chunk's key chains over the prefix)
    for ts, n, ids in [(0, 1000, [1, 2]), (1, 1700, [1, 2, 3, 4]), (2, 600, [9, 10]),
                       (3, 100, [1]), (4, 1536, [1, 2, 5]), (5, 1024, [7, 2])]:
        f.write(json.dumps({"timestamp": ts, "input_length": n, "output_length": 1,
                            "hash_ids": ids}) + "\n")
trace_check(small, ["--dram", "0.001", "--ssd", "0.01"])
trace_check(small, ["--dram", "0.001"], P=64, S=128)
expect(checked_fit == {True, False}, "trace cases cover a fit and a no-fit codec")
# 60 conversations under one 3-block system prompt: each node stores the prompt once for its
# sessions, so the cluster holds it once per node, not once (the count used to assume once)
shared = os.path.join(tmp, "shared.jsonl")
with open(shared, "w") as f:
    for i in range(60):
        f.write(json.dumps({"timestamp": i, "input_length": 2048 - i, "output_length": 1,
                            "hash_ids": [1, 2, 3, 100 + i]}) + "\n")
trace_check(shared, ["--dram", "0.004", "--ssd", "0.01"])
trace_check(shared, ["--dram", "0.002", "--ssd", "0.05"], P=64, S=64)
if os.path.exists(TRACE):
    trace_check(TRACE, ["--dram", "8", "--codec", "kivi"])  # 4 nodes at best, placed 5
    # its first 2,000 requests where the first count that fits is not a plan (a review: oscar
    # fit at 45 nodes, not at 46-50; plan said 45): every codec's count holds for all above it
    head = os.path.join(tmp, "head2000.jsonl")
    with open(TRACE) as src, open(head, "w") as f:
        f.writelines(l for _, l in zip(range(2000), src))
    trace_check(head, ["--dram", "0.5", "--ssd", "1"], P=64, S=256, L=4)
else:
    print(f"check_plan: Mooncake trace {TRACE or '(not given)'} absent, full-trace check skipped")

# the node counts above needed more nodes than the lower bound somewhere, or they test nothing
print(f"placed above the lower bound: {placed_above_bound[:6]}")
expect(any("fp16 dram" == w for w, _, _ in placed_above_bound) and
       any(w.startswith(shared) for w, _, _ in placed_above_bound),
       "no case where placement needs more nodes than the lower bound")
# no count past a cluster's 64 nodes (null, ">64" in the text); past 250,000 sessions none at all
# (null, "unplaced"), the lower bounds still given
j = plan_json("--model", "llama-3.1-8b", "--tokens", "8192", "--sessions", "100000", "--codec",
              "fp16")
c = j["codecs"][0]
expect(c["nodes_dram"] is None and c["nodes_dram_lower_bound"] == 472 and j["max_nodes"] == 64,
       f"past 64 nodes: {c['nodes_dram']} / {c['nodes_dram_lower_bound']}")
rc, out, _ = plan("--model", "llama-3.1-8b", "--tokens", "8192", "--sessions", "100000", "--codec",
                  "fp16")
expect(rc == 0 and ">64" in out, "text: >64")
j = plan_json("--model", "smollm2-135m", "--tokens", "128", "--sessions", "250001", "--dram", "30",
              "--codec", "kivi")
c = j["codecs"][0]
expect(c["nodes_dram"] is None and c["nodes_dram_lower_bound"] == 6,
       f"past 250000 sessions: {c['nodes_dram']} / {c['nodes_dram_lower_bound']}")

# ---- (4) bad input: one line on stderr, nothing on stdout, exit 2 (options) or 1 (files) ----
bad = os.path.join(tmp, "bad.jsonl")
with open(bad, "w") as f:
    f.write('{"timestamp": 0, "input_length": 10, "hash_ids": [1]}\nnot json\n')
cases = [
    (2, ["--model", "gpt-9", "--tokens", "10"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--codec", "zip"]),
    (2, ["--layers", "0", "--kv-heads", "8", "--head-dim", "128", "--tokens", "10"]),
    (2, ["--layers", "100000", "--kv-heads", "8", "--head-dim", "128", "--tokens", "10"]),
    (2, ["--layers", "2", "--kv-heads", "8", "--head-dim", "100", "--tokens", "10", "--codec", "oscar"]),
    (2, ["--layers", "2", "--kv-heads", "300", "--head-dim", "128", "--tokens", "10"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--page-tokens", "0"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--page-tokens", "8192"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--sink-tokens", "100"]),
    (2, ["--model", "qwen3-8b"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--rate", "2"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--fill", "1.5"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--compact-ratio", "1"]),
    (2, ["--model", "qwen3-8b", "--tokens", "10", "--dram", "0"]),
    (2, ["--model", "qwen3-8b", "--tokens", "ten"]),
    (2, ["--model", "qwen3-8b", "--trace", small, "--page-tokens", "96"]),
    (1, ["--model", "qwen3-8b", "--trace", os.path.join(tmp, "missing.jsonl")]),
    (1, ["--model", "qwen3-8b", "--trace", bad]),
]
for want, args in cases:
    rc, out, err = plan(*args)
    lines = [l for l in err.splitlines() if l.strip()]
    print(f"  rc {rc}: {err.strip()}")
    expect(rc == want and out == "" and len(lines) == 1 and lines[0].startswith("kvpack"),
           f"plan {' '.join(args)}: rc {rc} (want {want}), stderr {err.strip()!r}")

# ---- (4b) the text header shows the node and link figures as given (%.0f printed 0.5 as 0) ----
rc, out, _ = plan("--model", "llama-3.1-8b", "--tokens", "8192", "--sessions", "100", "--dram", "0.5",
                  "--ssd", "0.4", "--link-gbps", "0.4", "--codec", "kivi")
expect(rc == 0 and "node 0.5 GB DRAM + 0.4 GB SSD" in out and "link 0.4 Gbit/s" in out,
       f"plan header: {out.splitlines()[:1]}")

# ---- (5) --help documents every field the JSON reports ----
rc, out, _ = plan("--help")
expect(rc == 0 and "usage" in out, "--help exit 0 with usage")
j = plan_json("--model", "smollm2-135m", "--trace", small)
keys = set(j["codecs"][0]) - {"codec"}
missing = [k for k in keys if k not in out and k.replace("_dram", "").replace("_ssd", "") not in out]
expect(not missing, f"--help explains {missing}")

if fails:
    sys.exit(f"check_plan: {len(fails)} check(s) failed")
shutil.rmtree(tmp, ignore_errors=True)
print("check_plan: arithmetic, presets, trace sharing, bad input and --help all as expected")
