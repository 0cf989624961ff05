#!/usr/bin/env python3
"""check_etcd_watch.py - a long-lived cluster handle whose members follow etcd (kvp_cluster_params_t
.etcd, a watch on a background thread), through watch_driver on a real etcd and real kvpackd --etcd
(TTL 2 s), r = 2. Two nodes: sessions put on both. A third node starts: the handle sees 3 members
(polled with a deadline) and new puts rank as a static 3-node list does and land on its first 2.
SIGTERM a node: the handle drops it (lease revoked) and every session still comes back
byte-identical. SIGKILL etcd: the handle keeps its members (it says etcd is unreachable once) and
calls still work; etcd restarted on the same data dir: a node that joins afterwards is seen (the
watch resumed). `kvpack loadtest --etcd` paused mid-run while a node joins: it follows (JSON
membership_changes >= 1, the new node listed and holding sessions). A second handle whose first
endpoint hangs (a relay that stops passing bytes, as a SIGSTOPped member whose kernel still keeps
its TCP connections) sees a node that joins meanwhile: its silent stream ends after
KVP_ETCD_WATCH_IDLE_MS and the range is read from the next endpoint. 70 members under another
prefix: the first 64 by address, with a warning; a member put later that sorts first is taken
in, a garbage entry skipped; each garbage entry (one there at the start, one put later) is warned
about once, however many idle periods and reconnects follow. Every node leaves: a put fails
(ERR_PEER_UNREACHABLE, "no nodes registered") until one is back. etcd killed again: destroy
returns at once. Exit 77 when etcd is absent.
usage: check_etcd_watch.py WATCH_DRIVER KVPACKD LIBKVPACK KVPACK"""
import base64
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

driver_bin, kvpackd, lib, kvpack_exe = sys.argv[1:5]
ETCD = kvptest.etcd_or_skip()
kvpack = kvptest.load_kvpack(lib)

NS = 0x5151  # watch_driver's namespace
IDLE_S = 10  # KVP_ETCD_WATCH_IDLE_MS: a silent watch stream is ended after this
tmp = tempfile.mkdtemp(prefix="kvp_watch_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
nodes = {}  # k -> (Popen, addr)


def start_node(k, url=None):
    ready = os.path.join(tmp, f"ready{k}")
    nodes[k] = kvptest.start_kvpackd(
        kvpackd, ready, ["--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, f"n{k}"),
                         "--durability", "write-through", "--dram-budget", "32M", "--etcd",
                         url or URL, "--etcd-ttl", "2"], env=env, what=f"kvpackd {k}")
    return nodes[k][1]


class Driver:
    """watch_driver: one command line in, one reply line out (read with a deadline)."""

    def __init__(self, *prefix, url=None, name="driver", level="info"):
        self.log = open(os.path.join(tmp, f"{name}{len(prefix)}.log"), "w+")
        self.p = subprocess.Popen([driver_bin, url or URL, "2", *prefix], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.log, text=True,
                                  env=dict(env, KVP_LOG_LEVEL=level))
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self.reply(30)
        if first != "ready":
            sys.exit(f"watch_driver did not start: {first!r} {self.stderr()}")

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def reply(self, timeout_s=30):
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            line = None
        if line is None:
            sys.exit(f"watch_driver gave no reply (exit {self.p.poll()}): {self.stderr()}")
        return line

    def ask(self, cmd, timeout_s=30):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.reply(timeout_s)

    def members(self):
        gen, lst = self.ask("members").split(" ", 1)
        return int(gen), ([] if lst == "-" else lst.split(","))

    def stderr(self):
        self.log.flush()
        return open(self.log.name).read()


def wait_for(what, cond, deadline_s):
    """Poll cond() until it is true or deadline_s passes; a FAIL naming what when it never is."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    check(False, f"{what} within {deadline_s} s")
    return None


def static_rank(addrs, sid):
    with kvpack.Cluster(peers=sorted(addrs), replicas=2) as c:
        return c.rank(NS, sid)


def sessions_on(addrs):
    total = 0
    for a in addrs:
        with kvpack.Client(a, timeout_ms=5000) as c:
            total += c.stat().sessions
    return total


def etcd_kv(op, key):
    """deleterange or range of one key; the range's value (None when absent)."""
    b64 = base64.b64encode(key.encode()).decode()
    req = urllib.request.Request(f"{URL}/v3/kv/{op}", method="POST",
                                 data=json.dumps({"key": b64}).encode())
    kvs = json.loads(urllib.request.urlopen(req, timeout=5).read()).get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def loadtest_join():
    """kvpack loadtest --etcd, SIGSTOPped once it has put something, a node joins and another
    leaves the member list while it runs on (cut off from etcd: its etcd endpoint, a relay,
    hangs, and its key is deleted, as its lease would run out), SIGCONT: the run's handles
    follow, and the sessions the run put are deleted at its end from the node that left too
    (they used to stay there while the report said every session was deleted)."""
    leaver_k = next(iter(nodes))
    relay = Relay(cport)  # the leaver's way to etcd, to cut
    nodes[leaver_k][0].send_signal(signal.SIGTERM)
    nodes[leaver_k][0].wait(timeout=60)
    leaver = start_node(leaver_k, url=relay.url)
    live = [a for _, a in nodes.values()]
    before = sessions_on(live)
    leaver_key = "/kvpack/nodes/" + leaver
    leaver_before = sessions_on([leaver])
    lt = subprocess.Popen([kvpack_exe, "loadtest", "--etcd", URL, "--users", "60", "--rounds", "5",
                           "--turn-tokens", "256", "--json", "--timeout-ms", "5000", "--replicas",
                           "2"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    leaver_value = None
    try:
        wait_for("loadtest puts a session", lambda: lt.poll() is not None or
                 sessions_on(live) > before, 30)
        lt.send_signal(signal.SIGSTOP)
        joined = start_node(5)
        leaver_value = etcd_kv("range", leaver_key)
        relay.hang()  # else its keepalive would put the key back
        etcd_kv("deleterange", leaver_key)
        lt.send_signal(signal.SIGCONT)
        out, err = lt.communicate(timeout=120)
    finally:
        if lt.poll() is None:
            lt.kill()
            lt.wait()
    after = sessions_on([leaver])
    if leaver_value is not None:  # restarted: a member again, under a lease, for what follows
        nodes[leaver_k][0].send_signal(signal.SIGTERM)
        nodes[leaver_k][0].wait(timeout=60)
        start_node(leaver_k)
    check(lt.returncode == 0, f"loadtest --etcd exited {lt.returncode}: {err[-2000:]!r}")
    if lt.returncode != 0:
        return
    rep = json.loads(out)
    listed = {n["node"]: n for n in rep["nodes"]}
    check(rep["membership_changes"] >= 1, f"loadtest saw {rep['membership_changes']} changes")
    check(joined in listed and listed[joined]["sessions"] > 0,
          f"the joined node {joined} in the loadtest report: {listed.get(joined)}")
    check(sorted(listed) == sorted([a for a in live if a != leaver] + [joined]),
          f"loadtest nodes {sorted(listed)}: the members at its end")
    cl = rep["cleanup"]
    check(cl["departed_nodes"] == 1 and cl["departed_deleted"] > 0 and
          cl["departed_unreachable"] == 0, f"loadtest cleanup with a node that left: {cl}")
    check(after == leaver_before,
          f"the node that left holds {after} sessions, {leaver_before} before the run")
    print(f"loadtest --etcd: {rep['membership_changes']} membership change(s), the joined node "
          f"holds {listed[joined]['sessions']} sessions")


class Relay:
    """A TCP relay to etcd's client port on a free loopback port. hang(): it passes no more bytes
    either way and serves no new connection, while every connection stays open (the kernel still
    accepts new ones), as with a stopped etcd member."""

    def __init__(self, port):
        self.port, self.hung, self.held = port, threading.Event(), []
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.srv.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.srv.accept()
            if self.hung.is_set():
                self.held.append(c)  # open, never read: never answered
                continue
            up = socket.create_connection(("127.0.0.1", self.port))
            for a, b in ((c, up), (up, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                while self.hung.is_set():
                    time.sleep(0.05)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        dst.close()

    def hang(self):
        self.hung.set()


def hung_endpoint():
    """A handle on "relay,etcd" watches through the relay; the relay hangs, a node joins (through
    etcd itself): the handle sees it once its silent stream ends and the range is read again."""
    relay = Relay(cport)
    h = Driver(url=f"{relay.url},{URL}", name="hung")
    try:
        relay.hang()
        joined = start_node(6)
        wait_for("a handle whose etcd endpoint hangs sees a node that joined",
                 lambda: joined in h.members()[1], IDLE_S + 15)
        check(h.ask("quit").startswith("destroyed "), "quit with a hung endpoint")
    finally:
        if h.p.poll() is None:
            h.p.kill()
        h.p.wait()


def etcd_put(key, value):
    b64 = lambda x: base64.b64encode(x.encode()).decode()  # noqa: E731
    req = urllib.request.Request(URL + "/v3/kv/put", method="POST", data=json.dumps(
        {"key": b64(key), "value": b64(value)}).encode())
    urllib.request.urlopen(req, timeout=5).read()


def too_many():
    """70 members (nobody listens: only the list is looked at) under /kvpack/many/, and a garbage
    entry put before the handle starts; the handle (many) is left running for garbage_once()."""
    global many
    member = lambda a: json.dumps({"addr": a, "pid": 1, "since": 1, "data_dir": ""})  # noqa: E731
    addrs = [f"127.0.0.1:{1000 + i}" for i in range(70)]
    for a in addrs:
        etcd_put("/kvpack/many/" + a, member(a))
    etcd_put("/kvpack/many/garbage0", "not a member")
    many = m = Driver("/kvpack/many/", level="debug")  # debug: its idle periods are logged
    got = m.members()[1]
    check(got == sorted(addrs)[:64], f"70 registered: handle has {len(got)}, want first 64")
    check("70 nodes registered under /kvpack/many/" in m.stderr(), "no warning past 64")
    etcd_put("/kvpack/many/garbage", "not a member")
    etcd_put("/kvpack/many/127.0.0.0:1", member("127.0.0.0:1"))
    wait_for("a member put later that sorts first is taken in",
             lambda: m.members()[1] == sorted(addrs + ["127.0.0.0:1"])[:64], 5)
    check("skipping /kvpack/many/garbage:" in m.stderr(), "garbage entry not skipped")


def garbage_once():
    """The /kvpack/many/ handle of too_many(), quiet since (its stream ended and the range read
    again after each idle period, and once etcd restarted): each garbage entry, the one there at
    the start and the one put later, was warned about once."""
    wait_for("two idle periods of the /kvpack/many/ handle",
             lambda: many.stderr().count("reading the range again") >= 2, 2 * IDLE_S + 5)
    log = many.stderr()
    n0 = log.count("skipping /kvpack/many/garbage0:")
    n1 = log.count("skipping /kvpack/many/garbage:")
    check(n0 == 1 and n1 == 1, f"garbage entries warned about {n0} and {n1} times, want once each")
    check(many.ask("quit").startswith("destroyed "), "quit")


def get_all(d, sids, dead=()):
    for sid in sids:
        r = d.ask(f"get {sid}")
        check(r.startswith("ok ") and r[3:] not in dead, f"get {sid}: {r!r}")


etcd = d = many = None
try:
    cport, pport = kvptest.free_ports(2)
    etcd, URL = kvptest.start_etcd(ETCD, os.path.join(tmp, "etcd"), cport, pport)
    two = [start_node(0), start_node(1)]
    d = Driver()
    gen0, got = d.members()
    check(got == sorted(two) and gen0 == 1, f"first members {gen0} {got}, want 1 {sorted(two)}")
    old = [f"s{i}" for i in range(6)]
    for sid in old:
        r = d.ask(f"put {sid}")
        check(r.startswith("ok ") and sorted(r[3:].split(",")) == sorted(two), f"put {sid}: {r!r}")

    # a third node joins: seen within a few seconds, new puts rank over 3
    three = two + [start_node(2)]
    g = wait_for("the handle sees the third node", lambda: (lambda m: m[1] == sorted(three) and m)
                 (d.members()), 5)
    check(g and g[0] > gen0, f"generation after the join: {g}")
    check("joined" in d.stderr() and nodes[2][1] in d.stderr(), "no 'joined' line logged")
    new = [f"n{i}" for i in range(8)]
    for sid in new:
        want = static_rank(three, sid)
        r = d.ask(f"rank {sid}")
        check(r == "ok " + ",".join(want), f"rank {sid}: {r!r}, static 3-node list: {want}")
        r = d.ask(f"put {sid}")
        check(r == "ok " + ",".join(want[:2]), f"put {sid}: {r!r}, want the first 2 of {want}")
    get_all(d, old + new)
    too_many()

    # SIGTERM one of the first two: its lease is revoked, the handle drops it
    gone = nodes[0][1]
    nodes[0][0].send_signal(signal.SIGTERM)
    nodes.pop(0)[0].wait(timeout=30)
    wait_for("the handle drops the SIGTERMed node",
             lambda: d.members()[1] == sorted(three[1:]), 5)
    check(" left" in d.stderr(), "no 'left' line logged")
    get_all(d, old + new, dead=(gone,))

    # etcd SIGKILLed: the last members stay, calls work
    etcd.kill()
    etcd.wait()
    wait_for("the handle says etcd is unreachable", lambda: "unreachable" in d.stderr(), 10)
    check(d.members()[1] == sorted(three[1:]), "members changed while etcd was down")
    get_all(d, old + new, dead=(gone,))
    r = d.ask("put late")
    check(r.startswith("ok ") and len(r[3:].split(",")) == 2, f"put while etcd is down: {r!r}")

    # etcd back on the same data dir: the watch resumes and sees a node that joins now
    etcd, _ = kvptest.start_etcd(ETCD, os.path.join(tmp, "etcd"), cport, pport)
    fourth = start_node(3)
    wait_for("the handle sees a node that joined after etcd came back",
             lambda: fourth in d.members()[1], 15)
    check("is back" in d.stderr(), "no 'etcd is back' line logged")
    get_all(d, old + new + ["late"])
    loadtest_join()
    hung_endpoint()
    garbage_once()

    # every node leaves: calls fail with a clear error; one comes back: calls work again
    for k in list(nodes):
        nodes[k][0].send_signal(signal.SIGTERM)
        nodes.pop(k)[0].wait(timeout=30)
    wait_for("the handle sees no node", lambda: d.members()[1] == [], 5)
    r = d.ask("put empty")
    check(r == "err ERR_PEER_UNREACHABLE", f"put with no node registered: {r!r}")
    check("no nodes registered under /kvpack/nodes/" in d.stderr(), "no 'no nodes' error logged")
    back = start_node(4)
    wait_for("the handle sees a node again", lambda: d.members()[1] == [back], 5)
    r = d.ask("put empty")
    check(r == f"ok {back}", f"put once a node is back: {r!r}")

    # destroy while etcd is down: prompt (the watch wakes at once, no hang)
    etcd.kill()
    etcd.wait()
    etcd = None
    r = d.ask("quit", timeout_s=10)
    check(r.startswith("destroyed "), f"quit: {r!r}")
    check(d.p.wait(timeout=10) == 0, f"watch_driver exit {d.p.returncode}")
    print(f"destroy with etcd down: {r.split()[-1]} ms")
finally:
    for proc in [d and d.p, many and many.p, etcd] + [proc for proc, _ in nodes.values()]:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    if (fails or os.environ.get("KVP_SHOW")) and d is not None:
        print("--- watch_driver stderr ---\n" + d.stderr()[-4000:])
    shutil.rmtree(tmp, ignore_errors=True)

if fails:
    print(f"{len(fails)} check(s) failed")
    sys.exit(1)
print("etcd watch: ok")
