#!/usr/bin/env python3
"""check_python.py - the ctypes binding (client/python/kvpack.py) over libkvpack.so.
codec: fp16 bit-exact, kivi within its error and equal to `kvpack eval --dequant-out`; bad sizes are
  ValueError before any C call; malformed pages KvpError; load() errors. node: a real kvpackd, the
  README example; put/lookup/get/list/stat/spill/delete from Python, CLI put -> Python get, Python
  put -> CLI get; corrupt put and dead node are KvpError, nothing lost, no hang; a non-UTF-8 session
  id lists and round-trips; the node's reason is in the KvpError; threads share one client;
  kvpackd --put-grace keeps a shared page for a record within the grace, not after it.
usage: check_python.py codec|node LIBKVPACK KVPACK KVPACKD README"""
import array
import dataclasses
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

mode, lib, kvpack_exe, kvpackd, readme = sys.argv[1:6]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvptest  # noqa: E402

kvpack = kvptest.load_kvpack(lib)
tmp = tempfile.mkdtemp(prefix="kvp_py_")
env = dict(os.environ, KVP_PROGRESS="0")
fails = kvptest.FAILS  # kvptest.check keeps failed checks here
check = kvptest.check
L, T, H, D, P = 2, 256, 2, 64, 128


def raises(fn, exc, names=None):
    """The exception fn raises (None if it raised nothing or something else); checks the name."""
    try:
        fn()
    except exc as e:
        if names is not None and e.name not in names:
            check(False, f"{e} is not one of {names}")
            return None
        return e
    except Exception as e:  # noqa: BLE001 - reported as a failure
        check(False, f"expected {exc.__name__}, got {type(e).__name__}: {e}")
        return None
    check(False, f"expected {exc.__name__}, nothing raised")
    return None


def values(n, seed):
    """k/64 for integers k in [-256, 256]: exact in fp16, so fp16 pages lose nothing."""
    rnd = random.Random(seed)
    return array.array("f", [rnd.randint(-256, 256) / 64.0 for _ in range(n)])


def write_kvd(path, k, v, layers, tokens):
    kvptest.write_kvd(path, layers, tokens, H, D, k + v)


def pages_of(k, v, codec, layers, tokens, keys=None):
    """Encode every (chunk, layer) page, in session order page[chunk * layers + layer]."""
    row, out = H * D, []
    for c in range(tokens // P):
        for layer in range(layers):
            off = (layer * tokens + c * P) * row
            pp = kvpack.PageParams(codec, H, D, P, layer=layer, first_pos=c * P,
                                   chunk_key=keys[c] if keys else kvpack.Key128())
            # memoryview slices: any buffer of the right size, no copy
            out.append(kvpack.page_encode(pp, memoryview(k)[off:off + P * row],
                                          memoryview(v)[off:off + P * row]))
    return out


def rel_err(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(y * y for y in b))


def run_codec():
    ver = kvpack.version()
    check(len(ver.split(".")) == 3 and all(x.isdigit() for x in ver.split(".")),
          f"kvpack.version() is {ver!r}, not the project's x.y.z")
    n = P * H * D
    k, v = values(n, 1), values(n, 2)
    fp16 = kvpack.PageParams("fp16", H, D, P, layer=3, first_pos=128)
    page = kvpack.page_encode(fp16, k, v)
    k2, v2, info = kvpack.page_decode(page)
    check(k2 == k and v2 == v, "fp16 page (fp32 in/out) is not bit-exact")
    check(info["codec"] == kvpack.CODEC_FP16 and info["layer"] == 3 and info["valid"] == P and
          info["first_pos"] == 128, f"fp16 header {info}")
    kh, vh, _ = kvpack.page_decode(page, dtype="f16")
    page16 = kvpack.page_encode(fp16, kh, bytes(vh), dtype="f16")
    check(page16 == page, "fp16 input (array('H') and bytes) gives another page than fp32 input")
    half = kvpack.page_encode(fp16, memoryview(k)[:n // 2], memoryview(v)[:n // 2])
    check(kvpack.page_parse(half)["valid"] == P // 2 and
          kvpack.page_decode(half)[0] == k[:n // 2], "partial fp16 page")

    kivi = kvpack.page_encode(kvpack.PageParams("kivi", H, D, P), k, v)
    kq, vq, info = kvpack.page_decode(kivi)
    ek, ev = rel_err(kq, k), rel_err(vq, v)
    print(f"kivi: {len(kivi)} bytes for {4 * n} fp16 bytes, k rel err {ek:.3f}, v {ev:.3f}")
    check(info["codec"] == kvpack.CODEC_KIVI and kvpack.codec_name(info["codec"]) == "kivi",
          "kivi codec id / name")
    # 2-bit codes over uniform values: rms error = step / sqrt(12) = range / 10.4, ~0.33 x rms
    check(0 < ek < 0.4 and 0 < ev < 0.4, f"kivi rel err {ek:.3f} / {ev:.3f} out of range")
    check(len(kivi) * 4 < 2 * 2 * n, "kivi page is not 4x smaller than fp16")

    # the same .kvd through `kvpack eval --dequant-out` and through Python: equal bytes
    kk, vv = values(L * T * H * D, 3), values(L * T * H * D, 4)
    write_kvd(os.path.join(tmp, "in.kvd"), kk, vv, L, T)
    ev_run = subprocess.run([kvpack_exe, "eval", "--input", os.path.join(tmp, "in.kvd"),
                             "--codec", "kivi", "--page-tokens", str(P), "--dequant-out",
                             os.path.join(tmp, "eval.kvd")], capture_output=True, env=env)
    check(ev_run.returncode == 0, f"kvpack eval exited {ev_run.returncode}")
    ref = open(os.path.join(tmp, "eval.kvd"), "rb").read() if ev_run.returncode == 0 else b""
    ks, vs = [bytearray(len(kk) * 4) for _ in range(2)]
    for i, pg in enumerate(pages_of(kk, vv, "kivi", L, T)):
        c, layer = divmod(i, L)
        dk, dv, _ = kvpack.page_decode(pg)
        off = (layer * T + c * P) * H * D * 4
        ks[off:off + len(dk) * 4], vs[off:off + len(dv) * 4] = dk.tobytes(), dv.tobytes()
    check(ref[24:] == bytes(ks) + bytes(vs), "Python kivi decode differs from kvpack eval")

    # wrong sizes and types: ValueError / TypeError, and no C function is even looked up
    real, calls = kvpack._lib, []

    class Spy:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(real, name)
    kvpack._lib = Spy()
    kivi_pp = kvpack.PageParams("kivi", H, D, P)
    raises(lambda: kvpack.page_encode(kivi_pp, k[:-1], v), ValueError)
    raises(lambda: kvpack.page_encode(kivi_pp, k, v[:-H * D]), ValueError)
    raises(lambda: kvpack.page_encode(kivi_pp, k + k, v + v), ValueError)     # > P tokens
    raises(lambda: kvpack.page_encode(kivi_pp, k, v, dtype="f16"), ValueError)  # 'f' is f32
    raises(lambda: kvpack.page_encode(kivi_pp, bytes(4 * n), bytes(4 * n)), ValueError)
    raises(lambda: kvpack.page_encode(kivi_pp, [0.0] * n, v), TypeError)
    # typed buffers of another type than dtype says are refused, not taken as its bits
    for typ in ("d", "i"):
        wrong = array.array(typ, [0]) * n
        raises(lambda: kvpack.page_encode(kivi_pp, wrong, wrong, dtype="f32"), ValueError)
    # numbers out of their C type's range: ValueError, not a wrapped value
    for bad in ({"layer": -1}, {"layer": 1 << 16}, {"first_pos": 1 << 64}, {"flags": 1 << 32},
                {"kvarn_iters": -1}):
        raises(lambda: kvpack.page_encode(dataclasses.replace(kivi_pp, **bad), k, v), ValueError)
    # heads past uint32 (page_encode's size check would refuse it first: ask the params alone)
    raises(lambda: kvpack.page_max_bytes(dataclasses.replace(kivi_pp, heads=2 ** 32 + H)),
           ValueError)
    for fn, bad in ((kvpack.codec_name, 2 ** 32 + 2), (kvpack.status_name, 2 ** 32 - 3),
                    (kvpack.status_str, -(2 ** 31) - 1), (kvpack.codec_name, True)):
        raises(lambda: fn(bad), ValueError)  # ctypes would wrap them to kivi / ERR_NOT_FOUND
    raises(lambda: kvpack.Key128(-1, 0), ValueError)
    raises(lambda: kvpack.Key128(0, 1 << 64), ValueError)
    raises(lambda: kvpack.ns_fingerprint("llama\0-8b", 1, H, D, P, "kivi"), ValueError)
    raises(lambda: kvpack.codec_from_name("kivi\0x"), ValueError)
    raises(lambda: kvpack.chunk_key(None, True, [1]), ValueError)
    raises(lambda: kvpack.chunk_key(None, 1, [1.0]), ValueError)
    check(calls == [], f"C was called before the size check: {calls}")
    kvpack._lib = real

    # malformed pages: KvpError from the library's own checks
    e = raises(lambda: kvpack.page_decode(kivi[:-1]), kvpack.KvpError, {"ERR_BAD_PAGE"})
    # a KvpError crosses processes (multiprocessing pickles it) with all it said
    for err in (e, kvpack._cluster_error(-40, "get", [("a:1", "ERR_PEER_UNREACHABLE", "get")],
                                         ["b:2"])):
        got = pickle.loads(pickle.dumps(err)) if err is not None else None
        check(got is not None and type(got) is kvpack.KvpError and str(got) == str(err) and
              (got.status, got.name, got.message, got.failed, got.ok_nodes) ==
              (err.status, err.name, err.message, list(err.failed), list(err.ok_nodes)),
              f"KvpError through pickle: {got!r} for {err!r}")
    de = raises(lambda: kvpack.page_decode(kivi, dtype=None), ValueError)
    check(de is not None and "dtype must be 'f32' or 'f16'" in str(de),
          f"page_decode(dtype=None): {de}")
    # a bytes page goes to C as it is (immutable, C only reads it), not as a copy
    check(kvpack._buf(kivi, "page")[0] is kivi, "a bytes page was copied")
    check(e is not None and e.status == -81 and e.message == "malformed page", f"truncated: {e}")
    flipped = bytearray(kivi)
    flipped[200] ^= 0x10
    check(raises(lambda: kvpack.page_decode(flipped), kvpack.KvpError, {"ERR_CORRUPT"})
          is not None, "flipped bit is not ERR_CORRUPT")
    check(raises(lambda: kvpack.page_decode(b"KVPG" + bytes(60)), kvpack.KvpError,
                 {"ERR_BAD_PAGE", "ERR_CORRUPT"}) is not None, "zero header accepted")
    check(raises(lambda: kvpack.codec_from_name("zip"), kvpack.KvpError, {"ERR_INVALID"})
          is not None, "unknown codec name")
    # finding the library: $KVPACK_LIB, and a clear OSError when it is not there
    probe = ("import sys; sys.path.insert(0, %r); import kvpack\n"
             "try:\n    kvpack.load(); print(kvpack.codec_name(2))\n"
             "except OSError as e:\n    print(e)") % os.path.dirname(kvpack.__file__)
    for path, want in ((lib, "kivi"), ("/nonexistent/libkvpack.so",
                                       "kvpack: libkvpack.so not found (looked at /nonexistent")):
        out = subprocess.run([sys.executable, "-B", "-c", probe], capture_output=True, text=True,
                             env=dict(env, KVPACK_LIB=path)).stdout
        check(out.startswith(want), f"load() with KVPACK_LIB={path}: {out!r}")
    # integer types other than int (numpy's: operator.index) are taken as the int they are
    class Index:
        def __init__(self, n):
            self.n = n

        def __index__(self):
            return self.n
    check(kvpack.chunk_key(None, Index(7), map(Index, range(4))) ==
          kvpack.chunk_key(None, 7, range(4)), "an __index__ integer gives another key")
    check(kvpack.ns_fingerprint(b"m", 1, H, D, P, "kivi") ==
          kvpack.ns_fingerprint("m", 1, H, D, P, "kivi"), "a bytes model id differs from str")
    # the C encoder refuses a layer no session can hold (the header's 16 bits, below 65535)
    raises(lambda: kvpack.page_encode(dataclasses.replace(kivi_pp, layer=65535), k, v),
           kvpack.KvpError, {"ERR_INVALID"})
    # numbers that ctypes would take wrongly or refuse with its own ArgumentError: ValueError
    # (a float ntok or frame was ctypes.ArgumentError; dtype 0.0 passed as f32, since 0.0 == 0)
    for bad in (lambda: kvpack.page_encode(kivi_pp, k, v, ntok=float(P)),
                lambda: kvpack.page_encode(kivi_pp, k, v, dtype=0.0),
                lambda: kvpack.page_decode(kvpack.page_encode(kivi_pp, k, v), frame=1.0),
                lambda: kvpack.page_decode(kvpack.page_encode(kivi_pp, k, v), dtype=0.0)):
        raises(bad, ValueError)
    check(kvpack.page_encode(dataclasses.replace(kivi_pp, heads=Index(H)), k, v) ==
          kvpack.page_encode(kivi_pp, k, v), "PageParams with an __index__ head count")
    nan = array.array("f", k)
    nan[5] = float("nan")
    check(raises(lambda: kvpack.page_encode(kivi_pp, nan, v), kvpack.KvpError,
                 {"ERR_BAD_INPUT_DATA"}) is not None, "NaN input not refused")


def forked_use(handle, timeout_s=20):
    """In a forked child: a call on handle must raise ValueError (opened before the fork), then
    its close must return. The child's wait status, or None when it hung (killed)."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            try:
                handle.stat()
            except ValueError as e:
                code = 0 if "before a fork" in str(e) else 4
            handle.close()
        finally:
            os._exit(code)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            return st
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


class Node:
    def __init__(self, name, extra=()):
        self.ready = os.path.join(tmp, name + ".ready")
        self.proc = subprocess.Popen(
            [kvpackd, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, name),
             "--ready-file", self.ready, "--dram-budget", "64M", "--durability", "write-through",
             *extra], stdout=subprocess.DEVNULL, env=env)
        for _ in range(1500):  # the ready file appears once the node listens
            if os.path.exists(self.ready) and open(self.ready).read().strip():
                self.addr = "127.0.0.1:" + open(self.ready).read().strip()
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        sys.exit("kvpackd did not start")

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)


def cli(*args):
    p = subprocess.run([kvpack_exe, *args], capture_output=True, text=True, timeout=120, env=env)
    check(p.returncode == 0, f"kvpack {args[0]} exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def run_readme(addr):
    text = open(readme).read()
    m = re.search(r"## Python\n.*?```python\n(.*?)```", text, re.S)
    check(m is not None, "README has no Python example")
    code = m.group(1).replace("127.0.0.1:7070", addr)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    check(scope["info"]["codec"] == kvpack.CODEC_KIVI and len(scope["k2"]) == len(scope["k"]),
          "README example decoded something else")
    check(0 < rel_err(scope["k2"], scope["k"]) < 0.25, "README example: kivi error out of range")


def run_put_grace():
    """kvpackd --put-grace: B puts a shared page, C puts it with its record and is deleted; B's
    record still finds the page within the grace (1 s here), and is refused once it has passed."""
    node = Node("grace", ["--put-grace", "1"])
    try:
        ns = kvpack.ns_fingerprint("py-grace", 1, H, D, P, "kivi")
        k, v = values(P * H * D, 11), values(P * H * D, 12)
        with kvpack.Client(node.addr, timeout_ms=5000) as c:
            for rnd, wait_s in enumerate((0.0, 2.5)):
                key = kvpack.chunk_key(None, ns, range(rnd * P, (rnd + 1) * P))
                page = kvpack.page_encode(kvpack.PageParams("kivi", H, D, P, chunk_key=key),
                                          array.array("f", k), array.array("f", v))
                desc = kvpack.SessionDesc(1, P, [key], 0, [])
                c.put_pages(ns, [page])  # B: its pages first, its record later
                c.put_session(ns, f"c{rnd}", desc, [page])  # C: the same page with its record
                c.delete_session(ns, f"c{rnd}")
                time.sleep(wait_s)
                if wait_s == 0:
                    c.put_session(ns, f"b{rnd}", desc)
                    check(c.get_session(ns, f"b{rnd}").pages == [page],
                          "record within the put grace lost its page")
                    c.delete_session(ns, f"b{rnd}")
                else:
                    check(raises(lambda: c.put_session(ns, f"b{rnd}", desc), kvpack.KvpError,
                                 {"ERR_NOT_FOUND"}) is not None,
                          "--put-grace 1: a record 2.5 s after the page's last name still found it")
    finally:
        node.kill()


def run_node():
    run_put_grace()
    node = Node("n1")
    try:
        run_readme(node.addr)
        tail_tok = 50
        tokens = 2 * P + tail_tok
        k, v = values(L * tokens * H * D, 5), values(L * tokens * H * D, 6)
        ns = kvpack.ns_fingerprint("py", L, H, D, P, "kivi")
        keys, prev = [], None
        for c in range(2):
            prev = kvpack.chunk_key(prev, ns, range(c * P, (c + 1) * P))
            keys.append(prev)
        check(len(set(keys)) == 2 and keys[0] == kvpack.chunk_key(None, ns, range(P)),
              "chunk keys are not chained / deterministic")
        # sealed pages of the first 2 chunks; the tail from the last 50 tokens of each layer
        lay = [(array.array("f", k[i * tokens * H * D:(i + 1) * tokens * H * D]),
                array.array("f", v[i * tokens * H * D:(i + 1) * tokens * H * D])) for i in range(L)]
        pages = []
        for c in range(2):
            for layer in range(L):
                sl = slice(c * P * H * D, (c + 1) * P * H * D)
                pp = kvpack.PageParams("kivi", H, D, P, layer=layer, first_pos=c * P,
                                       chunk_key=keys[c])
                pages.append(kvpack.page_encode(pp, lay[layer][0][sl], lay[layer][1][sl]))
        tails = [kvpack.page_encode(
            kvpack.PageParams("fp16", H, D, P, layer=layer, first_pos=2 * P,
                              flags=kvpack.PAGE_F_TAIL),
            lay[layer][0][2 * P * H * D:], lay[layer][1][2 * P * H * D:]) for layer in range(L)]
        desc = kvpack.SessionDesc(L, P, keys, tail_tok, tails)
        with kvpack.Client(node.addr, timeout_ms=5000) as c:
            c.put_pages(ns, pages)
            c.put_session(ns, "py-1", desc)
            check(c.lookup(ns, keys, L) == 2, "lookup of both chunks")
            check(c.lookup(ns, [keys[0], kvpack.Key128(1, 2)], L) == 1, "lookup stops at a miss")
            got = c.get_session(ns, "py-1")
            check(got.pages == pages, "get_session pages differ from what was put")
            check(got.desc == desc, f"get_session record differs: {got.desc}")
            check(got.wire_bytes >= sum(map(len, pages)), f"wire_bytes {got.wire_bytes}")
            dk = kvpack.page_decode(got.desc.tail_pages[1])[0]
            check(dk == lay[1][0][2 * P * H * D:], "fp16 tail is not bit-exact")
            lst = c.list_sessions(page_size=1)
            mine = [s for s in lst.sessions if s.sid == "py-1"]
            check(len(mine) == 1 and mine[0].codec == "kivi" and mine[0].n_chunks == 2 and
                  mine[0].tail_tokens == tail_tok and mine[0].ns == ns,
                  f"list_sessions: {lst}")
            check(lst.requests >= len(lst.sessions), "page_size=1 took fewer LIST requests")
            st = c.stat()
            check(st.sessions >= 2 and st.dram_pages >= len(pages), f"stat {st}")
            c.spill(ns, "py-1")
            check(c.stat().spills >= 1, "spill not counted")
            back = c.get_session(ns, "py-1")
            check(back.pages == pages, "pages differ after spill + restore")
            check(back.disk_pages == len(pages) and back.disk_bytes >= sum(map(len, pages)),
                  f"restore not reported: {back.disk_pages} pages, {back.disk_bytes} bytes")
            check(c.get_session(ns, "py-1").disk_pages == 0, "a DRAM hit reports a disk read")
            runs = []
            got = c.get_session(ns, "py-1", on_pages=lambda first, pp: runs.append((first, pp)))
            flat = [p for _, pp in sorted(runs) for p in pp]
            check(flat == pages and got.pages == pages and runs[0][0] == 0,
                  f"get_session on_pages runs {[(f, len(pp)) for f, pp in runs]}")

            def boom(first, pp):
                raise RuntimeError("engine failed")
            check(isinstance(raises(lambda: c.get_session(ns, "py-1", on_pages=boom), RuntimeError),
                             RuntimeError), "an on_pages exception was not raised")
            # the handle itself from inside its own get's on_pages: refused, never run (a close
            # there freed the C handle under the get: SIGSEGV), and the handle works after it
            for inner in (c.close, lambda: c.stat(), lambda: c.get_session(ns, "py-1")):
                e = raises(lambda: c.get_session(ns, "py-1", on_pages=lambda f, pp: inner()),
                           RuntimeError)
                check(e is not None and "inside on_pages" in str(e), f"re-entry from on_pages: {e!r}")
            check(c.get_session(ns, "py-1").pages == pages, "the handle after a refused re-entry")

            # a corrupt page: KvpError CORRUPT from the node, and nothing lost
            bad = bytearray(pages[0])
            bad[300] ^= 1
            check(raises(lambda: c.put_pages(ns, [bad]), kvpack.KvpError, {"ERR_CORRUPT"})
                  is not None, "corrupt page accepted by the node")
            check(c.get_session(ns, "py-1").pages == pages, "corrupt put changed the session")
            # several bad pages: the status and the reason are the first one's, which is named
            # (the reason used to be the last bad page's: another geometry here)
            wide = kvpack.page_encode(kvpack.PageParams("kivi", 2 * H, D, P, chunk_key=kvpack.Key128(
                5, 6)), values(2 * H * D * P, 13), values(2 * H * D * P, 14))
            e = raises(lambda: c.put_pages(ns, [bad, pages[1], wide]), kvpack.KvpError,
                       {"ERR_CORRUPT"})
            check(e is not None and "page 0 of 3" in e.message and "checksum" in e.message,
                  f"the node's reason for 3 pages, the first corrupt: {e}")
            # ... and with the record: refused whole, the record not written
            check(raises(lambda: c.put_session(ns, "py-2", desc, pages=pages[:-1] + [bad]),
                         kvpack.KvpError, {"ERR_CORRUPT"}) is not None,
                  "put_session with a corrupt page accepted")
            raises(lambda: c.get_session(ns, "py-2"), kvpack.KvpError, {"ERR_NOT_FOUND"})
            # a streamed put, layer by layer (pages are chunk-major: layer l is pages[l::L])
            with kvpack.PutStream(node.addr, ns, timeout_ms=5000) as ps:
                for layer in range(L - 1):
                    ps.push([bytes(p) for p in pages[layer::L]])  # temporaries: kept alive
                ps.finish("py-stream", desc, pages=pages[L - 1::L])
                check(c.get_session(ns, "py-stream").pages == pages, "streamed session differs")
                ps.push(pages[0::L][:1] + [bad])
                e = raises(lambda: ps.finish("py-stream-bad", desc), kvpack.KvpError,
                           {"ERR_CORRUPT"})
                check(e is not None, "a streamed corrupt page was not reported by finish")
                raises(lambda: c.get_session(ns, "py-stream-bad"), kvpack.KvpError,
                       {"ERR_NOT_FOUND"})
            raises(lambda: ps.push(pages[:1]), ValueError)  # closed
            c.delete_session(ns, "py-stream")  # py-1 alone names these pages again
            raises(lambda: c.get_session(ns, "nope"), kvpack.KvpError, {"ERR_NOT_FOUND"})
            # a call the library refuses itself has no node reason (not the last call's)
            e = raises(lambda: c.put_pages(ns, [b""]), kvpack.KvpError, {"ERR_INVALID"})
            check(e is not None and "(node:" not in e.message, f"a local refusal: {e}")
            raises(lambda: c.put_session(ns, "x" * 128, desc), ValueError)
            # a session id that is not UTF-8 lists (with surrogate escapes) and round-trips
            c.put_session(ns, b"caf\xe9", desc)
            odd = [s.sid for s in c.list_sessions().sessions if s.sid.startswith("caf")]
            check(len(odd) == 1 and c.get_session(ns, odd[0]).pages == pages,
                  f"a non-UTF-8 session id lists as {odd}")
            c.delete_session(ns, odd[0])
            # the node's reason for a refusal reaches the KvpError
            e = raises(lambda: c.put_session(ns, "py-3", kvpack.SessionDesc(
                L, P, [kvpack.Key128(1, 2)])), kvpack.KvpError, {"ERR_NOT_FOUND"})
            check(e is not None and "not in the store" in e.message,
                  f"the node's reason is not in the error: {e}")
            # threads sharing one client take turns (two inside it at once aborted in UCX)
            errs = []

            def worker(i):
                try:
                    for _ in range(100):
                        c.put_session(ns, f"thr-{i}", desc)
                        if c.get_session(ns, f"thr-{i}").pages != pages:
                            errs.append(f"thread {i}: the pages differ")
                except Exception as e:  # noqa: BLE001 - reported as a failure
                    errs.append(f"thread {i}: {e!r}")
            ts = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            check(not errs, f"threads sharing a client: {errs[:3]}")
            for i in range(3):
                c.delete_session(ns, f"thr-{i}")

            # a fork: the child inherits the handle but not its connection. There it is
            # refused (ValueError) and closed without C (a destroy there used to abort the child
            # in UCX and break the parent's connection: its next get timed out)
            st = forked_use(c)
            check(st is not None and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0,
                  f"a forked child's use and close of the parent's client: status {st}")
            check(c.get_session(ns, "py-1").pages == pages, "the parent's client after a fork")
            # ... also forked while a thread is inside a call on it (the node stopped): the
            # child's copy of the handle's lock stays held, so its calls and close must not take
            # it (they hung)
            c2 = kvpack.Client(node.addr, timeout_ms=1500)
            os.kill(node.proc.pid, signal.SIGSTOP)

            def stat_stopped():
                try:
                    c2.stat()  # ERR_TIMEOUT, or its answer once the node goes on
                except kvpack.KvpError:
                    pass
            busy = threading.Thread(target=stat_stopped)
            busy.start()
            time.sleep(0.2)
            status = forked_use(c2)
            os.kill(node.proc.pid, signal.SIGCONT)
            busy.join()
            c2.close()
            check(status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
                  f"a child forked during a call on its handle: {'hung' if status is None else hex(status)}")
            # interpreter exit while a daemon thread is inside a call on a client (its node
            # stopped): the exit does not wait for it (the handle's finalizer waited forever on a
            # lock that thread never releases)
            prog = ("import sys, threading, time; sys.path.insert(0, sys.argv[1]); import kvptest; "
                    "kv = kvptest.load_kvpack(sys.argv[2]); c = kv.Client(sys.argv[3], timeout_ms=1500); "
                    "threading.Thread(target=lambda: c.list_sessions(), daemon=True).start(); "
                    "time.sleep(0.3)")
            os.kill(node.proc.pid, signal.SIGSTOP)
            try:
                p = subprocess.run([sys.executable, "-c", prog, os.path.dirname(os.path.dirname(
                    os.path.abspath(__file__))), lib, node.addr], capture_output=True, text=True,
                    timeout=60)
                check(p.returncode == 0, f"exit with a daemon thread in a call: {p.returncode} "
                      f"{p.stderr[-300:]}")
            except subprocess.TimeoutExpired:
                check(False, "the interpreter's exit hung on a daemon thread's call")
            finally:
                os.kill(node.proc.pid, signal.SIGCONT)

            # append: a decode's tokens onto a session's fp16 tail, full chunks sealed by the node
            nsa, g, row = kvpack.ns_fingerprint("append", L, H, D, P, "fp16"), (L, H, D, P), H * D
            ids = list(range(5000, 5000 + P + 3))
            k1, v1 = values(L * 3 * row, 9), values(L * 3 * row, 10)
            k2, v2 = values(L * P * row, 11), values(L * P * row, 12)
            check(c.append(nsa, "app", "fp16", g, k1, v1, ids[:3], 0) == 0,
                  "3 tokens sealed a chunk")
            check(c.append(nsa, "app", "fp16", g, k2, v2, ids, 3) == 1, "P more did not seal one")
            raises(lambda: c.append(nsa, "app", "fp16", g, k2, v2, ids, 3), kvpack.KvpError,
                   {"ERR_INVALID"})  # the same append again (a retry): the session is past it
            got = c.get_session(nsa, "app")
            check(got.desc.chunk_keys == [kvpack.chunk_key(None, nsa, ids[:P])] and
                  got.desc.tail_tokens == 3 and len(got.pages) == L, f"appended record {got.desc}")
            for layer in range(L):
                ek = k1[layer * 3 * row:(layer + 1) * 3 * row] + k2[layer * P * row:
                                                                    (layer * P + P - 3) * row]
                tk = k2[(layer * P + P - 3) * row:(layer + 1) * P * row]
                check(kvpack.page_decode(got.pages[layer])[0] == ek and
                      kvpack.page_decode(got.desc.tail_pages[layer])[0] == tk,
                      f"appended layer {layer}: the sealed page or the tail differs")
            raises(lambda: c.append(nsa, "app", "kivi", g, k1, v1, ids[P:], P + 3),
                   kvpack.KvpError, {"ERR_WRONG_CODEC"})
            raises(lambda: c.append(nsa, "app", "fp16", g, k1, v1[:-1], ids[P:], P + 3),
                   ValueError)
            check(c.get_session(nsa, "app").pages == got.pages, "a refused append changed it")

            # C CLI -> Python: `kvpack put` a .kvd, read it here, decode to eval's values
            kk, vv = values(L * T * H * D, 7), values(L * T * H * D, 8)
            write_kvd(os.path.join(tmp, "c.kvd"), kk, vv, L, T)
            out = cli("put", "--node", node.addr, "--session", "from-c", "--kvd",
                      os.path.join(tmp, "c.kvd"), "--codec", "kivi", "--json")
            ns_c = int(json.loads(out)["ns"], 16)
            check(ns_c == kvpack.ns_fingerprint("kvd", L, H, D, P, "kivi"),
                  "ns_fingerprint differs from the CLI's namespace")
            ours = pages_of(kk, vv, "kivi", L, T)
            theirs = c.get_session(ns_c, "from-c").pages
            check([kvpack.page_decode(x)[:2] for x in theirs] ==
                  [kvpack.page_decode(x)[:2] for x in ours], "CLI pages decode differently")

            # Python -> C CLI: an fp16 session put here, `kvpack get` writes the same .kvd
            ns16 = kvpack.ns_fingerprint("kvd", L, H, D, P, "fp16")
            keys16 = [kvpack.chunk_key(None, ns16, range(10 ** 6, 10 ** 6 + P))]
            keys16.append(kvpack.chunk_key(keys16[0], ns16, range(P)))
            c.put_session(ns16, "from-py", kvpack.SessionDesc(L, P, keys16),
                          pages=pages_of(kk, vv, "fp16", L, T, keys16))
            cli("get", "--node", node.addr, "--session", "from-py", "--ns", f"{ns16:016x}",
                "--out", os.path.join(tmp, "back.kvd"))
            check(open(os.path.join(tmp, "back.kvd"), "rb").read() ==
                  open(os.path.join(tmp, "c.kvd"), "rb").read(),
                  "kvpack get of a Python fp16 session is not bit-exact")

            c.delete_session(ns, "py-1")
            e = raises(lambda: c.get_session(ns, "py-1"), kvpack.KvpError, {"ERR_NOT_FOUND"})
            check(e is not None and e.status == -3, "get after delete is not NOT_FOUND")
            raises(lambda: c.delete_session(ns, "py-1"), kvpack.KvpError, {"ERR_NOT_FOUND"})
            check(c.lookup(ns, keys, L) == 0, "deleted session's pages still found")

            # the node dies under a live client: KvpError, not a hang
            node.kill()
            t0 = time.monotonic()
            e = raises(c.stat, kvpack.KvpError,
                       {"ERR_TIMEOUT", "ERR_PEER_GONE", "ERR_PEER_UNREACHABLE"})
            print(f"dead node: {e} after {time.monotonic() - t0:.2f} s")
            check(e is not None, "stat of a dead node")
        check(raises(c.stat, ValueError) is not None, "closed client still usable")
        c.close()  # a second close is a no-op
        t0 = time.monotonic()
        e = raises(lambda: kvpack.Client(node.addr, timeout_ms=2000).stat(), kvpack.KvpError,
                   {"ERR_TIMEOUT", "ERR_PEER_GONE", "ERR_PEER_UNREACHABLE"})
        print(f"new client to a dead node: {e} after {time.monotonic() - t0:.2f} s")
        check(e is not None, "client to a dead node")
    finally:
        node.kill()


try:
    run_codec() if mode == "codec" else run_node()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
if fails:
    sys.exit(f"{len(fails)} check(s) failed")
print("ok")
