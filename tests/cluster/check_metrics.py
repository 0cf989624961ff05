#!/usr/bin/env python3
"""check_metrics.py - kvpackd --http against a real node: /health is 200 "ok"; /metrics is valid
Prometheus text 0.0.4 (every sample `name{labels} value`, every family with HELP and TYPE before
its samples, kvpack_* names, counters end in _total, no series twice); a `kvpack put` moves the
put counters by the requests it sent and DRAM bytes by its pages' pool slots, equal to what
`kvpack stat --json` says; a spill, a restore and a NOT_FOUND move theirs, an rm of a session
the node never held kvpack_tombstones and kvpack_tombstone_bytes; HEAD, 404, 405, a
garbage and an over-long request line (400) while the node keeps serving; silent and half-sent
HTTP clients do not hold up /health or UCX requests, and get 408 at the idle deadline; bad
--http options and a taken HTTP or UCX port are clear errors (nothing of UCX's on stdout); SIGTERM closes the HTTP port and removes both
ready files (so does a failed start, and a start removes a stale one). Histograms are
parsed strictly (samples in their family's block, _bucket with le ascending to +Inf, cumulative,
+Inf = _count, _sum present); after puts and gets each op's kvpack_request_duration_seconds
_count equals its kvpack_requests_total and its _sum the handling-seconds counter; after the
spill and the restore, kvpack_spill/restore_duration_seconds _count equals kvpack_spills_total /
kvpack_restores_total with a _sum > 0 that never goes back. kvpack_interval_syncs_total stays 0
on that (spill) node; a --durability interval --sync-ms 20 node counts none before its first put
and at least one after it; bad --sync-ms values and --sync-ms without interval exit 2; a bad
--dram-budget or --log-level exits 2 saying what it wants and what it got. That node's
MANIFEST damaged: restarted, it repairs its db, STAT, /metrics and `kvpack stat` count one index
rebuild, and the session reads back byte-identical. A SIGTERM while the store opens (held there
by gate_preload.so) closes it and exits 0 without listening or writing the ready file.
usage: check_metrics.py KVPACK KVPACKD LIBKVPACK GATE_PRELOAD"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

kvpack_exe, kvpackd, lib, gate_preload = sys.argv[1:5]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack = kvptest.load_kvpack(lib)
tmp = tempfile.mkdtemp(prefix="kvp_metrics_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
L, T, H, D, P = 2, 256, 2, 64, 128  # two full fp16 chunks per layer, no tail
GETS = 5  # GET_SESSIONs of the session in DRAM after its restore
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*",?)*\})? (\S+)$')
HIST = "kvpack_request_duration_seconds"
SPILL_H, RESTORE_H = "kvpack_spill_duration_seconds", "kvpack_restore_duration_seconds"


def wait_file(path, proc):
    for _ in range(1500):
        if os.path.exists(path):
            return int(open(path).read())
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    sys.exit(f"kvpackd did not write {path}")


def http(port, raw):
    """Send raw bytes, read until the server closes; returns (code, headers dict, body bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = dict(ln.split(": ", 1) for ln in lines[1:])
    check(int(hdrs.get("Content-Length", -1)) == len(body) or raw.startswith(b"HEAD"),
          f"Content-Length of {lines[0]}")
    return int(lines[0].split()[1]), hdrs, body


def get(port, path, method="GET"):
    return http(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


def scrape(port):
    """GET /metrics, checked for format; returns {(name, labels): value}."""
    code, hdrs, body = get(port, "/metrics")
    check(code == 200, f"/metrics answered {code}")
    check(hdrs.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          f"/metrics Content-Type {hdrs.get('Content-Type')}")
    helps, types, series, hists, current = set(), {}, {}, {}, None
    for ln in body.decode().splitlines():
        if ln.startswith("# HELP ") or ln.startswith("# TYPE "):
            parts = ln.split(" ", 3)
            check(len(parts) == 4 and NAME.match(parts[2]) and parts[3], f"bad comment: {ln}")
            if parts[1] == "HELP":
                helps.add(parts[2])
            else:
                check(parts[3] in ("counter", "gauge", "histogram"),
                      f"type of {parts[2]}: {parts[3]}")
                check(parts[2] not in types, f"TYPE twice for {parts[2]}")
                types[parts[2]] = parts[3]
                current = parts[2]
            continue
        m = SAMPLE.match(ln)
        check(m is not None, f"bad sample line: {ln!r}")
        if m is None:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        hist = types.get(current) == "histogram"
        fam = re.sub(r"_(bucket|sum|count)$", "", name) if hist else name
        check(name.startswith("kvpack_"), f"name {name}")
        check(not hist or fam != name, f"histogram sample without _bucket/_sum/_count: {name}")
        check(fam == current and fam in helps, f"{name} outside the block of its HELP and TYPE")
        check(types.get(name) != "counter" or name.endswith("_total"), f"counter {name}")
        check((name, labels) not in series, f"series twice: {name}{labels}")
        series[(name, labels)] = float(value)
        if fam != name:
            hist_sample(hists.setdefault(fam, {}), name[len(fam) + 1:], labels, float(value))
    check(helps == set(types), f"HELP without TYPE or back: {helps ^ set(types)}")
    for fam, by_labels in hists.items():
        for labels, h in by_labels.items():
            les = [le for le, _ in h["bucket"]]
            counts = [c for _, c in h["bucket"]]
            check(les and les[-1] == float("inf") and les == sorted(set(les)),
                  f"{fam}{labels}: le not ascending to +Inf: {les}")
            check(counts == sorted(counts), f"{fam}{labels}: buckets not cumulative: {counts}")
            check(counts[-1:] == [h.get("count")] and "sum" in h, f"{fam}{labels}: +Inf "
                  f"{counts[-1:]} vs _count {h.get('count')}, _sum {h.get('sum')}")
    return series


def hist_sample(by_labels, kind, labels, value):
    """File one histogram sample under its labels less le (only _bucket has le, last)."""
    le = re.search(r',?le="([^"]*)"\}$', labels)
    check((le is not None) == (kind == "bucket"), f"le label on _{kind}: {labels}")
    key = labels[:le.start()] + "}" if le else labels
    h = by_labels.setdefault("" if key == "{}" else key, {"bucket": []})  # le alone: no labels
    if le is None:
        check(kind not in h, f"_{kind}{labels} twice")
        h[kind] = value
        return
    try:
        h["bucket"].append((float(le.group(1)), value))
    except ValueError:
        check(False, f"le is not a number: {labels}")


def check_histograms(port, want_ops):
    """Each op's HIST _count equals its kvpack_requests_total (all results) and _sum the
    handling-seconds counter; the node counts the reply before it records the handling time,
    so scrape again while the last request is being finished."""
    for _ in range(50):
        sr, bad = scrape(port), []
        for lb in [k[1] for k in sr if k[0] == HIST + "_count"]:
            op = re.fullmatch(r'\{op="([^"]*)"\}', lb).group(1)
            answered = sum(v for (name, lbs), v in sr.items()
                           if name == "kvpack_requests_total" and lbs.startswith(f'{{op="{op}",'))
            busy = m(sr, "kvpack_request_handling_seconds_total", op=op)
            if m(sr, HIST + "_count", op=op) != answered or m(sr, HIST + "_sum", op=op) != busy:
                bad.append((op, m(sr, HIST + "_count", op=op), answered))
        if not bad:
            break
        time.sleep(0.1)
    check(not bad, f"{HIST} _count / _sum differ from the counters: {bad}")
    counts = {op: m(sr, HIST + "_count", op=op) for op in want_ops}
    print(f"{HIST}_count by op: {counts}")
    check(all(counts.values()), f"ops without a handling time: {counts}")


def check_store_histograms(*scrapes):
    """In every scrape the spill / restore histograms count what their counters do; their sums
    are > 0 once there was one and never go back."""
    for h, counter in ((SPILL_H, "kvpack_spills_total"), (RESTORE_H, "kvpack_restores_total")):
        counts = [(m(sr, h + "_count"), m(sr, counter), m(sr, h + "_sum")) for sr in scrapes]
        print(f"{h} (_count, {counter}, _sum) by scrape: {counts}")
        check(all(c == n and (s > 0) == (n > 0) for c, n, s in counts),
              f"{h} _count / _sum vs {counter}: {counts}")
        check([s for _, _, s in counts] == sorted(s for _, _, s in counts), f"{h} _sum went back")
        check(counts[-1][1] >= 1, f"no {counter} to time")


def m(series, name, **labels):
    key = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    return series.get((name, key), 0.0)


def cli(*args):
    p = subprocess.run([kvpack_exe, *args], capture_output=True, text=True, timeout=120, env=env)
    check(p.returncode == 0, f"kvpack {' '.join(args)}: exit {p.returncode} {p.stderr.strip()}")
    return json.loads(p.stdout) if p.returncode == 0 and "--json" in args else {}


def node_error(*args):
    p = subprocess.run([kvpackd, "--listen", "127.0.0.1:0", *args], capture_output=True,
                       text=True, timeout=60, env=env)
    return p.returncode, p.stderr.strip()


def slot(n):
    """DRAM pool slot of an n-byte page (README, Limits: 64 B, or 4 KiB over 4 KiB)."""
    q = 4096 if n > 4096 else 64
    return (n + q - 1) // q * q


node = subprocess.Popen(
    [kvpackd, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"),
     "--ready-file", os.path.join(tmp, "ready"), "--dram-budget", "64M",
     "--http", "127.0.0.1:0", "--http-ready-file", os.path.join(tmp, "http")],
    stdout=subprocess.DEVNULL, env=env)
try:
    addr = f"127.0.0.1:{wait_file(os.path.join(tmp, 'ready'), node)}"
    hp = wait_file(os.path.join(tmp, "http"), node)

    code, _, body = get(hp, "/health")
    check(code == 200 and body == b"ok\n", f"/health: {code} {body!r}")
    m0 = scrape(hp)
    for fam in ("kvpack_dram_bytes", "kvpack_dram_pages", "kvpack_dram_budget_bytes",
                "kvpack_sessions_in_dram", "kvpack_sessions_on_disk", "kvpack_spills_total",
                "kvpack_spill_bytes_total", "kvpack_restores_total", "kvpack_restore_bytes_total",
                "kvpack_spill_waits_total", "kvpack_spill_syncs_total", "kvpack_interval_syncs_total",
                "kvpack_crc_failures_total", "kvpack_disk_errors_total",
                "kvpack_expired_sessions_total", "kvpack_uptime_seconds", "kvpack_serving",
                "kvpack_compact_segments_total", "kvpack_compact_moved_bytes_total",
                "kvpack_compact_freed_bytes_total", "kvpack_scrub_bytes_total",
                "kvpack_disk_logical_bytes_total", "kvpack_disk_segment_write_bytes_total",
                "kvpack_scrub_passes_total", "kvpack_index_rebuilds_total", "kvpack_index_lost_total",
                "kvpack_wal_dropped_bytes_total",
                HIST + "_bucket", HIST + "_sum", HIST + "_count", SPILL_H + "_count",
                RESTORE_H + "_sum", RESTORE_H + "_bucket"):
        check(any(k[0] == fam for k in m0), f"/metrics lacks {fam}")
    check(m(m0, "kvpack_dram_budget_bytes") == 64 << 20, "budget is not 64M")
    check(m(m0, "kvpack_serving") == 1, "kvpack_serving is not 1")
    check(m(m0, "kvpack_index_rebuilds_total") == 0, "a fresh node rebuilt its index")
    check(any(k[0] == "kvpack_build_info" and 'version="' in k[1] and 'codecs="fp16,kivi' in k[1]
              and v == 1 for k, v in m0.items()), "kvpack_build_info")
    for op in ("put_pages", "put_session", "get_session", "spill", "stat"):
        check((("kvpack_requests_total", f'{{op="{op}",result="ok"}}')) in m0, f"no ok series {op}")

    # put: counters move by what was sent; DRAM bytes by the pages' slots, equal to STAT's
    n = L * T * H * D
    kvptest.write_kvd(os.path.join(tmp, "a.kvd"), L, T, H, D,
                      [((i * 7) % 41 - 20) / 8 for i in range(2 * n)])
    put = cli("put", "--node", addr, "--session", "s1", "--kvd", os.path.join(tmp, "a.kvd"),
              "--codec", "fp16", "--json")
    stat = cli("stat", "--node", addr, "--json")
    m1 = scrape(hp)
    page = 64 + 2 * P * H * D * 2
    print(f"put: {put.get('pages')} pages, {put.get('bytes')} bytes; dram "
          f"{m(m0, 'kvpack_dram_bytes'):.0f} -> {m(m1, 'kvpack_dram_bytes'):.0f}, stat says "
          f"{stat.get('dram_bytes')}")
    check(put.get("pages") == L * T // P and put.get("bytes") == put["pages"] * page,
          f"put report {put}")
    # kvpack put ships each chunk's L pages in one PUT_PAGES, the last chunk's with the record in
    # one PUT_SESSION
    d_ok = {op: m(m1, "kvpack_requests_total", op=op, result="ok") -
           m(m0, "kvpack_requests_total", op=op, result="ok") for op in ("put_pages", "put_session")}
    check(d_ok == {"put_pages": T // P - 1, "put_session": 1}, f"put request counters moved {d_ok}")
    dram = m(m1, "kvpack_dram_bytes") - m(m0, "kvpack_dram_bytes")
    check(dram == put.get("pages", 0) * slot(page), f"DRAM bytes up {dram}")
    check(m(m1, "kvpack_dram_bytes") == stat.get("dram_bytes"), "DRAM bytes differ from STAT")
    check(m(m1, "kvpack_dram_pages") == stat.get("dram_pages") == put.get("pages"), "DRAM pages")
    rq = sum(m(m1, "kvpack_request_bytes_total", op=op) - m(m0, "kvpack_request_bytes_total", op=op)
             for op in ("put_pages", "put_session"))
    check(put.get("bytes", 0) < rq < put.get("bytes", 0) + 1024 * T // P,
          f"put request bytes {rq} for {put.get('bytes')} page bytes (and a record of 2 keys)")
    check(m(m1, "kvpack_reply_bytes_total", op="put_pages") > 0, "no put_pages reply bytes")
    check(m(m1, "kvpack_requests_total", op="stat", result="ok") >= 1, "STAT not counted")
    answered = sum(v for (name, _), v in m1.items() if name == "kvpack_requests_total")
    check(stat.get("requests") == answered and stat.get("bad_requests") == 0,
          f"STAT requests {stat.get('requests')} (bad {stat.get('bad_requests')}) vs {answered} "
          "answered in /metrics")
    check(m(m1, "kvpack_sessions_in_dram") == 1 and m(m1, "kvpack_sessions") == 1, "sessions")

    # spill, restore, NOT_FOUND through the Python binding
    ns = int(put.get("ns", "0"), 16)
    with kvpack.Client(addr, timeout_ms=10000) as c:
        c.spill(ns, "s1")
        m2 = scrape(hp)
        back = c.get_session(ns, "s1")
        try:
            c.get_session(ns, "nope")
            check(False, "get of an unknown session succeeded")
        except kvpack.KvpError as e:
            check(e.name == "ERR_NOT_FOUND", f"unknown session: {e.name}")
        for _ in range(GETS):
            check(len(c.get_session(ns, "s1").pages) == put.get("pages"), "get of s1")
        stat = c.stat()
    m3 = scrape(hp)
    check(m(m2, "kvpack_spills_total") == m(m1, "kvpack_spills_total") + 1, "spill not counted")
    check(m(m2, "kvpack_spill_syncs_total") == m(m1, "kvpack_spill_syncs_total") + 1,
          "the SPILL's sync not counted")
    check(m(m2, "kvpack_spill_bytes_total") >= put.get("bytes", 1), "spill bytes")
    # what the spill wrote: its pages and record (logical), the pages' 4 KiB spans in segment
    # files, and (where the kernel accounts task I/O) the process's disk writes and their ratio
    logical = m(m2, "kvpack_disk_logical_bytes_total") - m(m1, "kvpack_disk_logical_bytes_total")
    seg = (m(m2, "kvpack_disk_segment_write_bytes_total") -
           m(m1, "kvpack_disk_segment_write_bytes_total"))
    check(logical >= m(m2, "kvpack_spill_bytes_total") - m(m1, "kvpack_spill_bytes_total") > 0 and
          seg >= logical - 65536 and seg % 4096 == 0, f"spill write bytes: logical {logical} segment {seg}")
    if m(m2, "kvpack_process_disk_write_bytes_total") is not None:
        check(m(m2, "kvpack_write_amplification") is not None and
              m(m2, "kvpack_write_amplification") >= 0, "write amplification gauge")
    check(m(m2, "kvpack_sessions_on_disk") == 1 and m(m2, "kvpack_sessions_in_dram") == 0,
          "spilled session still counted in DRAM")
    check(m(m2, "kvpack_dram_bytes") == 0, "spilled pages still in DRAM")
    check(m(m2, "kvpack_requests_total", op="spill", result="ok") == 1, "SPILL request count")
    check(len(back.pages) == put.get("pages"), "restored session pages")
    check(m(m3, "kvpack_restores_total") == m(m2, "kvpack_restores_total") + 1, "restore count")
    check(m(m3, "kvpack_restore_bytes_total") >= put.get("bytes", 1), "restore bytes")
    check(m(m3, "kvpack_dram_bytes") == stat.dram_bytes == dram, "DRAM after restore vs STAT")
    check(stat.disk_bytes == m(m3, "kvpack_disk_bytes") > 0 and
          stat.disk_live_bytes == m(m3, "kvpack_disk_live_bytes") > 0,
          f"STAT disk bytes {stat.disk_bytes}/{stat.disk_live_bytes} vs /metrics")
    check(m(m3, "kvpack_requests_total", op="get_session", result="err_not_found") == 1,
          "NOT_FOUND not counted by result")
    check(m(m3, "kvpack_interval_syncs_total") == 0, "interval syncs on a --durability spill node")
    check(m(m3, "kvpack_requests_total", op="get_session", result="ok") >= 1, "GET_SESSION ok")
    check(m(m3, "kvpack_uptime_seconds") >= m(m0, "kvpack_uptime_seconds"), "uptime went back")
    check(m(m3, "kvpack_requests_total", op="get_session", result="ok") == GETS + 1,
          "GET_SESSION ok count")
    check_histograms(hp, ("put_pages", "put_session", "get_session", "spill", "stat"))
    check_store_histograms(m0, m1, m2, m3)

    # rm of a session the node never held leaves a tombstone; its gauge counts its DRAM (one
    # small allocation and the table's first 64 buckets), 0 while there is none
    with kvpack.Client(addr, timeout_ms=10000) as c:
        try:
            c.delete_session(ns, "never-held")
        except kvpack.KvpError as e:
            check(e.name == "ERR_NOT_FOUND", f"rm of an unknown session: {e.name}")
    m4 = scrape(hp)
    print(f"rm: tombstones {m(m3, 'kvpack_tombstones'):.0f} -> {m(m4, 'kvpack_tombstones'):.0f}, "
          f"bytes {m(m3, 'kvpack_tombstone_bytes'):.0f} -> {m(m4, 'kvpack_tombstone_bytes'):.0f}")
    check(m(m3, "kvpack_tombstones") == 0 and m(m3, "kvpack_tombstone_bytes") == 0 and
          m(m4, "kvpack_tombstones") == 1 and 64 < m(m4, "kvpack_tombstone_bytes") <= 1024,
          "kvpack_tombstone_bytes does not count the tombstone")

    # HTTP edge cases; the node keeps serving after each
    code, hdrs, body = get(hp, "/metrics", "HEAD")
    check(code == 200 and body == b"" and int(hdrs["Content-Length"]) > 1000, "HEAD /metrics")
    check(get(hp, "/nope")[0] == 404, "/nope is not 404")
    check(get(hp, "/health", "POST")[0] == 405, "POST is not 405")
    check(get(hp, "/health?verbose=1")[0] == 200, "query string not ignored")
    check(http(hp, b"garbage\r\n\r\n")[0] == 400, "garbage request line is not 400")
    check(http(hp, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n")[0] == 400, "over-long line")
    check(http(hp, b"GET /health HTTP/9.9\r\n\r\n")[0] == 400, "bad version is not 400")
    check(get(hp, "/health")[0] == 200, "/health after bad requests")

    # silent clients: /health and UCX requests are answered while they still hold connections
    quiet = [socket.create_connection(("127.0.0.1", hp)) for _ in range(3)]
    quiet[2].sendall(b"GET /hea")
    check(get(hp, "/health")[0] == 200, "/health with silent clients connected")
    cli("stat", "--node", addr, "--json")
    for q in quiet:
        q.setblocking(False)
        try:
            got = q.recv(1)
            check(False, f"a silent client was answered or closed before /health: {got!r}")
        except BlockingIOError:
            pass  # still open and unanswered: /health did not wait for it
        q.settimeout(30)
    reply = quiet[0].recv(100)  # the idle deadline (5 s) frees the slot with a 408
    check(reply.startswith(b"HTTP/1.1 408"), f"silent client got {reply!r}")
    for q in quiet:
        q.close()

    # option errors: usage (2) or a clear failure (1), nothing served
    rc, err = node_error("--http", "nonsense")
    check(rc == 2 and "--http wants HOST:PORT" in err, f"--http nonsense: {rc} {err}")
    rc, err = node_error("--http-ready-file", os.path.join(tmp, "x"))
    check(rc == 2 and "needs --http" in err, f"--http-ready-file alone: {rc} {err}")
    rc, err = node_error("--http", f"127.0.0.1:{hp}")
    check(rc == 1 and f"127.0.0.1:{hp}" in err, f"--http on a taken port: {rc} {err}")
    check(get(hp, "/health")[0] == 200, "the first node stopped serving")
    p = subprocess.run([kvpackd, "--listen", addr], capture_output=True, text=True, timeout=60,
                       env=env)  # the running node's own UCX port
    err = p.stderr.strip()
    check(p.returncode == 1 and "address already in use" in err and addr in err and
          p.stdout == "", f"--listen on a taken port: {p.returncode} {err!r} stdout {p.stdout!r}")
    cli("stat", "--node", addr, "--json")  # the first node still serves
    for bad in ("0", "60001", "2x"):
        rc, err = node_error("--durability", "interval", "--sync-ms", bad)
        check(rc == 2 and "--sync-ms wants 1..60000" in err, f"--sync-ms {bad}: {rc} {err}")
    for bad in ("4611686018427387904", "17G", "0"):  # 2^62 wrapped the 4x receive budget to 0
        rc, err = node_error("--max-msg", bad)
        check(rc == 2 and "--max-msg wants 1 byte to 16G" in err, f"--max-msg {bad}: {rc} {err}")
    rc, err = node_error("--sync-ms", "50")
    check(rc == 2 and "needs --durability interval" in err, f"--sync-ms alone: {rc} {err}")
    rc, err = node_error("--dram-budget", "lots")  # what is expected, and what it got
    check(rc == 2 and "--dram-budget wants bytes" in err and "'lots'" in err,
          f"--dram-budget lots: {rc} {err}")
    rc, err = node_error("--log-level", "loud")
    check(rc == 2 and "--log-level wants error|warn" in err and "'loud'" in err,
          f"--log-level loud: {rc} {err}")
    # a start that fails after the HTTP port is up leaves no ready file naming it (it used to;
    # and one a killed run left is removed at start, not read as this run's port)
    open(os.path.join(tmp, "plainfile"), "w").close()
    with open(os.path.join(tmp, "stale"), "w") as f:
        f.write("1\n")
    rc, err = node_error("--data-dir", os.path.join(tmp, "plainfile", "x"), "--http",
                         "127.0.0.1:0", "--http-ready-file", os.path.join(tmp, "stale"))
    check(rc == 1 and not os.path.exists(os.path.join(tmp, "stale")),
          f"failed start: rc {rc}, ready file left: {os.path.exists(os.path.join(tmp, 'stale'))}")

    node.send_signal(signal.SIGTERM)
    check(node.wait(timeout=60) == 0, "kvpackd did not exit 0 on SIGTERM")
    for f in ("ready", "http"):  # a ready file names a port only while the node listens
        check(not os.path.exists(os.path.join(tmp, f)), f"ready file {f} left after exit")
    try:
        socket.create_connection(("127.0.0.1", hp), timeout=5).close()
        check(False, "HTTP port still open after shutdown")
    except ConnectionRefusedError:
        pass

    # SIGTERM while the store opens (held in its open by gate_preload.so): the node closes the
    # store and exits 0 without ever listening or writing its ready file
    gate = os.path.join(tmp, "opengate")
    gnode = subprocess.Popen(
        [kvpackd, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "gdata"),
         "--ready-file", os.path.join(tmp, "gready"), "--log-level", "info"],
        env=dict(env, LD_PRELOAD=gate_preload, KVP_TEST_OPEN_GATE=gate), stderr=subprocess.PIPE,
        text=True)
    for _ in range(3000):
        if any(f.startswith("opengate.waiting.") for f in os.listdir(tmp)) or gnode.poll() is not None:
            break
        time.sleep(0.01)
    check(gnode.poll() is None, "the gated node did not reach its store open")
    gnode.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    open(gate, "w").close()
    gerr = gnode.communicate(timeout=60)[1]
    check(gnode.returncode == 0 and "stop asked while the store opened" in gerr and
          not os.path.exists(os.path.join(tmp, "gready")),
          f"SIGTERM during the open: rc {gnode.returncode}, ready file "
          f"{os.path.exists(os.path.join(tmp, 'gready'))}, stderr {gerr.strip()[-300:]}")

    # --durability interval: the put is synced by the node's syncer (within 10 s at 20 ms)
    inode, iaddr = kvptest.start_kvpackd(
        kvpackd, os.path.join(tmp, "iready"),
        ["--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "idata"), "--durability",
         "interval", "--sync-ms", "20", "--http", "127.0.0.1:0", "--http-ready-file",
         os.path.join(tmp, "ihttp")], env=env)
    ihp = wait_file(os.path.join(tmp, "ihttp"), inode)
    check(m(scrape(ihp), "kvpack_interval_syncs_total") == 0, "interval syncs before any put")
    cli("put", "--node", iaddr, "--session", "s1", "--kvd", os.path.join(tmp, "a.kvd"),
        "--codec", "fp16", "--json")
    for _ in range(500):
        if m(scrape(ihp), "kvpack_interval_syncs_total") >= 1:
            break
        time.sleep(0.02)
    check(m(scrape(ihp), "kvpack_interval_syncs_total") >= 1, "no interval sync after a put")
    cli("get", "--node", iaddr, "--session", "s1", "--out", os.path.join(tmp, "before.kvd"))
    inode.send_signal(signal.SIGTERM)
    check(inode.wait(timeout=60) == 0, "the interval node did not exit 0 on SIGTERM")

    # a byte gone bad in RocksDB's MANIFEST: the node repairs its db at start, says so in STAT,
    # /metrics and `kvpack stat`, and serves the session byte-identical
    idata = os.path.join(tmp, "idata")
    man = [f for f in os.listdir(idata) if f.startswith("MANIFEST-")]
    check(len(man) == 1, f"manifests in the data dir: {man}")
    with open(os.path.join(idata, man[0]), "r+b") as f:
        raw = bytearray(f.read())
        raw[len(raw) // 2] ^= 0x40
        f.seek(0)
        f.write(raw)
    inode, iaddr = kvptest.start_kvpackd(
        kvpackd, os.path.join(tmp, "iready"),
        ["--listen", "127.0.0.1:0", "--data-dir", idata, "--http", "127.0.0.1:0",
         "--http-ready-file", os.path.join(tmp, "ihttp")], env=env, stderr=subprocess.DEVNULL)
    ihp = wait_file(os.path.join(tmp, "ihttp"), inode)
    rstat = cli("stat", "--node", iaddr, "--json")
    check(rstat.get("index_rebuilds") == 1 == m(scrape(ihp), "kvpack_index_rebuilds_total") and
          rstat.get("wal_dropped_bytes") == 0, f"after a damaged manifest: STAT {rstat}")
    human = subprocess.run([kvpack_exe, "stat", "--node", iaddr], capture_output=True, text=True,
                           timeout=60, env=env).stdout
    check(re.search(r"^index rebuilds +1 ", human, re.M) is not None, f"kvpack stat: {human}")
    cli("get", "--node", iaddr, "--session", "s1", "--out", os.path.join(tmp, "after.kvd"))
    check(open(os.path.join(tmp, "before.kvd"), "rb").read() ==
          open(os.path.join(tmp, "after.kvd"), "rb").read(), "the session changed in the repair")
    inode.send_signal(signal.SIGTERM)
    check(inode.wait(timeout=60) == 0, "the repaired node did not exit 0 on SIGTERM")
finally:
    for p in (node, locals().get("inode")):
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)

if fails:
    sys.exit(f"{len(fails)} check(s) failed")
print("metrics: all checks passed")
