#!/usr/bin/env python3
"""check_etcd.py - etcd membership end to end: a real etcd on free loopback ports, 3 kvpackd
--etcd with a 2 s lease. `kvpack nodes` lists all 3 (up); put --etcd --replicas 2 ranks and places
every session as the same put with the static --node list does, and get --etcd is bit-exact;
SIGTERM a node: gone from `kvpack nodes` at once (lease revoked), restarted: back; SIGKILL another:
still listed (down) until its TTL runs out, then gone, and get --etcd serves every session from a
surviving replica; restarted: listed again. etcd killed while serving: the nodes keep serving,
/metrics says kvpack_etcd_registered 0, and 1 again (listed) once etcd is back. A garbage entry under the prefix is skipped with a
warning; a lease revoked behind a node's back is granted again and the key put again; a second
kvpackd advertising a live node's address exits 1 naming it and the holder's pid, the key
untouched; another value put under a node's key is left alone (an error logged, /metrics
unregistered) and the node's own put back once that key is deleted;
kvpackd with an unreachable --etcd exits 1 with a clear message; put --etcd with
etcd down exits 1; --node with --etcd is refused (2). Endpoint lists: "127.0.0.1:1, URL" (a
space after the comma) and "503-server,URL" (a proxy in front of a dead member) fail over to URL.
64 more members (nobody listening): `kvpack nodes` lists all 67, get --etcd takes the first 64
with a warning and serves. The wall clock stepped back an hour under a node (CLOCK_PRELOAD):
its keepalive goes on, it stays listed. A hung etcd: kvpackd --etcd-ttl 60 exits 1 at start
within 10 s (each request is capped at 3 s); with it listed 8 times, SIGTERM while a keepalive
waits on it exits 0 within 10 s (the keepalive is cut short, the revoke capped at 2 s).
Exit 77 when the etcd binary is absent.
usage: check_etcd.py KVPACK KVPACKD CLOCK_PRELOAD"""
import array
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack, kvpackd, clock_preload = sys.argv[1:4]
ETCD = kvptest.etcd_or_skip()

tmp = tempfile.mkdtemp(prefix="kvp_etcd_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
nodes = {}  # k -> (Popen, addr)
starts = []  # k of every kvpackd started
http = {}  # k -> its --http-ready-file
TTL = 2


def gateway(path, body):
    """POST a JSON body to etcd's v3 gateway; returns the decoded reply."""
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def key_lease(key):
    """The lease key (base64) is under once it is there again, waiting up to TTL + 8 s; None."""
    for _ in range(int((TTL + 8) / 0.25)):
        kvs = gateway("/v3/kv/range", {"key": key}).get("kvs", [])
        if kvs:
            return kvs[0]["lease"]
        time.sleep(0.25)
    return None


def start_etcd(cport, pport):
    return kvptest.start_etcd(ETCD, os.path.join(tmp, "etcd"), cport, pport)


def start_node(k, port=0, ttl=TTL, node_env=None, etcd_list=None):
    """kvpackd k registered in etcd (TTL 2 s; --etcd URL or etcd_list), data in tmp/nK; returns
    its address."""
    starts.append(k)
    ready = os.path.join(tmp, f"ready{len(starts)}")  # a new file per start: never a stale one
    http[k] = os.path.join(tmp, f"http{len(starts)}")
    nodes[k] = kvptest.start_kvpackd(  # the ready file: once the node listens and is registered
        kvpackd, ready,
        ["--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(tmp, f"n{k}"),
         "--durability", "write-through", "--dram-budget", "32M", "--etcd", etcd_list or URL,
         "--etcd-ttl", str(ttl), "--http", "127.0.0.1:0", "--http-ready-file", http[k]],
        env=node_env or env, what=f"kvpackd {k}")
    return nodes[k][1]


def registered(k):
    """kvpack_etcd_registered from node k's /metrics."""
    url = f"http://127.0.0.1:{open(http[k]).read().strip()}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("kvpack_etcd_registered "):
                return int(line.split()[1])
    return None


def stop_node(k, sig):
    proc, _ = nodes.pop(k)
    proc.send_signal(sig)
    return proc.wait(timeout=30)


def run(*args):
    p = subprocess.run([kvpack, *args], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def members():
    """{addr: entry} from `kvpack nodes --json`."""
    rc, out, err = run("nodes", "--etcd", URL, "--json", "--timeout-ms", "2000")
    check(rc == 0, f"kvpack nodes exited {rc}: {err!r}")
    return {n["addr"]: n for n in json.loads(out)["nodes"]} if rc == 0 else {}


def kvd(path, L, T, H, D):
    """.kvd v1: magic, version, L, T, H, D, then K and V as fp32 (values exact in fp16)."""
    vals = array.array("f", (float((i * 37) % 129 - 64) / 32.0 for i in range(2 * L * T * H * D)))
    return kvptest.write_kvd(path, L, T, H, D, vals)


def gateway_b64(text):
    return base64.b64encode(text.encode()).decode()


class Answer503(BaseHTTPRequestHandler):
    """A proxy in front of a dead etcd member: every POST gets 503 and a page that is not JSON."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"no healthy upstream"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def endpoint_lists(addrs):
    """Failover past a first endpoint written with a space, and past one that answers 503."""
    rc, out, err = run("nodes", "--etcd", f"127.0.0.1:1, {URL}", "--json")
    check(rc == 0 and sorted(n["addr"] for n in json.loads(out)["nodes"]) == sorted(addrs),
          f"--etcd '127.0.0.1:1, URL' (a space after the comma): {rc} {err!r}")
    rc, _, err = run("nodes", "--etcd", f"{URL}, ,{URL}")
    check(rc == 1 and "bad etcd endpoint list" in err, f"an empty endpoint: {rc} {err!r}")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Answer503)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    bad = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        rc, out, err = run("nodes", "--etcd", f"{bad},{URL}", "--json")
        check(rc == 0 and sorted(n["addr"] for n in json.loads(out)["nodes"]) == sorted(addrs) and
              "HTTP 503" in err, f"--etcd 503-first,live: {rc} {err!r}")
        rc, _, err = run("nodes", "--etcd", bad)
        check(rc == 1 and "HTTP 503" in err and "unreachable" in err, f"--etcd 503 only: {rc} {err!r}")
    finally:
        srv.shutdown()
        srv.server_close()


def many_members(addrs, sid, original):
    """64 more members under the prefix (127.0.0.9: sorts after the live nodes; nobody listens):
    `kvpack nodes` lists all 67, get --etcd takes the first 64 with the handle's warning."""
    fake = [f"127.0.0.9:{2000 + i}" for i in range(64)]
    for a in fake:
        gateway("/v3/kv/put", {"key": gateway_b64("/kvpack/nodes/" + a), "value": gateway_b64(
            json.dumps({"addr": a, "pid": 1, "since": 1, "data_dir": ""}))})
    try:
        rc, out, err = run("nodes", "--etcd", URL, "--json", "--timeout-ms", "1000")
        got = json.loads(out) if rc == 0 else {}
        check(rc == 0 and got["registered"] == 67 and got["up"] == 3 and
              sorted(n["addr"] for n in got["nodes"]) == sorted(addrs + fake),
              f"kvpack nodes with 67 registered: {rc} {err[-300:]!r}")
        rc, _, err = run("get", "--etcd", URL, "--session", sid, "--out",
                         os.path.join(tmp, "m.kvd"))
        check(rc == 0 and open(os.path.join(tmp, "m.kvd"), "rb").read() == original and
              f"67 nodes registered under /kvpack/nodes/ at etcd {URL}: using the first 64" in err,
              f"get --etcd with 67 registered: {rc} {err[-300:]!r}")
    finally:
        gateway("/v3/kv/deleterange", {"key": gateway_b64("/kvpack/nodes/127.0.0.9:"),
                                       "range_end": gateway_b64("/kvpack/nodes/127.0.0.9;")})


def clock_step():
    """A node whose wall clock steps back an hour (it reads CLOCK_REALTIME 3600 s ahead of the
    kernel from then on): its keepalive, every TTL/3 on the monotonic clock, goes on."""
    jump = os.path.join(tmp, "clock_jump")
    addr = start_node(7, node_env=dict(env, LD_PRELOAD=clock_preload, KVP_TEST_CLOCK_JUMP=jump,
                                       KVP_TEST_CLOCK_JUMP_S="3600"))
    open(jump, "w").close()
    listed = []
    for _ in range(12):  # 3 TTLs: the lease would have run out twice
        listed.append(addr in members())
        time.sleep(0.5)
    check(all(listed) and registered(7) == 1,
          f"a node whose clock stepped back: listed {listed}, registered {registered(7)}")
    check(stop_node(7, signal.SIGTERM) == 0, "SIGTERM of the clock-stepped node")


def key_value(key):
    """The member value (decoded JSON) under key (base64), or None."""
    kvs = gateway("/v3/kv/range", {"key": key}).get("kvs", [])
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def advertising(addr, wrap=()):
    """(exit status, stdout, stderr) of a kvpackd advertising addr (run under wrap, e.g. unshare),
    stopped after 30 s if it took the key and serves."""
    p = subprocess.Popen([*wrap, kvpackd, "--listen", "127.0.0.1:0", "--etcd", URL, "--etcd-ttl",
                          str(TTL), "--advertise", addr], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.terminate()
        out, err = p.communicate()
    return p.returncode, out, err


def advertise_taken(k):
    """A second kvpackd with node k's address as --advertise refuses to start (exit 1, naming the
    address and k's pid) and leaves k's key alone: it used to put its own value over it, and its
    SIGTERM then deleted the key of the live node k. Then a node whose key another value takes
    over behind its back (pid 1, no lease): it logs an error and leaves the key alone (it used to
    check only that the key was there), /metrics says unregistered; once that key is deleted, the
    node puts its own value back and is registered again."""
    addr, pid = nodes[k][1], nodes[k][0].pid
    key = gateway_b64(f"/kvpack/nodes/{addr}")
    rc, out, err = advertising(addr)
    check(rc == 1 and addr in err and f"pid {pid} on host" in err and "listening" not in out,
          f"second kvpackd advertising {addr}: exit {rc} {err!r}")
    check((key_value(key) or {}).get("pid") == pid, f"{addr}'s key now {key_value(key)}")
    check(members().get(addr, {}).get("up"), f"{addr} not listed up after the second kvpackd")
    # the same from another PID namespace of this host (a container on the host network): there
    # the live node's pid does not exist (kill: ESRCH), and it used to be taken for a crashed one's
    if subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"],
                      capture_output=True).returncode == 0:
        rc, out, err = advertising(addr, ["unshare", "-p", "-f", "--mount-proc"])
        check(rc == 1 and f"pid {pid} on host" in err,
              f"kvpackd in another PID namespace advertising {addr}: exit {rc} {err!r}")
        check((key_value(key) or {}).get("pid") == pid, f"{addr}'s key now {key_value(key)}")
    else:
        print("note: unshare -p is not permitted here; the other-PID-namespace case is skipped")

    log_path, port_path = os.path.join(tmp, "held.log"), os.path.join(tmp, "held.http")
    with open(log_path, "w") as log:
        proc, addr = kvptest.start_kvpackd(
            kvpackd, os.path.join(tmp, "held.ready"),
            ["--listen", "127.0.0.1:0", "--etcd", URL, "--etcd-ttl", str(TTL), "--http",
             "127.0.0.1:0", "--http-ready-file", port_path], env=env, stderr=log,
            what="kvpackd (key taken over)")
    hport = open(port_path).read().strip()
    key = gateway_b64(f"/kvpack/nodes/{addr}")
    other = {"addr": addr, "pid": 1, "since": int(time.time())}
    gateway("/v3/kv/put", {"key": key, "value": gateway_b64(json.dumps(other))})
    said = False
    for _ in range(int((TTL + 8) / 0.25)):  # a keepalive round (every TTL/3) sees it
        said = "held by another process (pid 1 on host" in open(log_path).read()
        if said and kvptest.metric(hport, "kvpack_etcd_registered") == 0:
            break
        time.sleep(0.25)
    check(said and kvptest.metric(hport, "kvpack_etcd_registered") == 0,
          f"key taken over: no error, or still registered: {open(log_path).read()!r}")
    check(key_value(key) == other, f"the node overwrote another process's key: {key_value(key)}")
    gateway("/v3/kv/deleterange", {"key": key})
    back = None
    for _ in range(int((TTL + 8) / 0.25)):
        back = key_value(key)
        if back and back.get("pid") == proc.pid and \
                kvptest.metric(hport, "kvpack_etcd_registered") == 1:
            break
        time.sleep(0.25)
    check(back and back.get("pid") == proc.pid and
          kvptest.metric(hport, "kvpack_etcd_registered") == 1,
          f"the node's own key not back after the other was deleted: {back}")
    proc.send_signal(signal.SIGTERM)
    check(proc.wait(timeout=30) == 0 and key_value(key) is None, "stop after a taken-over key")


def hung_etcd():
    """etcd hung (it accepts TCP, answers nothing). --etcd-ttl 60: a start exits 1 well within
    10 s (each request ends within 3 s; it used to be TTL/3 = 20 s). --etcd-ttl 9 (a keepalive
    every 3 s) with the etcd listed 8 times (the most): SIGTERM while a keepalive waits on it exits
    0 well within 10 s (the stop cuts the keepalive short, the revoke ends within 2 s; it used to
    wait for the keepalive to try every endpoint, 3 s each: 25 s)."""
    with socket.create_server(("127.0.0.1", 0)) as hole:  # listens, never accepts
        t0 = time.monotonic()
        p = subprocess.run([kvpackd, "--listen", "127.0.0.1:0", "--etcd-ttl", "60", "--etcd",
                            f"http://127.0.0.1:{hole.getsockname()[1]}"], timeout=60,
                           capture_output=True, text=True, env=env)
        took = time.monotonic() - t0
    check(p.returncode == 1 and "cannot register" in p.stderr and took < 10,
          f"start with etcd hung, --etcd-ttl 60: exit {p.returncode} after {took:.1f} s")
    port = URL.rsplit(":", 1)[1]
    spell = [f"{h}:{port}{s}" for h in ("http://127.0.0.1", "127.0.0.1", "http://localhost",
                                         "localhost") for s in ("", "/")]
    start_node(8, ttl=9, etcd_list=",".join(spell))
    etcd.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3.5)  # a keepalive (every 3 s) is now waiting on the hung etcd
        t0 = time.monotonic()
        rc = stop_node(8, signal.SIGTERM)
        took = time.monotonic() - t0
    finally:
        etcd.send_signal(signal.SIGCONT)
    check(rc == 0 and took < 10, f"SIGTERM with etcd hung and a keepalive in flight, 8 "
          f"endpoints: exit {rc} after {took:.1f} s")


etcd = None
try:
    ports = tuple(kvptest.free_ports(2))
    etcd, URL = start_etcd(*ports)
    addrs = [start_node(k) for k in range(3)]
    listed = members()
    check(sorted(listed) == sorted(addrs) and all(m["up"] for m in listed.values()),
          f"kvpack nodes lists {listed}, want {addrs} all up")
    check(all(listed[a]["data_dir"].endswith(f"n{k}") and listed[a]["pid"] == nodes[k][0].pid
              for k, a in enumerate(addrs) if a in listed), f"member values: {listed}")

    endpoint_lists(addrs)

    rc, out, _ = run("nodes", "--etcd", URL)
    check(rc == 0 and "3 nodes registered" in out and all(a in out for a in addrs) and
          out.count(" ok ") == 3, f"kvpack nodes text: {rc} {out!r}")
    check(run("nodes", "--help")[0] == 0 and run("nodes", "--etcd", URL, "--bogus")[0] == 2,
          "kvpack nodes --help / unknown option")

    original = kvd(os.path.join(tmp, "a.kvd"), 2, 200, 2, 64)
    static = ",".join(reversed(addrs))
    sids = [f"e{i}" for i in range(8)]
    where = {}
    for sid in sids:
        common = ["--replicas", "2", "--session", sid, "--kvd", os.path.join(tmp, "a.kvd"),
                  "--codec", "fp16", "--json"]
        rc, out, err = run("put", "--etcd", URL, *common)
        rc2, out2, err2 = run("put", "--node", static, *common)
        check(rc == 0 and rc2 == 0, f"put {sid}: --etcd {rc} {err!r}, --node {rc2} {err2!r}")
        if rc == 0 and rc2 == 0:
            e, s = json.loads(out), json.loads(out2)
            check(e["rank"] == s["rank"] and e["nodes"] == s["nodes"] == e["rank"][:2],
                  f"{sid}: --etcd placed {e['nodes']} rank {e['rank']}, --node {s['nodes']} "
                  f"rank {s['rank']}")
            check(e.get("etcd") == URL, f"put --json does not name the etcd: {e}")
            where[sid] = e["rank"]
    for a in addrs:  # each session is on exactly its rank's first two nodes
        rc, out, _ = run("ls", "--node", a, "--json")
        held = {x["session"] for x in json.loads(out)["sessions"]} if rc == 0 else set()
        check(held == {sid for sid in where if a in where[sid][:2]}, f"{a} holds {held}")
    for sid in where:
        rc, _, err = run("get", "--etcd", URL, "--session", sid, "--out", os.path.join(tmp, "o.kvd"))
        check(rc == 0 and open(os.path.join(tmp, "o.kvd"), "rb").read() == original,
              f"get --etcd {sid}: {rc} {err!r}")
    many_members(addrs, sids[0], original)
    clock_step()

    # SIGTERM: the lease is revoked on the way out, the node is gone at once
    term_port = addrs[0].split(":")[1]
    check(stop_node(0, signal.SIGTERM) == 0, "kvpackd did not exit 0 on SIGTERM")
    check(sorted(members()) == sorted(addrs[1:]), "SIGTERMed node still listed")
    check(start_node(0, int(term_port)) == addrs[0], "restart on the same port")
    check(sorted(members()) == sorted(addrs), "restarted node not listed again")

    # SIGKILL the primary of the most sessions: listed (down) until the lease expires
    dead = max(range(3), key=lambda k: sum(where[s][0] == addrs[k] for s in where))
    dead_port = addrs[dead].split(":")[1]
    stop_node(dead, signal.SIGKILL)
    now = members()
    check(addrs[dead] in now and not now[addrs[dead]]["up"],
          f"SIGKILLed node not listed as down before its TTL: {now.get(addrs[dead])}")
    gone = False
    for _ in range(int((TTL + 8) / 0.25)):  # etcd expires leases on its own clock
        if addrs[dead] not in members():
            gone = True
            break
        time.sleep(0.25)
    check(gone, f"SIGKILLed node still listed {TTL + 8} s after the kill")
    for sid in where:
        rc, out, err = run("get", "--etcd", URL, "--session", sid, "--out",
                           os.path.join(tmp, "d.kvd"), "--json")
        check(rc == 0 and open(os.path.join(tmp, "d.kvd"), "rb").read() == original and
              json.loads(out)["from"] != addrs[dead], f"get {sid} with a node dead: {rc} {err!r}")
    check(start_node(dead, int(dead_port)) == addrs[dead], "restart the killed node")
    check(sorted(members()) == sorted(addrs), "killed node not listed after its restart")

    # killed and restarted at once on its address, as a supervisor does, its old lease (60 s)
    # still running: the key names a pid of this host that no longer runs, so the new process
    # takes it over (it used to exit 1 until the lease ran out, past the harness's 10 s of retries)
    crash_port = kvptest.free_port()
    crash_addr = start_node(8, crash_port, ttl=60)
    stop_node(8, signal.SIGKILL)
    check(start_node(8, crash_port, ttl=60) == crash_addr, "restart at once after a SIGKILL")
    val = key_value(gateway_b64(f"/kvpack/nodes/{crash_addr}")) or {}
    check(val.get("pid") == nodes[8][0].pid and val.get("host") == socket.gethostname() and
          val.get("pid_ns", "").endswith(os.readlink("/proc/self/ns/pid")),
          f"the restarted node's key: {val}, its pid {nodes[8][0].pid}")
    check(stop_node(8, signal.SIGTERM) == 0 and crash_addr not in members(),
          "SIGTERM of the node restarted after a crash")

    # a lost lease (revoked behind the node's back): the keepalive sees it, grants a new one and
    # puts the key again, while the node keeps serving
    key = base64.b64encode(f"/kvpack/nodes/{addrs[1]}".encode()).decode()
    lease = gateway("/v3/kv/range", {"key": key})["kvs"][0]["lease"]
    gateway("/v3/lease/revoke", {"ID": lease})
    back = key_lease(key)
    check(back is not None and back != lease, f"node did not register again (lease {back})")
    check(sorted(members()) == sorted(addrs), "re-registered node not listed")

    # its key deleted behind its back, the lease alive (`etcdctl del`): put back under that lease
    gateway("/v3/kv/deleterange", {"key": key})
    again = key_lease(key)
    check(again == back, f"deleted key not put back under its lease ({again} vs {back})")
    check(sorted(members()) == sorted(addrs), "node whose key was deleted not listed")

    # garbage under the prefix: skipped with one warning each (no error line), not a crash; a
    # host with a comma would split the member list
    for key, val in (("/kvpack/nodes/garbage", "not json"),
                     ("/kvpack/nodes/127.0.0.1:1", '{"addr":"10.9.9.9:1"}'),
                     ("/kvpack/nodes/x,y:7070", '{"addr":"x,y:7070"}')):
        gateway("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                               "value": base64.b64encode(val.encode()).decode()})
    rc, out, err = run("nodes", "--etcd", URL, "--json")
    check(rc == 0 and sorted(n["addr"] for n in json.loads(out)["nodes"]) == sorted(addrs) and
          err.count("skipping") == 3 and "error" not in err, f"garbage entries: {rc} {out!r} {err!r}")
    rc, out, err = run("ls", "--etcd", URL, "--json")
    check(rc == 0 and json.loads(out)["count"] == len(sids), f"ls --etcd with garbage: {rc} {err!r}")

    advertise_taken(2)

    # one node listed twice (restarted under another --advertise while its old key's lease runs
    # out): `kvpack nodes` shows both, up; the other --etcd commands use the later one, warned
    alias = "localhost:" + addrs[0].rsplit(":", 1)[1]
    akey = base64.b64encode(f"/kvpack/nodes/{alias}".encode()).decode()
    gateway("/v3/kv/put", {"key": akey, "value": base64.b64encode(json.dumps(
        {"addr": alias, "pid": 1, "since": int(time.time()) + 60}).encode()).decode()})
    rc, out, err = run("nodes", "--etcd", URL, "--json")
    listed = {n["addr"]: n["up"] for n in json.loads(out)["nodes"]} if rc == 0 else {}
    check(rc == 0 and sorted(listed) == sorted(addrs + [alias]) and all(listed.values()),
          f"nodes with one node listed twice: {rc} {out!r} {err!r}")
    rc, out, err = run("ls", "--etcd", URL, "--json")
    check(rc == 0 and json.loads(out)["count"] == len(sids) and "lists one node twice" in err and
          f"using {alias}" in err, f"ls --etcd with one node listed twice: {rc} {out!r} {err!r}")
    for sid in sids[:3]:
        rc, _, err = run("get", "--etcd", URL, "--session", sid, "--out",
                         os.path.join(tmp, "d.kvd"))
        check(rc == 0 and open(os.path.join(tmp, "d.kvd"), "rb").read() == original,
              f"get {sid} with one node listed twice: {rc} {err!r}")
    gateway("/v3/kv/deleterange", {"key": akey})

    # bad input: both sources, an unreachable etcd for the node and for the CLI
    rc, _, err = run("ls", "--etcd", URL, "--node", addrs[0])
    check(rc == 2 and "not both" in err, f"--node with --etcd: {rc} {err!r}")
    nowhere = f"http://127.0.0.1:{kvptest.free_port()}"
    p = subprocess.run([kvpackd, "--listen", "127.0.0.1:0", "--etcd", nowhere], timeout=60,
                       capture_output=True, text=True, env=env)
    check(p.returncode == 1 and "cannot register" in p.stderr and nowhere in p.stderr,
          f"kvpackd with etcd unreachable: {p.returncode} {p.stderr!r}")
    # a supervisor waiting for the "listening" line must not get it from a node that then exits
    check("listening" not in p.stdout, f"kvpackd said listening, then exited: {p.stdout!r}")
    rc, _, err = run("put", "--etcd", nowhere, "--session", "x", "--kvd",
                     os.path.join(tmp, "a.kvd"))
    check(rc == 1 and nowhere in err and "unreachable" in err, f"put, etcd down: {rc} {err!r}")
    rc, _, err = run("nodes", "--etcd", URL, "--etcd-prefix", "/nobody/")
    check(rc == 0, f"nodes under an empty prefix: {rc} {err!r}")
    rc, _, err = run("get", "--etcd", URL, "--etcd-prefix", "/nobody/", "--session", "e0",
                     "--out", os.path.join(tmp, "n.kvd"))
    check(rc == 1 and "no kvpack node registered" in err, f"get, empty prefix: {rc} {err!r}")

    # etcd lost while serving: every node keeps serving and says so in /metrics; etcd back on its
    # data dir: they are registered again
    check(all(registered(k) == 1 for k in nodes), "kvpack_etcd_registered is not 1")
    etcd.kill()
    etcd.wait()
    etcd = None
    time.sleep(TTL + 1)  # a keepalive or two fail meanwhile
    check(all(run("ls", "--node", nodes[k][1])[0] == 0 for k in nodes), "a node stopped serving")
    check(all(registered(k) == 0 for k in nodes), "kvpack_etcd_registered is not 0, etcd down")
    etcd, _ = start_etcd(*ports)
    for _ in range(int((TTL + 8) / 0.25)):
        if all(registered(k) == 1 for k in nodes):
            break
        time.sleep(0.25)
    check(all(registered(k) == 1 for k in nodes) and sorted(members()) == sorted(addrs),
          "nodes not registered again after etcd came back")
    hung_etcd()
finally:
    for proc, _ in nodes.values():
        proc.kill()
        proc.wait()
    if etcd is not None:
        etcd.kill()
        etcd.wait()
    shutil.rmtree(tmp, ignore_errors=True)

print(f"check_etcd: {len(fails)} failed")
sys.exit(1 if fails else 0)
