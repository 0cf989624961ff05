#!/usr/bin/env python3
"""check_etcd.py - etcd membership end to end: a real etcd on free loopback ports, 3 kvpackd
--etcd with a 2 s lease. `kvpack nodes` lists all 3 (up); put --etcd --replicas 2 ranks and places
every session as the same put with the static --node list does, and get --etcd is bit-exact;
SIGTERM a node: gone from `kvpack nodes` at once (lease revoked), restarted: back; SIGKILL another:
still listed (down) until its TTL runs out, then gone, and get --etcd serves every session from a
surviving replica; restarted: listed again. etcd killed while serving: the nodes keep serving,
/metrics says kvpack_etcd_registered 0, and 1 again (listed) once etcd is back. A garbage entry under the prefix is skipped with a
warning; a lease revoked behind a node's back is granted again and the key put again;
kvpackd with an unreachable --etcd exits 1 with a clear message; put --etcd with
etcd down exits 1; --node with --etcd is refused (2). Exit 77 when the etcd binary is absent.
usage: check_etcd.py KVPACK KVPACKD"""
import array
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack, kvpackd = sys.argv[1], sys.argv[2]
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


def start_etcd(cport, pport):
    return kvptest.start_etcd(ETCD, os.path.join(tmp, "etcd"), cport, pport)


def start_node(k, port=0):
    """kvpackd k registered in etcd (TTL 2 s), data in tmp/nK; returns its address."""
    starts.append(k)
    ready = os.path.join(tmp, f"ready{len(starts)}")  # a new file per start: never a stale one
    http[k] = os.path.join(tmp, f"http{len(starts)}")
    nodes[k] = kvptest.start_kvpackd(  # the ready file: once the node listens and is registered
        kvpackd, ready,
        ["--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(tmp, f"n{k}"),
         "--durability", "write-through", "--dram-budget", "32M", "--etcd", URL, "--etcd-ttl",
         str(TTL), "--http", "127.0.0.1:0", "--http-ready-file", http[k]], env=env,
        what=f"kvpackd {k}")
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


etcd = None
try:
    ports = (kvptest.free_port(), kvptest.free_port())
    etcd, URL = start_etcd(*ports)
    addrs = [start_node(k) for k in range(3)]
    listed = members()
    check(sorted(listed) == sorted(addrs) and all(m["up"] for m in listed.values()),
          f"kvpack nodes lists {listed}, want {addrs} all up")
    check(all(listed[a]["data_dir"].endswith(f"n{k}") and listed[a]["pid"] == nodes[k][0].pid
              for k, a in enumerate(addrs) if a in listed), f"member values: {listed}")

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

    # a lost lease (revoked behind the node's back): the keepalive sees it, grants a new one and
    # puts the key again, while the node keeps serving
    key = base64.b64encode(f"/kvpack/nodes/{addrs[1]}".encode()).decode()
    lease = gateway("/v3/kv/range", {"key": key})["kvs"][0]["lease"]
    gateway("/v3/lease/revoke", {"ID": lease})
    back = None
    for _ in range(int((TTL + 8) / 0.25)):
        kvs = gateway("/v3/kv/range", {"key": key}).get("kvs", [])
        if kvs:
            back = kvs[0]["lease"]
            break
        time.sleep(0.25)
    check(back is not None and back != lease, f"node did not register again (lease {back})")
    check(sorted(members()) == sorted(addrs), "re-registered node not listed")

    # garbage under the prefix: skipped with a warning, not a crash
    for key, val in (("/kvpack/nodes/garbage", "not json"),
                     ("/kvpack/nodes/127.0.0.1:1", '{"addr":"10.9.9.9:1"}')):
        gateway("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                               "value": base64.b64encode(val.encode()).decode()})
    rc, out, err = run("nodes", "--etcd", URL, "--json")
    check(rc == 0 and sorted(n["addr"] for n in json.loads(out)["nodes"]) == sorted(addrs) and
          err.count("skipping") == 2, f"garbage entries: {rc} {out!r} {err!r}")
    rc, out, err = run("ls", "--etcd", URL, "--json")
    check(rc == 0 and json.loads(out)["count"] == len(sids), f"ls --etcd with garbage: {rc} {err!r}")

    # bad input: both sources, an unreachable etcd for the node and for the CLI
    rc, _, err = run("ls", "--etcd", URL, "--node", addrs[0])
    check(rc == 2 and "not both" in err, f"--node with --etcd: {rc} {err!r}")
    nowhere = f"http://127.0.0.1:{kvptest.free_port()}"
    p = subprocess.run([kvpackd, "--listen", "127.0.0.1:0", "--etcd", nowhere], timeout=60,
                       capture_output=True, text=True, env=env)
    check(p.returncode == 1 and "cannot register" in p.stderr and nowhere in p.stderr,
          f"kvpackd with etcd unreachable: {p.returncode} {p.stderr!r}")
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
