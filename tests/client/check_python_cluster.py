#!/usr/bin/env python3
"""check_python_cluster.py - kvpack.Cluster (client/python/kvpack.py over cluster.h) on 3 kvpackd:
ctypes layouts equal the C ones (cluster_layout); 6 sessions put with replicas=2 are each on the
nodes rank() names (per-node Client.list_sessions) and listed once with those holders; get is
byte-equal to the put (and `kvpack get` of an fp16 one to its .kvd); delete takes one off both
replicas; Cluster.append grows both copies of a session alike (a wrong chunk count and an
unknown session refused); the busiest primary SIGKILLed: every session still gets from another node, an unknown
session ranked first on it is the unreachable status (not NOT_FOUND), puts skip it, replicas=3
is partial (returned, not raised), stat/list name it; bad arguments raise KvpError ERR_INVALID.
The README's Cluster example runs first. With etcd installed: Cluster(etcd=) of 2 registered
nodes ranks as Cluster(peers=) does, and a third node that registers later is seen by the same
Cluster (its watch: sync() within a deadline, then ranked over 3 as Cluster(peers=) of the 3)
(else that part is skipped with a note).
usage: check_python_cluster.py LIBKVPACK KVPACK KVPACKD CLUSTER_LAYOUT README"""
import array
import copy
import functools
import gc
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

lib, kvpack_exe, kvpackd, layout_exe, readme = sys.argv[1:6]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack = kvptest.load_kvpack(lib)
tmp = tempfile.mkdtemp(prefix="kvp_pyclu_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
procs = []
L, H, D, P, TAIL = 2, 2, 64, 128, 50
T = 2 * P + TAIL
UNREACH = {"ERR_TIMEOUT", "ERR_PEER_GONE", "ERR_PEER_UNREACHABLE", "ERR_CANCELED"}


def raises(fn, names):
    """The KvpError fn raises, if its name is one of names; else a failure and None."""
    try:
        fn()
    except kvpack.KvpError as e:
        check(e.name in names, f"{e} is not one of {sorted(names)}")
        return e if e.name in names else None
    except Exception as e:  # noqa: BLE001 - reported as a failure
        check(False, f"expected KvpError, got {type(e).__name__}: {e}")
        return None
    check(False, f"expected KvpError {sorted(names)}, nothing raised")
    return None


class Spy:
    """Stands in for the loaded library (kvpack._lib): the functions in over as given (each
    gets the real one first), every other one the real one."""
    def __init__(self, real, **over):
        self.real, self.over = real, over

    def __getattr__(self, name):
        fn = getattr(self.real, name)
        return functools.partial(self.over[name], fn) if name in self.over else fn


def check_layouts():
    c = json.loads(subprocess.run([layout_exe], capture_output=True, text=True,
                                  check=True).stdout)
    py = {"kvp_cluster_params_t": kvpack._ClusterParams, "kvp_cluster_try_t": kvpack._ClusterTry,
          "kvp_cluster_report_t": kvpack._ClusterReport, "kvp_cluster_list_t": kvpack._ClusterList,
          "kvp_session_info_t": kvpack._SessionInfo, "kvp_client_params_t": kvpack._ClientParams,
          "kvp_append_t": kvpack._Append, "kvp_session_desc_t": kvpack._SessionDesc,
          "kvp_session_pages_t": kvpack._SessionPages, "kvp_node_stat_t": kvpack._NodeStat,
          "kvp_scrub_result_t": kvpack._ScrubResult, "kvp_page_params_t": kvpack._PageParams,
          "kvp_page_info_t": kvpack._PageInfo}
    for name, cls in py.items():
        got = {"size": kvpack.ctypes.sizeof(cls)}
        got.update({f: getattr(cls, f).offset for f in c[name] if f != "size"})
        check(got == c[name], f"ctypes layout of {name} {got} != C {c[name]}")


def start_node(k, extra=()):
    proc, addr = kvptest.start_kvpackd(  # with --etcd: once it is registered too
        kvpackd, os.path.join(tmp, f"ready{k}"),
        ["--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, f"n{k}"), "--dram-budget", "32M",
         "--durability", "write-through", *extra], env=env, what=f"kvpackd {k}")
    procs.append(proc)
    return proc, addr


def session(sid, codec):
    """(ns, pages, desc, .kvd bytes) of an L x T session, values exact in fp16, keys from sid."""
    rnd = random.Random(sid)
    n = L * T * H * D
    k = array.array("f", [rnd.randint(-256, 256) / 64.0 for _ in range(n)])
    v = array.array("f", [rnd.randint(-256, 256) / 64.0 for _ in range(n)])
    ns = kvpack.ns_fingerprint("kvd", L, H, D, P, codec)
    keys, prev = [], None
    for c in range(T // P):
        prev = kvpack.chunk_key(prev, ns, [rnd.randrange(1 << 32) for _ in range(P)])
        keys.append(prev)
    row, pages, tails = H * D, [], []
    for c in range(T // P):
        for layer in range(L):
            sl = slice((layer * T + c * P) * row, (layer * T + (c + 1) * P) * row)
            pp = kvpack.PageParams(codec, H, D, P, layer=layer, first_pos=c * P,
                                   chunk_key=keys[c])
            pages.append(kvpack.page_encode(pp, k[sl], v[sl]))
    for layer in range(L):
        sl = slice((layer * T + 2 * P) * row, (layer + 1) * T * row)
        pp = kvpack.PageParams("fp16", H, D, P, layer=layer, first_pos=2 * P,
                               flags=kvpack.PAGE_F_TAIL)
        tails.append(kvpack.page_encode(pp, k[sl], v[sl]))
    kvd = kvptest.kvd_bytes(L, T, H, D, k + v)
    return ns, pages, kvpack.SessionDesc(L, P, keys, TAIL, tails), kvd


def held(addr):
    with kvpack.Client(addr, timeout_ms=5000) as c:
        return {s.sid for s in c.list_sessions().sessions}


def run_readme(addrs):
    """The README's Python examples: Client on the first node, then Cluster on all three."""
    text = open(readme).read()
    blocks = re.findall(r"```python\n(.*?)```", text.split("## Python\n", 1)[1].split("\n## ")[0],
                        re.S)
    check(len(blocks) == 2 and "kvpack.Cluster(peers=" in blocks[1], "README Cluster example")
    scope = {}
    exec(compile(blocks[0].replace("127.0.0.1:7070", addrs[0]), "README.md", "exec"), scope)
    exec(compile(blocks[1].replace("10.0.0.1:7070,10.0.0.2:7070,10.0.0.3:7070", ",".join(addrs)),
                 "README.md", "exec"), scope)
    check(scope["got"].pages == [scope["page"]] and scope["got"].served_by == scope["took"][0],
          "README Cluster example got something else")
    check(all("chat-42" not in held(a) for a in addrs), "README example's delete left a copy")


def run_cluster():
    nodes = [start_node(k) for k in range(3)]
    addrs = [a for _, a in nodes]
    decode = start_node(3)[1]  # a decode engine's own kvpackd: outside the placement
    peers = ",".join(addrs)
    run_readme(addrs)
    sids = [f"py{i}" for i in range(6)]
    data = {s: session(s, "fp16" if i % 2 == 0 else "kivi") for i, s in enumerate(sids)}
    with kvpack.Cluster(peers=peers, replicas=2, timeout_ms=5000) as cl:
        check(cl.peers == addrs and cl.replicas == 2, f"peers {cl.peers} replicas {cl.replicas}")
        rank = {s: cl.rank(data[s][0], s) for s in sids}
        for s in sids:
            ns, pages, desc, _ = data[s]
            check(sorted(rank[s]) == sorted(addrs), f"rank {s}: {rank[s]}")
            took = cl.put_session(ns, s, pages, desc)
            check(took == rank[s][:2], f"put {s} went to {took}, rank {rank[s]}")
        on = {a: held(a) for a in addrs}
        for s in sids:
            where = [a for a in addrs if s in on[a]]
            check(sorted(where) == sorted(rank[s][:2]), f"{s} is on {where}, rank {rank[s][:2]}")
        lst = cl.list_sessions(page_size=2)
        check(sorted(x.sid for x in lst.sessions) == sids and lst.unreachable == [] and
              all(x.nodes == [a for a in addrs if a in rank[x.sid][:2]] for x in lst.sessions) and
              not lst.truncated, f"merged list: {lst}")
        check(all(x.codec == ("fp16" if int(x.sid[2:]) % 2 == 0 else "kivi") and
                  x.tail_tokens == TAIL and x.ns == data[x.sid][0] for x in lst.sessions),
              "merged list infos")
        for s in sids:
            got = cl.get_session(data[s][0], s)
            check(got.pages == data[s][1] and got.desc == data[s][2] and
                  got.served_by == rank[s][0], f"get {s}: from {got.served_by}, equal pages "
                  f"{got.pages == data[s][1]}, record {got.desc == data[s][2]}")
            got = cl.get_session(data[s][0], s, latest=True)  # every copy at one version
            check(got.pages == data[s][1] and got.served_by == rank[s][0], f"latest get {s}")
        runs = []
        got = cl.get_session(data[sids[0]][0], sids[0], latest=True,
                             on_pages=lambda first, pages: runs.append((first, len(pages))))
        check(got.pages == data[sids[0]][1] and runs and runs[0][0] == 0,
              f"latest get with on_pages: runs {runs}")
        ex = kvpack.PageParams("kivi", H, D, P)
        raises(lambda: cl.get_session(data["py0"][0], "py0", expect=ex), {"ERR_WRONG_CODEC"})
        check(cl.get_session(data["py1"][0], "py1", expect=ex).pages == data["py1"][1],
              "get with the right expect")
        out = os.path.join(tmp, "py0.kvd")
        p = subprocess.run([kvpack_exe, "get", "--node", peers, "--session", "py0", "--ns",
                            f"{data['py0'][0]:016x}", "--out", out], capture_output=True,
                           text=True, env=env, timeout=120)
        check(p.returncode == 0 and open(out, "rb").read() == data["py0"][3],
              f"kvpack get of a Python-put fp16 session is not its .kvd: {p.stderr!r}")
        st = cl.stat()
        check(sorted(st) == sorted(addrs) and
              all(st[a].sessions == len(on[a]) for a in addrs), f"stat {st}")
        # Cluster.append: 80 tokens onto a kivi session's 50-token tail on both copies (one chunk
        # sealed, 2 tokens left), at one new version; a chunk count the copies do not hold and a
        # session nobody holds are refused
        ns_a, pages_a, desc_a, _ = session("pyapp", "kivi")
        took = cl.put_session(ns_a, "pyapp", pages_a, desc_a)
        rnd = random.Random(7)
        new = array.array("f", [rnd.randint(-256, 256) / 64.0 for _ in range(L * 80 * H * D)])
        ids = list(range(1000, 1000 + TAIL + 80))
        sealed, app = cl.append(ns_a, "pyapp", "kivi", (L, H, D, P), new, new, ids, chunks=2)
        check(sealed == 1 and app == took, f"Cluster.append: sealed {sealed} on {app}, put {took}")
        vers = []
        for a in took:
            with kvpack.Client(a, timeout_ms=5000) as c:
                sp = c.get_session(ns_a, "pyapp")
                vers.append(sp.version)
                check(len(sp.desc.chunk_keys) == 3 and sp.desc.tail_tokens == 2 and
                      sp.pages[:len(pages_a)] == pages_a, f"appended copy on {a}: {sp.desc}")
        check(len(set(vers)) == 1 and vers[0] > 0, f"copies' versions after the append: {vers}")
        raises(lambda: cl.append(ns_a, "pyapp", "kivi", (L, H, D, P), new, new,
                                 list(range(2 + 80)), chunks=2), {"ERR_INVALID"})
        raises(lambda: cl.append(ns_a, "nobody", "kivi", (L, H, D, P), new, new,
                                 list(range(80)), chunks=0), {"ERR_NOT_FOUND"})
        cl.delete_session(ns_a, "pyapp")

        # delete takes it off both replicas; then NOT_FOUND (every node answered)
        gone = sids.pop()
        check(sorted(cl.delete_session(data[gone][0], gone)) == sorted(rank[gone][:2]),
              f"delete {gone}")
        check(all(gone not in held(a) for a in addrs), f"delete {gone} left a copy")
        raises(lambda: cl.get_session(data[gone][0], gone), {"ERR_NOT_FOUND"})
        raises(lambda: cl.delete_session(data[gone][0], gone), {"ERR_NOT_FOUND"})

        # SIGKILL the busiest primary
        dead = max(addrs, key=lambda a: sum(rank[s][0] == a for s in sids))
        proc = nodes[addrs.index(dead)][0]
        proc.kill()
        proc.wait()
        for s in sids:
            try:
                got = cl.get_session(data[s][0], s)
                check(got.pages == data[s][1] and got.served_by != dead and
                      (rank[s][0] != dead or got.served_by == rank[s][1]),
                      f"{s} with {dead} dead: from {got.served_by}")
            except kvpack.KvpError as e:
                check(False, f"get {s} with {dead} dead: {e}")
        print(f"killed {dead}, primary for {sum(rank[s][0] == dead for s in sids)} of "
              f"{len(sids)} sessions: all {len(sids)} still served by another node")
        ns = data["py0"][0]
        unknown = next(f"nope{i}" for i in range(1000) if cl.rank(ns, f"nope{i}")[0] == dead)
        t0 = time.monotonic()
        e = raises(lambda: cl.get_session(ns, unknown), UNREACH)
        print(f"unknown session ranked first on the dead node: {e.name if e else None} after "
              f"{time.monotonic() - t0:.2f} s")
        check(e is not None and dead in [f[0] for f in e.failed] and dead in str(e),
              f"unknown session with its first node dead: {e}")
        new = session("late", "fp16")
        took = cl.put_session(new[0], "late", new[1], new[2])
        check(len(took) == 2 and dead not in took, f"put with {dead} dead went to {took}")
        # a page every node refuses is refused as that, not as the dead primary's outage (a
        # retry on "unreachable" would retry it for ever)
        bad_sid = next(f"bad{i}" for i in range(1000) if cl.rank(new[0], f"bad{i}")[0] == dead)
        trunc = [new[1][0][:-1]] + new[1][1:]
        e = raises(lambda: cl.put_session(new[0], bad_sid, trunc, new[2]), {"ERR_BAD_PAGE"})
        check(e is not None and dead in [f[0] for f in e.failed], f"bad page put: {e}")
        with cl.put_stream(new[0], bad_sid) as ps:
            ps.push(trunc)
            raises(lambda: ps.finish(new[2]), {"ERR_BAD_PAGE"})
        # streamed, layer by layer, to two live nodes of the rank and to a decode node's kvpackd
        sp = session("late-st", "kivi")
        lm = [[sp[1][c * L + layer] for c in range(T // P)] for layer in range(L)]
        with cl.put_stream(sp[0], "late-st", also=[decode]) as ps:
            for layer in range(L - 1):
                ps.push(lm[layer])
            took = ps.finish(sp[2], lm[L - 1])
            check(len(took) == 2 and dead not in took and ps.also_status == {decode: "OK"},
                  f"streamed put with {dead} dead went to {took}, decode node {ps.also_status}")
        with kvpack.Client(decode, timeout_ms=5000) as dc:
            got = dc.get_session(sp[0], "late-st")
            check(got.pages == sp[1] and got.desc == sp[2], "the decode node's streamed copy")
        runs = []
        got = cl.get_session(sp[0], "late-st", on_pages=lambda first, pages: runs.append(
            (first, pages)))
        flat = [p for _, ps in sorted(runs, key=lambda r: r[0]) for p in ps]
        check(got.pages == sp[1] and flat == sp[1] and got.served_by != dead and runs[0][0] == 0,
              f"streamed get over the cluster: {len(runs)} runs from {got.served_by}")
        # a stream opened inside on_pages of a get on its cluster: refused, as put_stream (the
        # constructor skipped the check: the open could replace the client the get was using,
        # a double free); over a Client, not a Cluster: TypeError (its handle reached C as a
        # cluster's: SIGSEGV)
        inner = []

        def open_inside(first, pages):
            try:
                kvpack.ClusterPutStream(cl, sp[0], "inside").close()
                inner.append("opened")
            except RuntimeError as e:
                inner.append(str(e))
        cl.get_session(sp[0], "late-st", on_pages=open_inside)
        check(inner and all("inside on_pages" in x for x in inner),
              f"ClusterPutStream inside on_pages: {inner}")
        with kvpack.Client(decode, timeout_ms=5000) as dc:
            try:
                kvpack.ClusterPutStream(dc, sp[0], "not-a-cluster")
                check(False, "ClusterPutStream over a Client was accepted")
            except TypeError:
                pass
        # opened in a child forked while a parent thread was inside a call on its cluster (the
        # decode node stopped): refused at once, ValueError (it waited for the lock that thread
        # held, for good)
        with kvpack.Cluster(peers=decode, timeout_ms=1500) as dcl:
            os.kill(procs[3].pid, signal.SIGSTOP)

            def busy():
                try:
                    dcl.stat()
                except kvpack.KvpError:
                    pass
            th = threading.Thread(target=busy)
            th.start()
            time.sleep(0.2)
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    kvpack.ClusterPutStream(dcl, sp[0], "forked").close()
                except ValueError:
                    code = 0
                finally:
                    os._exit(code)
            st, end = None, time.time() + 20
            while st is None and time.time() < end:
                done, w = os.waitpid(pid, os.WNOHANG)
                st = w if done else None
                time.sleep(0.05 if st is None else 0)
            if st is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.kill(procs[3].pid, signal.SIGCONT)
            th.join()
        check(st is not None and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0,
              f"a stream opened in a forked child: {'hung' if st is None else hex(st)}")
        # a stream whose last reference goes inside on_pages of a get on its cluster is closed
        # when the get returns, its pushed buffers kept until then (its close used to be refused
        # there and swallowed: the stream never closed, its buffers freed under its shipper)
        closes, real_lib, holder = [], kvpack._lib, [cl.put_stream(sp[0], "dropped")]
        holder[0].push([bytearray(p) for p in sp[1]])
        kvpack._lib = Spy(real_lib, kvp_cluster_stream_close=lambda fn, h: (closes.append(h),
                                                                            fn(h)))
        try:
            cl.get_session(sp[0], "late-st", on_pages=lambda first, pages: (holder.clear(),
                                                                            gc.collect()))
            check(len(closes) == 1 and not cl._parked,
                  f"a stream dropped inside on_pages: closed {len(closes)} times at the get's end")
        finally:
            kvpack._lib = real_lib
        # no node listed (etcd may list none): KvpError, not IndexError
        kvpack._lib = Spy(real_lib, kvp_cluster_size=lambda fn, h: 0)
        try:
            for call in (cl.stat, cl.scrub):
                e = raises(call, {"ERR_PEER_UNREACHABLE"})
                check(e is not None and "no node" in str(e), f"{call.__name__} of no nodes: {e}")
        finally:
            kvpack._lib = real_lib
        # a handle cannot be copied (both copies would destroy it), nor pickled
        for how in (copy.copy, copy.deepcopy, __import__("pickle").dumps):
            try:
                how(cl)
                check(False, f"{how.__name__} of a Cluster did not raise")
            except TypeError:
                pass
        with cl.put_stream(sp[0], "late-st2", also="127.0.0.1:1") as ps:
            ps.push(sp[1])
            took = ps.finish(sp[2])
            check(len(took) == 2 and ps.also_status["127.0.0.1:1"] in UNREACH,
                  f"an unreachable decode node: took {took}, {ps.also_status}")
            # one session per stream: more after its finish is refused (it used to reach no
            # node and report the ranked nodes as having taken it)
            raises(lambda: ps.push(sp[1][:1]), {"ERR_INVALID"})
            raises(lambda: ps.finish(sp[2]), {"ERR_INVALID"})
        raises(lambda: cl.put_stream(sp[0], "x", also="nohostport"), {"ERR_INVALID"})
        # also= items are trimmed as peers= are, and each may appear once
        with cl.put_stream(sp[0], "late-st3", also=f" {decode} ") as ps:
            ps.push(sp[1])
            ps.finish(sp[2])
            check(ps.also_status == {decode: "OK"}, f"a spaced also address: {ps.also_status}")
        raises(lambda: cl.put_stream(sp[0], "x", also=f"{decode},{decode}"), {"ERR_INVALID"})
        # a stream outliving its cluster (the with block ended): closed with it, so finish raises
        # ValueError before any C call (it used to run kvp_cluster_stream_finish on the freed
        # cluster: a crash, or a ValueError only from the cluster afterwards)
        with kvpack.Cluster(peers=",".join(a for a in addrs if a != dead), replicas=1) as c2:
            orphan = c2.put_stream(sp[0], "orphan")
            orphan.push(sp[1])
        try:
            orphan.finish(sp[2])
            check(False, "finish after the cluster closed did not raise")
        except ValueError as e:
            check("putstream is closed" in str(e), f"finish after the cluster closed: {e}")
        victim = next(s for s in sids if dead in rank[s][:2])
        e = raises(lambda: cl.delete_session(data[victim][0], victim), UNREACH)
        check(e is not None and e.ok_nodes == [a for a in rank[victim][:2] if a != dead],
              f"delete {victim} with a replica dead: {e and e.ok_nodes}")
        st = cl.stat()
        check(isinstance(st[dead], kvpack.KvpError) and st[dead].name in UNREACH and
              all(isinstance(st[a], kvpack.NodeStat) for a in addrs if a != dead), f"stat {st}")
        lst = cl.list_sessions()
        check([a for a, _ in lst.unreachable] == [dead] and "late" in
              [x.sid for x in lst.sessions], f"list with {dead} dead: {lst.unreachable}")
    with kvpack.Cluster(peers=peers, replicas=3, timeout_ms=5000) as c3:
        r3 = session("r3", "kivi")
        took = c3.put_session(r3[0], "r3", r3[1], r3[2])
        check(sorted(took) == sorted(a for a in addrs if a != dead),
              f"replicas=3 with a node dead: partial put returned {took}")
    return addrs


def check_bad_args(addrs):
    peers = ",".join(addrs)
    for kw, want in ((dict(peers=peers, etcd="http://127.0.0.1:1"), "exactly one"),
                     (dict(), "exactly one"),
                     (dict(peers=peers, replicas=4), "replicas=4"),
                     (dict(peers=peers, replicas=0), "replicas"),
                     (dict(peers="garbage, not a peer"), "HOST:PORT"),
                     (dict(peers=f"{addrs[0]},{addrs[0]}"), "each once"),
                     # one node under two names (the library resolves them)
                     (dict(peers=f"{addrs[0]},{addrs[0].replace('127.0.0.1', 'localhost')}"),
                      "each once")):
        e = raises(lambda: kvpack.Cluster(**kw), {"ERR_INVALID"})
        check(e is not None and want in str(e), f"Cluster({kw}): {e}")
    # integers of any integer type (numpy's too), bool refused
    class Index:
        def __init__(self, n):
            self.n = n

        def __index__(self):
            return self.n
    with kvpack.Cluster(peers=peers, replicas=Index(2)) as c:
        check(c.replicas == 2 and c.rank(1, "x") == c.rank(1, "x"), "replicas=Index(2)")
        every = c.stat()  # one node of the list is dead (run_cluster killed it)
        k = next(i for i, a in enumerate(c.peers) if isinstance(every[a], kvpack.NodeStat))
        check(isinstance(c.stat(Index(k)), kvpack.NodeStat), f"stat(node=Index({k}))")
        for bad in (True, 1.0, len(addrs)):
            try:
                c.stat(bad)
                check(False, f"stat(node={bad!r}) did not raise")
            except ValueError:
                pass
    raises(lambda: kvpack.Cluster(peers=peers, replicas=True), {"ERR_INVALID"})
    try:
        kvpack.Cluster(peers=peers).close()
        c = kvpack.Cluster(peers=peers)
        c.close()
        c.rank(1, "x")
        check(False, "a closed Cluster still ranks")
    except ValueError:
        pass


def check_etcd():
    etcd = shutil.which("etcd")
    if etcd is None:
        print("note: etcd is not installed, the Cluster(etcd=) part is skipped")
        return
    proc, url = kvptest.start_etcd(etcd, os.path.join(tmp, "etcd"))
    procs.append(proc)
    addrs = [start_node(10 + k, ("--etcd", url, "--etcd-ttl", "5"))[1] for k in range(2)]
    with kvpack.Cluster(etcd=url, replicas=2, timeout_ms=5000) as ce, \
            kvpack.Cluster(peers=list(reversed(addrs)), replicas=2, timeout_ms=5000) as cp:
        check(ce.peers == sorted(addrs), f"etcd peers {ce.peers}, registered {addrs}")
        ns = kvpack.ns_fingerprint("kvd", L, H, D, P, "kivi")
        check(all(ce.rank(ns, f"e{i}") == cp.rank(ns, f"e{i}") for i in range(20)),
              "Cluster(etcd=) ranks differently from Cluster(peers=)")
        s = session("e0", "kivi")
        check(sorted(ce.put_session(s[0], "e0", s[1], s[2])) == sorted(addrs), "put via etcd")
        check(cp.get_session(s[0], "e0").pages == s[1], "etcd put, static-list get")
        gen = ce.sync()
        third = start_node(12, ("--etcd", url, "--etcd-ttl", "5"))[1]
        end = time.monotonic() + 5
        while ce.sync() == gen and time.monotonic() < end:
            time.sleep(0.05)
        three = sorted(addrs + [third])
        check(ce.peers == three, f"after a join the etcd Cluster has {ce.peers}, want {three}")
        with kvpack.Cluster(peers=three, replicas=2) as c3:
            check(all(ce.rank(ns, f"e{i}") == c3.rank(ns, f"e{i}") for i in range(20)),
                  "after the join Cluster(etcd=) ranks differently from Cluster(peers=) of 3")
        check(ce.get_session(s[0], "e0").pages == s[1], "a session put before the join")
    raises(lambda: kvpack.Cluster(etcd=url, etcd_prefix="/nobody/"), {"ERR_NOT_FOUND"})
    raises(lambda: kvpack.Cluster(etcd=f"http://127.0.0.1:{kvptest.free_port()}", timeout_ms=2000),
           UNREACH)


try:
    check_layouts()
    live = run_cluster()
    check_bad_args(live)
    check_etcd()
finally:
    for pr in procs:
        if pr.poll() is None:
            pr.kill()
            pr.wait()
    shutil.rmtree(tmp, ignore_errors=True)
if fails:
    sys.exit(f"check_python_cluster: {len(fails)} check(s) failed")
print("check_python_cluster: all checks passed")
