"""kvpack.py - Python binding of libkvpack over ctypes (standard library only): the C API of
kvpack.h / codec.h / page.h / cluster.h without the kvp_ prefix (page_encode/decode, ns_fingerprint,
chunk_key, Client for one node, Cluster for several). A non-OK kvp_status_t raises KvpError(status, name, message); sizes and types are checked
before C is called (ValueError / TypeError); C memory a call receives is copied and freed in it.
Library: load(path), else $KVPACK_LIB, else <repo>/build*/lib/libkvpack.so beside this file.
"""
import array
import ctypes
import dataclasses
import functools
import glob
import operator
import os
import sys
import threading
import weakref

__all__ = ["KvpError", "load", "Key128", "PageParams", "SessionDesc", "SessionPages", "NodeStat",
           "SessionInfo", "SessionList", "Client", "PutStream", "Cluster", "ClusterPutStream", "ClusterSessionInfo",
           "ClusterSessionList", "page_encode", "page_decode", "page_parse",
           "page_max_bytes", "codec_name", "codec_from_name", "ns_fingerprint", "chunk_key",
           "status_name", "status_str", "version"]

DTYPE_F32, DTYPE_F16 = 0, 1                  # kvp_dtype_t
FRAME_ORIGINAL, FRAME_ROTATED = 0, 1         # kvp_frame_t
CODEC_FP16, CODEC_KIVI, CODEC_KIVI128, CODEC_OSCAR, CODEC_KVARN, CODEC_NAIVE2 = range(1, 7)
PAGE_F_K_ROTATED, PAGE_F_V_ROTATED, PAGE_F_PARTIAL = 1, 2, 4
PAGE_F_TAIL, PAGE_F_V_PREROT, PAGE_F_SINK = 8, 16, 32
SESSION_IN_DRAM, SESSION_ON_DISK = 1, 2
SID_MAX = 128                                # bytes including the NUL (KVP_SID_MAX)
_CLIENT_PARAM_SERVER, _CLIENT_PARAM_TIMEOUT_MS = 1, 2
_CLUSTER_PARAM_PEERS, _CLUSTER_PARAM_REPLICAS, _CLUSTER_PARAM_CLIENT = 1, 2, 4
_CLUSTER_PARAM_ETCD = 16
CLUSTER_MAX_NODES = 64                       # KVP_CLUSTER_MAX_NODES
ERR_INVALID, ERR_NOT_FOUND = -2, -3          # kvp_status_t values Cluster raises itself
ERR_PEER_UNREACHABLE = -40


class KvpError(Exception):
    """A non-OK kvp_status_t: status (the C value), name ("ERR_NOT_FOUND"), message. From a
    Cluster call also failed: [(node address, status name, stage)] of the nodes that failed, and
    ok_nodes: the nodes where it succeeded (e.g. a delete that reached some replicas only)."""
    failed = ()
    ok_nodes = ()

    def __init__(self, status, name, message, what=""):
        self.status, self.name, self.message, self.what = status, name, message, what
        super().__init__(f"{what + ': ' if what else ''}{name} ({status}): {message}")

    def __reduce__(self):  # pickles (multiprocessing): its arguments, then failed and ok_nodes
        return (type(self), (self.status, self.name, self.message, self.what),
                {"failed": list(self.failed), "ok_nodes": list(self.ok_nodes)})


# ---- C types (layouts of kvpack.h, codec.h, page.h) ----
class Key128(ctypes.Structure):
    """kvp_key128_t: a 128-bit chunk key; compares and hashes by value."""
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64)]

    def __init__(self, lo=0, hi=0):
        super().__init__(_u(lo, "Key128.lo", 64), _u(hi, "Key128.hi", 64))

    def _t(self):
        return (self.lo, self.hi)

    def __eq__(self, other):
        return isinstance(other, Key128) and self._t() == other._t()

    def __hash__(self):
        return hash(self._t())

    def __repr__(self):
        return f"Key128(lo=0x{self.lo:016x}, hi=0x{self.hi:016x})"


class _PageParams(ctypes.Structure):
    _fields_ = [("codec", ctypes.c_int), ("heads", ctypes.c_uint32),
                ("head_dim", ctypes.c_uint32), ("page_tokens", ctypes.c_uint32),
                ("layer", ctypes.c_uint32), ("first_pos", ctypes.c_uint64),
                ("chunk_key", Key128), ("flags", ctypes.c_uint32),
                ("kvarn_iters", ctypes.c_uint32)]


_INFO_U32 = ["version", "codec", "flags", "bits_k", "bits_v", "group_k", "group_v", "valid",
             "capacity", "heads", "head_dim", "layer"]


class _PageInfo(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_uint32) for n in _INFO_U32] +
                [("first_pos", ctypes.c_uint64), ("chunk_key", Key128),
                 ("payload_len", ctypes.c_uint32), ("aux", ctypes.c_uint32),
                 ("crc", ctypes.c_uint32)])


class _SessionDesc(ctypes.Structure):
    _fields_ = [("layers", ctypes.c_uint32), ("page_tokens", ctypes.c_uint32),
                ("n_chunks", ctypes.c_uint32), ("chunk_keys", ctypes.POINTER(Key128)),
                ("tail_tokens", ctypes.c_uint32), ("n_tail", ctypes.c_uint32),
                ("tail_len", ctypes.c_size_t), ("tail", ctypes.POINTER(ctypes.c_uint8))]


class _SessionPages(ctypes.Structure):
    _fields_ = [("desc", _SessionDesc), ("n_pages", ctypes.c_uint32),
                ("pages", ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8))),
                ("page_lens", ctypes.POINTER(ctypes.c_size_t)), ("wire_bytes", ctypes.c_uint64),
                ("version", ctypes.c_uint64), ("disk_pages", ctypes.c_uint32),
                ("disk_bytes", ctypes.c_uint64)]


class _ClientParams(ctypes.Structure):
    _fields_ = [("field_mask", ctypes.c_uint64), ("server", ctypes.c_char_p),
                ("timeout_ms", ctypes.c_uint32), ("batch_bytes", ctypes.c_size_t),
                ("max_inflight", ctypes.c_uint32)]


class _Append(ctypes.Structure):
    _fields_ = [("codec", ctypes.c_int), ("ns_fingerprint", ctypes.c_uint64),
                ("layers", ctypes.c_uint32), ("heads", ctypes.c_uint32),
                ("head_dim", ctypes.c_uint32), ("page_tokens", ctypes.c_uint32),
                ("dtype", ctypes.c_int), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("ntok", ctypes.c_uint32), ("ids", ctypes.POINTER(ctypes.c_uint32)),
                ("n_ids", ctypes.c_uint32), ("first_pos", ctypes.c_uint64)]


_STAT_FIELDS = ["dram_bytes", "dram_pages", "dram_budget", "sessions", "sessions_on_disk",
                "spills", "restores", "crc_failures", "disk_errors", "uptime_ms", "disk_bytes",
                "disk_live_bytes", "requests", "bad_requests", "index_rebuilds",
                "wal_dropped_bytes", "disk_free_bytes", "disk_full_refusals", "connections",
                "connections_max", "connections_rejected"]


class _NodeStat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in _STAT_FIELDS]


class _ScrubResult(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint64), ("bad_pages", ctypes.c_uint64),
                ("elapsed_ms", ctypes.c_uint64), ("index_rebuilt", ctypes.c_uint32)]


def _scrub_dict(r):
    """kvp_scrub_result_t as Client.scrub and Cluster.scrub return it."""
    return {"bytes": r.bytes, "bad_pages": r.bad_pages, "index_rebuilt": bool(r.index_rebuilt),
            "elapsed_ms": r.elapsed_ms}


class _SessionInfo(ctypes.Structure):
    _fields_ = [("ns", ctypes.c_uint64), ("sid", ctypes.c_char * SID_MAX),
                ("layers", ctypes.c_uint32), ("page_tokens", ctypes.c_uint32),
                ("n_chunks", ctypes.c_uint32), ("tail_tokens", ctypes.c_uint32),
                ("codec", ctypes.c_int), ("heads", ctypes.c_uint32),
                ("head_dim", ctypes.c_uint32), ("where", ctypes.c_uint32),
                ("bytes", ctypes.c_uint64), ("version", ctypes.c_uint64),
                ("deleted", ctypes.c_uint32), ("damaged", ctypes.c_uint32)]


class _SessionList(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("sessions", ctypes.POINTER(_SessionInfo)),
                ("truncated", ctypes.c_int), ("requests", ctypes.c_uint32)]


# cluster.h
class _ClusterParams(ctypes.Structure):
    _fields_ = [("field_mask", ctypes.c_uint64), ("peers", ctypes.c_char_p),
                ("replicas", ctypes.c_uint32), ("client", ctypes.POINTER(_ClientParams)),
                ("progress_cb", ctypes.c_void_p), ("progress_arg", ctypes.c_void_p),
                ("etcd", ctypes.c_char_p), ("etcd_prefix", ctypes.c_char_p)]


class _ClusterTry(ctypes.Structure):
    _fields_ = [("node", ctypes.c_uint32), ("status", ctypes.c_int),
                ("stage", ctypes.c_char_p)]


class _ClusterReport(ctypes.Structure):
    _fields_ = [("n_tried", ctypes.c_uint32), ("tried", _ClusterTry * CLUSTER_MAX_NODES),
                ("n_ok", ctypes.c_uint32), ("served_by", ctypes.c_uint32)]


class _ClusterList(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("sessions", ctypes.POINTER(_SessionInfo)),
                ("holders", ctypes.POINTER(ctypes.c_uint64)),
                ("damaged", ctypes.POINTER(ctypes.c_uint64)), ("truncated", ctypes.c_int),
                ("requests", ctypes.c_uint32), ("stride", ctypes.c_uint32),
                ("versions", ctypes.POINTER(ctypes.c_uint64)),
                ("deleted", ctypes.POINTER(ctypes.c_uint64)),
                ("on_disk", ctypes.POINTER(ctypes.c_uint64))]


# ---- Python-side values ----
@dataclasses.dataclass
class PageParams:
    """kvp_page_params_t; codec is a name ("kivi") or a CODEC_* id."""
    codec: object
    heads: int
    head_dim: int
    page_tokens: int
    layer: int = 0
    first_pos: int = 0
    chunk_key: Key128 = dataclasses.field(default_factory=Key128)
    flags: int = 0
    kvarn_iters: int = 0

    def _c(self):
        if not isinstance(self.chunk_key, Key128):
            raise TypeError(f"chunk_key must be a Key128, got {type(self.chunk_key).__name__}")
        flags, iters = _u(self.flags, "flags"), _u(self.kvarn_iters, "kvarn_iters")
        nums = (_u(self.heads, "heads"), _u(self.head_dim, "head_dim"),
                _u(self.page_tokens, "page_tokens"), _u(self.layer, "layer", 16),
                _u(self.first_pos, "first_pos", 64))
        return _PageParams(_codec_id(self.codec), *nums, self.chunk_key, flags, iters)


@dataclasses.dataclass
class SessionDesc:
    """kvp_session_desc_t: ordered chunk keys and the fp16 tail pages (none, or one per layer)."""
    layers: int
    page_tokens: int
    chunk_keys: list
    tail_tokens: int = 0
    tail_pages: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SessionPages:
    """kvp_session_pages_t: the record and every page (bytes), pages[chunk * layers + layer];
    served_by: the node (HOST:PORT) that served it, from Cluster.get_session (else None);
    disk_pages / disk_bytes: what that node read back from its SSD tier for this get (0: DRAM)."""
    desc: SessionDesc
    pages: list
    wire_bytes: int
    served_by: str = None
    version: int = 0
    disk_pages: int = 0
    disk_bytes: int = 0


NodeStat = dataclasses.make_dataclass("NodeStat", [(n, int) for n in _STAT_FIELDS])
NodeStat.__doc__ = "kvp_node_stat_t, as reported by STAT."


@dataclasses.dataclass
class SessionInfo:
    """kvp_session_info_t; codec is its name ("" while the namespace has no sealed page)."""
    ns: int
    sid: str
    layers: int
    page_tokens: int
    n_chunks: int
    tail_tokens: int
    codec: str
    heads: int
    head_dim: int
    where: int
    bytes: int
    version: int = 0      # the record's version (ns since the epoch; 0: written before versions)
    damaged: bool = False  # the node lost a page it names: ERR_CORRUPT there until put again


@dataclasses.dataclass
class SessionList:
    """kvp_session_list_t."""
    sessions: list
    truncated: bool
    requests: int


@dataclasses.dataclass
class ClusterSessionInfo(SessionInfo):
    """A SessionInfo of a Cluster list (the lowest-indexed holder's) and nodes: every node
    (HOST:PORT, peer-list order) that listed it; damaged_nodes: those whose copy is damaged."""
    nodes: list = dataclasses.field(default_factory=list)
    damaged_nodes: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ClusterSessionList:
    """kvp_cluster_list_t: the union of the nodes' lists in (ns, sid) order, each session once;
    unreachable: [(node, status name)] of the nodes that did not answer."""
    sessions: list
    truncated: bool
    requests: int
    unreachable: list


# ---- the library ----
_lib = None
# kvp_client_pages_cb_t: (cb_arg, first, n, pages, lens)
_PAGES_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))


def _declare(lib):
    c = ctypes
    u32, u64, sz, st, vp = c.c_uint32, c.c_uint64, c.c_size_t, c.c_int, c.c_void_p
    P = c.POINTER
    sigs = {
        "kvp_status_str": (c.c_char_p, [st]), "kvp_status_name": (c.c_char_p, [st]),
        "kvp_version": (c.c_char_p, []),
        "kvp_codec_name": (c.c_char_p, [c.c_int]),
        "kvp_codec_from_name": (st, [c.c_char_p, P(c.c_int)]),
        "kvp_codec_check": (st, [P(_PageParams)]),
        "kvp_page_max_bytes": (sz, [P(_PageParams)]),
        "kvp_page_encode": (st, [P(_PageParams), c.c_int, vp, vp, u32, vp, sz, P(sz)]),
        "kvp_page_decode": (st, [vp, sz, c.c_int, c.c_int, vp, vp, P(_PageInfo)]),
        "kvp_page_parse": (st, [vp, sz, P(_PageInfo)]),
        "kvp_ns_fingerprint": (u64, [c.c_char_p, u32, u32, u32, u32, c.c_int]),
        "kvp_chunk_key": (Key128, [P(Key128), u64, P(u32), sz]),
        "kvp_client_create": (st, [P(_ClientParams), P(vp)]),
        "kvp_client_destroy": (None, [vp]),
        "kvp_client_node_message": (c.c_char_p, [vp]),
        "kvp_client_put_pages": (st, [vp, u64, P(vp), P(sz), sz]),
        "kvp_client_put_session": (st, [vp, u64, c.c_char_p, P(_SessionDesc)]),
        "kvp_client_put_session_pages": (st, [vp, u64, c.c_char_p, P(_SessionDesc), P(vp), P(sz),
                                              sz, u64]),
        "kvp_version_now": (u64, []),
        "kvp_put_stream_open": (st, [P(_ClientParams), u64, P(vp)]),
        "kvp_put_stream_push": (st, [vp, P(vp), P(sz), sz]),
        "kvp_put_stream_finish": (st, [vp, c.c_char_p, P(_SessionDesc), P(vp), P(sz), sz, u64]),
        "kvp_put_stream_close": (None, [vp]),
        "kvp_client_get_session": (st, [vp, u64, c.c_char_p, P(P(_SessionPages))]),
        "kvp_client_get_session_cb": (st, [vp, u64, c.c_char_p, P(_PageParams), _PAGES_CB, vp,
                                           P(P(_SessionPages))]),
        "kvp_session_pages_free": (None, [P(_SessionPages)]),
        "kvp_client_lookup": (st, [vp, u64, P(Key128), u32, u32, P(u32)]),
        "kvp_client_append": (st, [vp, u64, c.c_char_p, P(_Append), P(u32)]),
        "kvp_cluster_append": (st, [vp, u64, c.c_char_p, P(_Append), u32, P(u32),
                                    P(_ClusterReport)]),
        "kvp_client_spill": (st, [vp, u64, c.c_char_p]),
        "kvp_client_stat": (st, [vp, P(_NodeStat)]),
        "kvp_client_scrub": (st, [vp, P(_ScrubResult)]),
        "kvp_client_delete_session": (st, [vp, u64, c.c_char_p]),
        "kvp_client_list_sessions": (st, [vp, u32, u32, P(P(_SessionList))]),
        "kvp_session_list_free": (None, [P(_SessionList)]),
        "kvp_free": (None, [vp]),
        "kvp_cluster_create": (st, [P(_ClusterParams), P(vp)]),
        "kvp_cluster_destroy": (None, [vp]),
        "kvp_cluster_size": (u32, [vp]), "kvp_cluster_replicas": (u32, [vp]),
        "kvp_cluster_sync": (st, [vp, P(u64)]),
        "kvp_cluster_peer": (c.c_char_p, [vp, u32]),
        "kvp_cluster_rank": (st, [vp, u64, c.c_char_p, P(u32)]),
        "kvp_cluster_put_session": (st, [vp, u64, c.c_char_p, P(vp), P(sz), sz,
                                         P(_SessionDesc), P(_ClusterReport)]),
        "kvp_cluster_get_session": (st, [vp, u64, c.c_char_p, P(_PageParams),
                                         P(P(_SessionPages)), P(_ClusterReport)]),
        "kvp_cluster_get_session_cb": (st, [vp, u64, c.c_char_p, P(_PageParams), _PAGES_CB, vp,
                                            P(P(_SessionPages)), P(_ClusterReport)]),
        "kvp_cluster_get_session_latest": (st, [vp, u64, c.c_char_p, P(_PageParams), _PAGES_CB,
                                                vp, P(P(_SessionPages)), P(_ClusterReport)]),
        "kvp_cluster_delete_session": (st, [vp, u64, c.c_char_p, P(_ClusterReport)]),
        "kvp_cluster_list_sessions": (st, [vp, u32, u32, P(P(_ClusterList)),
                                           P(_ClusterReport)]),
        "kvp_cluster_list_free": (None, [P(_ClusterList)]),
        "kvp_cluster_stat": (st, [vp, u32, P(_NodeStat)]),
        "kvp_cluster_scrub": (st, [vp, u32, P(_ScrubResult)]),
        "kvp_cluster_stream_open": (st, [vp, u64, c.c_char_p, c.c_char_p, P(vp)]),
        "kvp_cluster_stream_push": (st, [vp, P(vp), P(sz), sz]),
        "kvp_cluster_stream_finish": (st, [vp, P(_SessionDesc), P(vp), P(sz), sz,
                                           P(_ClusterReport), P(st)]),
        "kvp_cluster_stream_close": (None, [vp]),
        "kvp_cluster_peers_etcd": (st, [c.c_char_p, c.c_char_p, P(vp), P(u32)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def load(path=None):
    """Load libkvpack.so from path, else $KVPACK_LIB, else <repo>/build*/lib/ beside this file.
    Returns the ctypes library; raises OSError naming every place it looked."""
    global _lib
    if path is None and _lib is not None:
        return _lib
    tried = []
    if path is not None:
        tried.append(path)
    elif os.environ.get("KVPACK_LIB"):
        tried.append(os.environ["KVPACK_LIB"])
    else:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        tried += sorted(glob.glob(os.path.join(repo, "build*", "lib", "libkvpack.so")))
        tried = tried or [os.path.join(repo, "build*", "lib", "libkvpack.so")]
    for cand in tried:
        if os.path.isfile(cand):
            lib = ctypes.CDLL(os.path.abspath(cand))
            _declare(lib)
            _lib = lib
            return lib
    raise OSError("kvpack: libkvpack.so not found (looked at " + ", ".join(tried) +
                  "); build the kvpack_shared target or set KVPACK_LIB")


def _L():
    return _lib if _lib is not None else load()


def version():
    """The loaded libkvpack's version ("0.1.0"), as `kvpack --version` prints it."""
    return _L().kvp_version().decode()


def status_name(status):
    n = _i32(status, "status")
    return _L().kvp_status_name(n).decode()


def status_str(status):
    n = _i32(status, "status")
    return _L().kvp_status_str(n).decode()


def _check(status, what=""):
    if status != 0:
        raise KvpError(status, status_name(status), status_str(status), what)


_finalizing = sys.is_finalizing  # bound at import: __del__ may run when imports no longer work


# ---- argument checks (before C is called) ----
def _u(value, what, bits=32):
    """value as an int in 0..2^bits-1 (any integer type, numpy's too; not bool or float)."""
    n = _int(value)
    if n is None or not 0 <= n < (1 << bits):
        raise ValueError(f"{what} must be an integer in 0..2^{bits}-1, got {value!r}")
    return n


def _int(value):
    """value as an int (any integer type, numpy's too; not bool or float), else None."""
    try:
        return operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        return None


def _i32(value, what):
    """value as an int in -2^31..2^31-1 (a C int: ctypes would wrap a larger one silently)."""
    n = _int(value)
    if n is None or not -(1 << 31) <= n < (1 << 31):
        raise ValueError(f"{what} must be an integer in -2^31..2^31-1, got {value!r}")
    return n


def _text(value, what):
    """str (UTF-8) or bytes as bytes without NUL: ctypes' char* would stop at a NUL silently."""
    b = value if isinstance(value, bytes) else str(value).encode()
    if b"\0" in b:
        raise ValueError(f"{what} must not contain NUL, got {value!r}")
    return b


def _sid(sid):
    """Session id bytes; a str with bytes that are not UTF-8 (as list_sessions gives them, with
    surrogate escapes) turns back into those bytes."""
    b = sid.encode(errors="surrogateescape") if isinstance(sid, str) else bytes(sid)
    if not b or len(b) >= SID_MAX or b"\0" in b:
        raise ValueError(f"session id must be 1..{SID_MAX - 1} bytes without NUL, got {sid!r}")
    return b


def _codec_id(codec):
    return codec_from_name(codec) if isinstance(codec, (str, bytes)) else _u(codec, "codec")


def _buf(obj, what):
    """(C buffer over obj's bytes, nbytes, memoryview format): bytes as they are (immutable, C
    only reads them), a writable buffer in place, another read-only one copied."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what} must support the buffer protocol, got {type(obj).__name__}")
    if not mv.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    n, fmt = mv.nbytes, mv.format.lstrip("@=<")
    if n == 0:
        return (ctypes.c_char * 1)(), 0, fmt
    if type(obj) is bytes:
        return obj, n, fmt
    if mv.readonly:
        return (ctypes.c_char * n).from_buffer_copy(mv), n, fmt
    return (ctypes.c_char * n).from_buffer(mv), n, fmt


def _dtype(dtype, fmt, what):
    """DTYPE_F32/F16 from dtype ("f32", "f16", an id, or None) and the buffer format."""
    by_fmt = {"f": DTYPE_F32, "e": DTYPE_F16, "H": DTYPE_F16}
    names = {"f32": DTYPE_F32, "f16": DTYPE_F16, DTYPE_F32: DTYPE_F32, DTYPE_F16: DTYPE_F16}
    if dtype is None:
        if fmt not in by_fmt:
            raise ValueError(f"{what}: format '{fmt}' is not float32 or float16: convert it, "
                             f"or give raw bytes with dtype='f32' or 'f16'")
        return by_fmt[fmt]
    if dtype not in names or not (isinstance(dtype, str) or _int(dtype) is not None):
        raise ValueError(f"dtype must be 'f32' or 'f16', got {dtype!r}")  # 0.0 == 0: not an id
    if fmt in by_fmt and by_fmt[fmt] != names[dtype]:
        raise ValueError(f"{what}: format '{fmt}' does not hold {dtype}")
    if fmt not in by_fmt and fmt not in ("B", "b", "c"):  # raw bytes only: not f64, ints, '>f'
        raise ValueError(f"{what}: format '{fmt}' is not {dtype}: give float32 ('f'), float16 "
                         f"('e' or 'H' bits) or raw bytes")
    return names[dtype]


# ---- codecs and pages ----
def codec_name(codec_id):
    n = _i32(codec_id, "codec_id")
    return _L().kvp_codec_name(n).decode()


def codec_from_name(name):
    out = ctypes.c_int()
    b = _text(name, "codec name")
    _check(_L().kvp_codec_from_name(b, ctypes.byref(out)), f"codec '{name}'")
    return out.value


def page_max_bytes(params):
    """Bytes of a full page for these PageParams; KvpError when the codec rejects the geometry."""
    p = params._c()
    _check(_L().kvp_codec_check(ctypes.byref(p)), "page params")
    return _L().kvp_page_max_bytes(ctypes.byref(p))


def page_encode(params, k, v, ntok=None, dtype=None):
    """Encode ntok tokens of K and V ([ntok][heads][head_dim], fp32 or fp16 bits, any buffer of
    exactly that size) into one page; returns its bytes. ntok defaults to what the buffers hold."""
    kb, kn, kf = _buf(k, "k")
    vb, vn, vf = _buf(v, "v")
    dt = _dtype(dtype, kf, "k")
    if _dtype(dtype, vf, "v") != dt:
        raise ValueError("k and v have different dtypes")
    heads, head_dim, ptok = (_u(getattr(params, f), f) for f in ("heads", "head_dim",
                                                                   "page_tokens"))
    row = heads * head_dim * (4 if dt == DTYPE_F32 else 2)
    if ntok is None:
        if not row or kn % row:
            raise ValueError(f"k holds {kn} bytes, not a whole number of {row}-byte tokens")
        ntok = kn // row
    ntok = _u(ntok, "ntok")
    if not row or not 1 <= ntok <= ptok or kn != ntok * row or vn != ntok * row:
        raise ValueError(f"k and v must be {ntok} tokens x {row} bytes each (ntok 1.."
                         f"{ptok}), got {kn} and {vn} bytes")
    cap = page_max_bytes(params)
    out = ctypes.create_string_buffer(cap)
    n = ctypes.c_size_t()
    p = params._c()
    _check(_L().kvp_page_encode(ctypes.byref(p), dt, kb, vb, ntok, out, cap, ctypes.byref(n)),
           "page_encode")
    return out.raw[:n.value]


def _append_c(ns, codec, geometry, k, v, ids, fingerprint, dtype, first_pos=0):
    """An append's kvp_append_t (Client.append, Cluster.append) and what it points into."""
    layers, heads, head_dim, page_tokens = (_u(x, "geometry") for x in geometry)
    kb, kn, kf = _buf(k, "k")
    vb, vn, vf = _buf(v, "v")
    dt = _dtype(dtype, kf, "k")
    if _dtype(dtype, vf, "v") != dt:
        raise ValueError("k and v have different dtypes")
    row = layers * heads * head_dim * (4 if dt == DTYPE_F32 else 2)
    if not row or kn % row or kn != vn or kn == 0:
        raise ValueError(f"k and v must be the same whole number of {row}-byte tokens "
                         f"(every layer), got {kn} and {vn} bytes")
    ids_c = (ctypes.c_uint32 * max(1, len(ids)))(*[_u(i, "id") for i in ids])
    a = _Append(_codec_id(codec), _u(ns if fingerprint is None else fingerprint,
                                     "fingerprint", 64), layers, heads, head_dim,
                page_tokens, dt, ctypes.cast(kb, ctypes.c_void_p),
                ctypes.cast(vb, ctypes.c_void_p), kn // row, ids_c, len(ids),
                _u(first_pos, "first_pos", 64))
    return a, (kb, vb, ids_c)


def _info(c):
    d = {n: getattr(c, n) for n in _INFO_U32 + ["first_pos", "payload_len", "aux", "crc"]}
    d["chunk_key"] = Key128(c.chunk_key.lo, c.chunk_key.hi)
    return d


def page_parse(page):
    """Validate a page (every header field, then the CRC) and return its header as a dict."""
    pb, pn, _ = _buf(page, "page")
    info = _PageInfo()
    _check(_L().kvp_page_parse(pb, pn, ctypes.byref(info)), "page_parse")
    return _info(info)


def page_decode(page, dtype="f32", frame=FRAME_ORIGINAL):
    """Verify and decode a page: (k, v, info), k and v [valid][heads][head_dim] as array('f')
    (f32) or array('H') of IEEE half bits (f16); info as page_parse returns it."""
    if dtype not in ("f32", "f16", DTYPE_F32, DTYPE_F16) or isinstance(dtype, bool):
        raise ValueError(f"dtype must be 'f32' or 'f16', got {dtype!r}")
    dt = _dtype(dtype, "B", "dtype")
    if _int(frame) not in (FRAME_ORIGINAL, FRAME_ROTATED):  # ctypes: 2**40 wraps, 1.0 raises
        raise ValueError(f"frame must be FRAME_ORIGINAL or FRAME_ROTATED, got {frame!r}")
    pb, pn, _ = _buf(page, "page")
    info = _PageInfo()
    _check(_L().kvp_page_parse(pb, pn, ctypes.byref(info)), "page_decode")
    count = info.valid * info.heads * info.head_dim
    k = array.array("f" if dt == DTYPE_F32 else "H", bytes(count * (4 if dt == DTYPE_F32 else 2)))
    v = array.array(k.typecode, k)
    kp, vp = k.buffer_info()[0], v.buffer_info()[0]
    _check(_L().kvp_page_decode(pb, pn, dt, frame, kp, vp, ctypes.byref(info)), "page_decode")
    return k, v, _info(info)


def ns_fingerprint(model_id, layers, heads, head_dim, page_tokens, codec):
    """64-bit namespace of (model id, geometry, P, codec); codec a name or id."""
    args = (_text(model_id, "model_id"), _u(layers, "layers"), _u(heads, "heads"),
            _u(head_dim, "head_dim"), _u(page_tokens, "page_tokens"), _codec_id(codec))
    return _L().kvp_ns_fingerprint(*args)


def chunk_key(prev, ns, tokens):
    """Key of a chunk: XXH3-128 over (prev key or None, ns, the uint32 token ids)."""
    ns = _u(ns, "ns", 64)
    ids = array.array("I", [_u(t, "token id") for t in tokens])
    ptr = ids.buffer_info()[0] if ids else None
    prev_p = ctypes.byref(prev) if prev is not None else None
    key = _L().kvp_chunk_key(prev_p, ns,
                             ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint32)), len(ids))
    return Key128(key.lo, key.hi)


def _keys(keys):
    arr = (Key128 * max(len(keys), 1))()
    for i, key in enumerate(keys):
        if not isinstance(key, Key128):
            raise TypeError(f"chunk key {i} must be a Key128, got {type(key).__name__}")
        arr[i] = key
    return arr


def _page_array(pages):
    """(ptr array, len array, n, keep-alive) over a list of page buffers."""
    bufs = [_buf(p, f"page {i}") for i, p in enumerate(pages)]
    n = len(bufs)
    ptrs = (ctypes.c_void_p * max(n, 1))(*[ctypes.cast(b[0], ctypes.c_void_p).value for b in bufs])
    lens = (ctypes.c_size_t * max(n, 1))(*[b[1] for b in bufs])
    return ptrs, lens, n, bufs


def _desc_c(desc):
    """(_SessionDesc, keep-alive) for a SessionDesc; ValueError on a wrong tail count."""
    if desc.tail_pages and len(desc.tail_pages) != desc.layers:
        raise ValueError(f"tail_pages: need 0 or {desc.layers} (layers), "
                         f"got {len(desc.tail_pages)}")
    tail = b"".join(bytes(memoryview(p)) for p in desc.tail_pages)
    tail_buf = (ctypes.c_uint8 * max(len(tail), 1)).from_buffer_copy(tail or b"\0")
    keys = _keys(desc.chunk_keys)
    c = _SessionDesc(_u(desc.layers, "layers"), _u(desc.page_tokens, "page_tokens"),
                     len(desc.chunk_keys), keys, _u(desc.tail_tokens, "tail_tokens"),
                     len(desc.tail_pages), len(tail), tail_buf)
    return c, (tail_buf, keys)


def _pages_take(out):
    """SessionPages copied from a kvp_session_pages_t*, which is then freed."""
    try:
        sp = out.contents
        d = sp.desc
        tail = ctypes.string_at(d.tail, d.tail_len) if d.tail_len else b""
        each = d.tail_len // d.n_tail if d.n_tail else 0
        desc = SessionDesc(d.layers, d.page_tokens,
                           [Key128(d.chunk_keys[i].lo, d.chunk_keys[i].hi)
                            for i in range(d.n_chunks)], d.tail_tokens,
                           [tail[i * each:(i + 1) * each] for i in range(d.n_tail)])
        pages = [ctypes.string_at(sp.pages[i], sp.page_lens[i]) for i in range(sp.n_pages)]
        return SessionPages(desc, pages, sp.wire_bytes, version=sp.version,
                            disk_pages=sp.disk_pages, disk_bytes=sp.disk_bytes)
    finally:
        _L().kvp_session_pages_free(out)


def _info_py(s, cls=None, **extra):
    """SessionInfo (or cls, with extra fields) from a _SessionInfo."""
    return (cls or SessionInfo)(s.ns, s.sid.decode(errors="surrogateescape"), s.layers, s.page_tokens, s.n_chunks,
                                s.tail_tokens, codec_name(s.codec) if s.codec else "", s.heads,
                                s.head_dim, s.where, s.bytes, s.version, bool(s.damaged),
                                **extra)


def _with_pages_cb(owner, on_pages, out, call):
    """call(cb) with cb a C pages callback that hands on_pages(first, [bytes]) each run; an
    exception in on_pages stops the hand-over (the get completes) and is raised here, freeing
    what the get returned. Returns call's status. While it runs, owner (the Client or Cluster
    making the get) refuses its own methods from inside on_pages (RuntimeError, raised here):
    the C handle is in the middle of this call, and a close there freed it under the get."""
    raised = []

    def run(_arg, first, n, pages, lens):
        if raised:
            return
        try:
            on_pages(first, [ctypes.string_at(pages[i], lens[i]) for i in range(n)])
        except BaseException as e:  # noqa: BLE001 - re-raised after the C call returns
            raised.append(e)

    owner._guard[0] = threading.get_ident()  # the thread inside on_pages (others wait on the lock)
    try:
        status = call(_PAGES_CB(run))
    finally:
        owner._guard[0] = None
        owner._close_parked()
    if raised:
        if status == 0:
            _L().kvp_session_pages_free(out)
        raise raised[0]
    return status


def _serial(method):
    """method, run holding its object's lock. ctypes lets go of the GIL inside C, and a C handle
    takes one thread at a time (kvpack.h), so Python threads sharing a Client, a Cluster or a
    stream take turns instead of entering it together (which aborts in UCX)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if self._pid != os.getpid():  # before the lock: the parent's thread that held it at the
            return self._forked(method.__name__)  # fork does not run here (it hung the child)
        with self._lock:
            if self._guard[0] == threading.get_ident():  # inside its own get's on_pages
                raise RuntimeError(f"kvpack: {method.__name__}() from inside on_pages of a get "
                                   "on the same handle")
            return method(self, *args, **kwargs)
    return run


class _Handle:
    """Shared life cycle of Client and Cluster: close() once, context manager, closed check, and
    the lock (_serial) its public methods hold, so threads may share one."""
    _h = None
    _destroy = ""

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls)
        obj._lock = threading.RLock()
        obj._guard = [None]  # [the thread inside a get's on_pages]: shared, as the lock, with
        #                      its streams
        obj._parked = []      # (destroy, handle, kept buffers) of streams dropped in on_pages
        obj._pid = os.getpid()  # a handle belongs to the process that opened it (see close)
        return obj

    def __copy__(self):  # a copy would share the C handle and destroy it twice
        raise TypeError(f"kvpack {type(self).__name__} cannot be copied: it owns a C handle")

    __deepcopy__ = __reduce__ = lambda self, *a: self.__copy__()  # noqa: E731

    @_serial
    def close(self):
        """Destroy the C handle, once; later calls are no-ops. In a process forked after the
        handle was opened it is only forgotten (_serial, _forked): the C handle (its UCX worker,
        its sockets) is the parent's, and destroying it there broke the parent's connection and
        aborted both."""
        if self._h is not None:
            h, self._h = self._h, None
            getattr(_L(), self._destroy)(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h is None or self._pid != os.getpid():
                self._h = None  # closed, or the parent's (inherited over a fork): see close
                return
            if _finalizing():
                # interpreter exit while a daemon thread is inside a call on this handle: that
                # thread never returns to release the lock, so waiting for it hung the exit
                if not self._lock.acquire(blocking=False):
                    return
                self._lock.release()  # close takes it again; no other thread runs meanwhile
            if self._h is not None and self._guard[0] == threading.get_ident():
                # dropped inside on_pages of a get on the handle it shares: that get holds the
                # handle, so its close waits for the get to return (_close_parked); its buffers
                # stay alive until then, since its shipping threads still read them. Another
                # thread's close just waits on the lock for the get to end.
                self._parked.append((self._destroy, self._h, getattr(self, "_keep", None)))
                self._h = None
                return
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn ctypes down
            pass

    def _forked(self, name):
        """A call in a process forked after this handle was opened (its lock may be held for
        good by a thread of the parent's): a close only forgets the handle and what it parked
        (the parent's, never destroyed here); anything else is refused (ValueError)."""
        if name == "close":
            self._h, self._parked = None, []
            return None
        return self._handle()  # raises: closed, or opened before a fork

    def _close_parked(self):
        """Close the streams dropped inside an on_pages of this handle's get (see __del__)."""
        while self._parked:
            destroy, h, _keep = self._parked.pop(0)
            getattr(_L(), destroy)(h)

    def _handle(self):
        if self._h is None:
            raise ValueError(f"kvpack {type(self).__name__.lower()} is closed")
        if self._pid != os.getpid():
            raise ValueError(f"kvpack {type(self).__name__.lower()} was opened by process "
                             f"{self._pid}, before a fork: open a new one in this process")
        return self._h


# ---- the client ----
class Client(_Handle):
    """kvp_client_h: one connection to a kvpackd node; use as a context manager or close().
    Threads may share it: its calls take turns (_serial)."""
    _destroy = "kvp_client_destroy"

    def _check(self, status, what=""):
        """_check, with the reason the node gave when it refused (kvp_client_node_message)."""
        if status != 0:
            why = _L().kvp_client_node_message(self._h).decode(errors="replace") if self._h else ""
            raise KvpError(status, status_name(status),
                           status_str(status) + (f" (node: {why})" if why else ""), what)

    def __init__(self, server, timeout_ms=10000):
        self._h = None
        params = _ClientParams(_CLIENT_PARAM_SERVER | _CLIENT_PARAM_TIMEOUT_MS,
                               _text(server, "server"),
                               _u(timeout_ms, "timeout_ms"), 0, 0)
        h = ctypes.c_void_p()
        self._check(_L().kvp_client_create(ctypes.byref(params), ctypes.byref(h)),
                    f"client to {server}")
        self._h = h

    @_serial
    def put_pages(self, ns, pages):
        """Ship pages (buffers, each one encoded page) to the node under namespace ns."""
        ptrs, lens, n, _ = _page_array(pages)
        self._check(_L().kvp_client_put_pages(self._handle(), _u(ns, "ns", 64), ptrs, lens, n),
                    "put_pages")

    @_serial
    def put_session(self, ns, sid, desc, pages=None, version=None):
        """Set (create or replace) session sid from a SessionDesc. Its pages must be on the node
        already, or given here (buffers, as put_pages): then they travel with the record (one
        round trip when they fit a batch) and the record is written only if every page was.
        version: the record's (ns since the epoch; default this process's clock): one older than
        the node's record or tombstone is refused (KvpError ERR_STALE)."""
        sid_b = _sid(sid)
        c, _ = _desc_c(desc)
        if pages is None and version is None:
            self._check(_L().kvp_client_put_session(self._handle(), _u(ns, "ns", 64), sid_b,
                                                    ctypes.byref(c)), f"put_session '{sid}'")
            return
        ptrs, lens, n, _keep = _page_array(pages or [])
        self._check(_L().kvp_client_put_session_pages(self._handle(), _u(ns, "ns", 64), sid_b,
                                                      ctypes.byref(c), ptrs, lens, n,
                                                      _u(version, "version", 64)
                                                      if version is not None
                                                      else _L().kvp_version_now()),
                    f"put_session '{sid}'")

    @_serial
    def get_session(self, ns, sid, on_pages=None):
        """Fetch session sid with every page (CRC-checked by libkvpack) as SessionPages. With
        on_pages(first, pages), each run of verified pages (bytes; items first.., item = chunk *
        layers + layer) is handed over as it lands, while the rest are in flight
        (kvp_client_get_session_cb); after an exception it raises, the get completes without calling
        it again and the exception is raised here."""
        out = ctypes.POINTER(_SessionPages)()
        if on_pages is None:
            self._check(_L().kvp_client_get_session(self._handle(), _u(ns, "ns", 64), _sid(sid),
                                                    ctypes.byref(out)), f"get_session '{sid}'")
            return _pages_take(out)
        status = _with_pages_cb(self, on_pages, out, lambda cb: _L().kvp_client_get_session_cb(
            self._handle(), _u(ns, "ns", 64), _sid(sid), None, cb, None, ctypes.byref(out)))
        self._check(status, f"get_session '{sid}'")
        return _pages_take(out)

    @_serial
    def append(self, ns, sid, codec, geometry, k, v, ids, first_pos, fingerprint=None,
               dtype=None):
        """Append tokens to session sid's fp16 tail on the node, which seals every full chunk of
        page_tokens into pages of codec (kvp_client_append: the decode->store return path; the
        next turn's prefill finds them with lookup). geometry: (layers, heads, head_dim,
        page_tokens); k, v: buffers of [layers][ntok][heads][head_dim] fp32 (or fp16 bits with
        dtype="f16"); ids: the ids of the session's current tail tokens, then the ntok new ones;
        first_pos: the position of the first new token (the tokens the session holds; 0 creates
        it): a session elsewhere refuses (KvpError ERR_INVALID), so a retry never seals tokens
        twice; fingerprint: chained into chunk keys (default ns, the usual ns_fingerprint).
        Returns the chunks sealed."""
        a, _keep = _append_c(ns, codec, geometry, k, v, ids, fingerprint, dtype, first_pos)
        sealed = ctypes.c_uint32()
        self._check(_L().kvp_client_append(self._handle(), _u(ns, "ns", 64), _sid(sid),
                                           ctypes.byref(a), ctypes.byref(sealed)),
                    f"append to '{sid}'")
        return sealed.value

    @_serial
    def lookup(self, ns, keys, layers):
        """How many leading chunks of keys the node holds on all layers."""
        hit = ctypes.c_uint32()
        self._check(_L().kvp_client_lookup(self._handle(), _u(ns, "ns", 64), _keys(keys), len(keys),
                                           _u(layers, "layers"), ctypes.byref(hit)), "lookup")
        return hit.value

    @_serial
    def spill(self, ns, sid):
        self._check(_L().kvp_client_spill(self._handle(), _u(ns, "ns", 64), _sid(sid)),
                    f"spill '{sid}'")

    @_serial
    def stat(self):
        s = _NodeStat()
        self._check(_L().kvp_client_stat(self._handle(), ctypes.byref(s)), "stat")
        return NodeStat(*[getattr(s, n) for n in _STAT_FIELDS])

    @_serial
    def scrub(self):
        """One whole scrubbing pass on the node now (every page on its disk, then its index):
        {"bytes", "bad_pages", "index_rebuilt", "elapsed_ms"}. It takes as long as the disk does:
        give the client a timeout_ms to match."""
        r = _ScrubResult()
        self._check(_L().kvp_client_scrub(self._handle(), ctypes.byref(r)), "scrub")
        return _scrub_dict(r)

    @_serial
    def delete_session(self, ns, sid):
        """Delete sid (record and unshared pages, DRAM and disk); KvpError ERR_NOT_FOUND if none."""
        self._check(_L().kvp_client_delete_session(self._handle(), _u(ns, "ns", 64), _sid(sid)),
                    f"delete_session '{sid}'")

    @_serial
    def list_sessions(self, page_size=0, max=0):
        """The node's sessions in (ns, sid) order, page_size per LIST, at most max (0: all)."""
        out = ctypes.POINTER(_SessionList)()
        self._check(_L().kvp_client_list_sessions(self._handle(), _u(page_size, "page_size"),
                                                  _u(max, "max"), ctypes.byref(out)),
                    "list_sessions")
        try:
            lst = out.contents
            ss = [_info_py(lst.sessions[i]) for i in range(lst.n)]
            return SessionList(ss, bool(lst.truncated), lst.requests)
        finally:
            _L().kvp_session_list_free(out)


class PutStream(_Handle):
    """kvp_put_stream_h: a prefill's streamed put to one node (its own connection and shipping
    thread). push(pages) queues a layer's pages and returns at once; they ship while the caller
    encodes the next layer. finish(sid, desc, pages=None) waits for every pushed page, then writes
    the record (with the last pages); the first error of any push raises there, and the record is
    then not written. When its connection drops or its node restarts mid-session, the stream
    connects anew and ships every page pushed so far again. The stream keeps the pushed buffers
    alive and reads them while it ships: do not change one until finish or close returns (a
    writable buffer is not copied)."""
    _destroy = "kvp_put_stream_close"

    def __init__(self, server, ns, timeout_ms=10000):
        self._h = None
        self._ns = _u(ns, "ns", 64)
        self._keep = []
        params = _ClientParams(_CLIENT_PARAM_SERVER | _CLIENT_PARAM_TIMEOUT_MS,
                               _text(server, "server"),
                               _u(timeout_ms, "timeout_ms"), 0, 0)
        h = ctypes.c_void_p()
        _check(_L().kvp_put_stream_open(ctypes.byref(params), self._ns, ctypes.byref(h)),
               f"put stream to {server}")
        self._h = h

    @_serial
    def push(self, pages):
        """Queue pages (buffers, each one encoded page) for shipping; returns at once."""
        ptrs, lens, n, keep = _page_array(pages)
        self._keep.append((ptrs, lens, keep))
        _check(_L().kvp_put_stream_push(self._handle(), ptrs, lens, n), "put stream push")

    @_serial
    def finish(self, sid, desc, pages=None):
        """Wait for the pushed pages, then set session sid (SessionDesc) with pages (if any)."""
        sid_b = _sid(sid)
        c, _ = _desc_c(desc)
        ptrs, lens, n, _keep = _page_array(pages or [])
        try:
            _check(_L().kvp_put_stream_finish(self._handle(), sid_b, ctypes.byref(c), ptrs, lens,
                                              n, _L().kvp_version_now()),
                   f"put stream finish '{sid}'")
        finally:
            self._keep = []  # finish returned: the shipper holds none of them now

    @_serial
    def close(self):
        super().close()
        self._keep = []


# ---- several nodes ----
def _cluster_error(status, what, failed=(), ok_nodes=()):
    """KvpError for status, naming the nodes that failed."""
    where = "; ".join(f"{a} {stage}: {name}" for a, name, stage in failed)
    e = KvpError(status, status_name(status), status_str(status),
                 f"{what} [{where}]" if where else what)
    e.failed, e.ok_nodes = list(failed), list(ok_nodes)
    return e


class Cluster(_Handle):
    """kvp_cluster_h: several kvpackd nodes, sessions placed by rendezvous rank of (ns, sid) with
    replicas copies (cluster.h). Exactly one of peers ("A:7070,B:7070" or a list of addresses)
    and etcd ("http://127.0.0.1:2379[,URL...]": the nodes registered under etcd_prefix, default
    /kvpack/nodes/, kept current by a watch: each routed call - rank, put/get/delete_session,
    list_sessions - and sync() first adopts etcd's newest members). A node is connected on first
    use. Partial success (fewer than replicas copies) is returned; a non-OK status raises
    KvpError naming the failed nodes. Threads may share it: they take turns (_serial)."""
    _destroy = "kvp_cluster_destroy"

    def __init__(self, peers=None, etcd=None, etcd_prefix=None, replicas=1, timeout_ms=10000):
        self._h = None
        self._streams = weakref.WeakSet()  # its open put streams: closed before it is
        if (peers is None) == (etcd is None):
            raise _cluster_error(ERR_INVALID, "Cluster: give exactly one of peers= and etcd=")
        r = _int(replicas)
        if r is None or not 1 <= r <= CLUSTER_MAX_NODES:
            raise _cluster_error(ERR_INVALID, f"Cluster: replicas must be 1..{CLUSTER_MAX_NODES}, "
                                 f"got {replicas!r}")
        replicas = r
        if etcd is None and etcd_prefix is not None:
            raise _cluster_error(ERR_INVALID, "Cluster: etcd_prefix needs etcd=")
        if peers is not None and not isinstance(peers, str):
            peers = ",".join(peers)
        n = len(peers.split(",")) if peers is not None else replicas
        if replicas > n:
            raise _cluster_error(ERR_INVALID, f"Cluster: replicas={replicas} needs at least "
                                 f"{replicas} nodes, the peer list has {n} ({peers!r})")
        cp = _ClientParams(_CLIENT_PARAM_SERVER | _CLIENT_PARAM_TIMEOUT_MS, None,
                           _u(timeout_ms, "timeout_ms"), 0, 0)
        params = _ClusterParams(_CLUSTER_PARAM_REPLICAS | _CLUSTER_PARAM_CLIENT, None, replicas,
                                ctypes.pointer(cp), None, None)
        if etcd is not None:
            params.field_mask |= _CLUSTER_PARAM_ETCD
            params.etcd = _text(etcd, "etcd")
            params.etcd_prefix = _text(etcd_prefix, "etcd_prefix") if etcd_prefix else None
            what = f"Cluster: the nodes under {etcd_prefix or '/kvpack/nodes/'} at etcd {etcd}"
        else:
            params.field_mask |= _CLUSTER_PARAM_PEERS
            params.peers = _text(peers, "peers")
            what = (f"Cluster(peers={peers!r}): want HOST:PORT[,HOST:PORT...], each once (also "
                    f"under another name of the host), at most {CLUSTER_MAX_NODES}")
        h = ctypes.c_void_p()
        s = _L().kvp_cluster_create(ctypes.byref(params), ctypes.byref(h))
        if s != 0:
            raise _cluster_error(s, what)
        self._h = h
        self.replicas = _L().kvp_cluster_replicas(h)

    @property
    @_serial
    def peers(self):
        """The node addresses, in the order node indices use: the static list, or (etcd) the
        members as the last routed call or sync() adopted them, sorted by address."""
        h = self._handle()
        return [_L().kvp_cluster_peer(h, i).decode() for i in range(_L().kvp_cluster_size(h))]

    @_serial
    def sync(self):
        """Adopt etcd's newest members now; returns their generation (1 for the first list, +1
        per change the watch saw; 0 for a static list). peers then shows them."""
        gen = ctypes.c_uint64()
        _check(_L().kvp_cluster_sync(self._handle(), ctypes.byref(gen)), "sync")
        return gen.value

    def _tried(self, rep):
        """([(node, status name, stage)] that failed, [node] that succeeded), in call order."""
        failed, ok, peers = [], [], self.peers
        for t in rep.tried[:min(rep.n_tried, CLUSTER_MAX_NODES)]:
            addr = peers[t.node] if t.node < len(peers) else f"node {t.node}"
            if t.status == 0:
                ok.append(addr)
            else:
                failed.append((addr, status_name(t.status), (t.stage or b"").decode()))
        return failed, ok

    def _call(self, status, rep, what):
        """Raise KvpError (with the report's nodes) for a non-OK status; else the ok nodes."""
        failed, ok = self._tried(rep)
        if status != 0:
            raise _cluster_error(status, what, failed, ok)
        return ok

    def _node(self, node):
        """A node index from an index or an address in the peer list."""
        if isinstance(node, str):
            if node not in self.peers:
                raise ValueError(f"{node!r} is not in the peer list {self.peers}")
            return self.peers.index(node)
        k = _int(node)
        if k is None or not 0 <= k < len(self.peers):
            raise ValueError(f"node must be 0..{len(self.peers) - 1} or an address, got {node!r}")
        return k

    @_serial
    def rank(self, ns, sid):
        """The node addresses by preference for (ns, sid): [0] is the primary; a put goes to the
        first replicas of them that take it."""
        order = (ctypes.c_uint32 * CLUSTER_MAX_NODES)()
        _check(_L().kvp_cluster_rank(self._handle(), _u(ns, "ns", 64), _sid(sid), order),
               f"rank '{sid}'")
        peers = self.peers  # as rank adopted them
        return [peers[i] for i in order[:len(peers)]]

    @_serial
    def put_session(self, ns, sid, pages, desc):
        """Store a whole session (pages chunk-major, desc.layers per chunk, as Client.put_pages
        takes them, then the record) on the first replicas nodes of its rank that take it: a
        node that fails is skipped and the next takes its place. Returns the nodes that took it
        (fewer than replicas: partial, not an error); none: KvpError, and so is a node holding a
        newer version (ERR_STALE: another writer's clock is ahead; repair keeps that one)."""
        sid_b = _sid(sid)
        c, _keep = _desc_c(desc)
        ptrs, lens, n, _bufs = _page_array(pages)
        rep = _ClusterReport()
        s = _L().kvp_cluster_put_session(self._handle(), _u(ns, "ns", 64), sid_b, ptrs, lens, n,
                                         ctypes.byref(c), ctypes.byref(rep))
        return self._call(s, rep, f"put_session '{sid}'")

    @_serial
    def get_session(self, ns, sid, expect=None, on_pages=None, latest=False):
        """The session from the first node in rank order that has it, as SessionPages with
        served_by set. expect (PageParams: codec, heads, head_dim, page_tokens) refuses other
        pages with ERR_WRONG_CODEC. Nobody has it: ERR_NOT_FOUND, or the unreachable status when
        a node that may hold it did not answer. on_pages(first, pages) as Client.get_session's
        (kvp_cluster_get_session_cb): when a node fails part-way the next one's runs start again
        at first == 0. latest: every node is asked for its version first and the newest copy of
        those that answer is served (kvp_cluster_get_session_latest): without it, a first-ranked
        node that missed the latest put serves its older copy until a repair."""
        out = ctypes.POINTER(_SessionPages)()
        rep = _ClusterReport()
        ex = ctypes.byref(expect._c()) if expect is not None else None
        if latest and on_pages is None:
            s = _L().kvp_cluster_get_session_latest(self._handle(), _u(ns, "ns", 64), _sid(sid),
                                                    ex, _PAGES_CB(), None, ctypes.byref(out),
                                                    ctypes.byref(rep))  # a NULL callback
        elif on_pages is None:
            s = _L().kvp_cluster_get_session(self._handle(), _u(ns, "ns", 64), _sid(sid), ex,
                                             ctypes.byref(out), ctypes.byref(rep))
        else:
            fn = (_L().kvp_cluster_get_session_latest if latest
                  else _L().kvp_cluster_get_session_cb)
            s = _with_pages_cb(self, on_pages, out, lambda cb: fn(
                self._handle(), _u(ns, "ns", 64), _sid(sid), ex, cb, None, ctypes.byref(out),
                ctypes.byref(rep)))
        self._call(s, rep, f"get_session '{sid}'")
        sp = _pages_take(out)
        sp.served_by = self.peers[rep.served_by]
        return sp

    @_serial
    def append(self, ns, sid, codec, geometry, k, v, ids, chunks, fingerprint=None, dtype=None):
        """Client.append on every copy of the session (kvp_cluster_append): the nodes of its rank
        that hold it, up to replicas, all at one new version. chunks: the sealed chunks the
        session holds as you know it (its record's n_chunks): a copy that holds another count
        refuses. Returns (chunks sealed, nodes that took it); KvpError when none did (NOT_FOUND:
        no node holds the session; put it first)."""
        a, _keep = _append_c(ns, codec, geometry, k, v, ids, fingerprint, dtype)
        sealed = ctypes.c_uint32()
        rep = _ClusterReport()
        s = _L().kvp_cluster_append(self._handle(), _u(ns, "ns", 64), _sid(sid), ctypes.byref(a),
                                    _u(chunks, "chunks"), ctypes.byref(sealed), ctypes.byref(rep))
        return sealed.value, self._call(s, rep, f"append to '{sid}'")

    @_serial
    def delete_session(self, ns, sid):
        """Delete on every node; returns the nodes that deleted it. KvpError when none did
        (ERR_NOT_FOUND), or when one of its first replicas nodes was unreachable (it may keep a
        copy; e.ok_nodes lists the ones that deleted it)."""
        rep = _ClusterReport()
        s = _L().kvp_cluster_delete_session(self._handle(), _u(ns, "ns", 64), _sid(sid),
                                            ctypes.byref(rep))
        return self._call(s, rep, f"delete_session '{sid}'")

    @_serial
    def list_sessions(self, page_size=0, max=0):
        """Every node's sessions merged (ClusterSessionList: each once, with the nodes that
        hold it); nodes that did not answer are in .unreachable. None answered: KvpError."""
        out = ctypes.POINTER(_ClusterList)()
        rep = _ClusterReport()
        s = _L().kvp_cluster_list_sessions(self._handle(), _u(page_size, "page_size"),
                                           _u(max, "max"), ctypes.byref(out), ctypes.byref(rep))
        self._call(s, rep, "list_sessions")
        try:
            lst, peers = out.contents, self.peers
            ss = [_info_py(lst.sessions[i], ClusterSessionInfo,
                           nodes=[a for k, a in enumerate(peers)
                                  if lst.holders[i] >> k & 1],
                           damaged_nodes=[a for k, a in enumerate(peers)
                                          if lst.damaged[i] >> k & 1])
                  for i in range(lst.n)]
            down = [(a, name) for a, name, _ in self._tried(rep)[0]]
            return ClusterSessionList(ss, bool(lst.truncated), lst.requests, down)
        finally:
            _L().kvp_cluster_list_free(out)

    @_serial
    def put_stream(self, ns, sid, also=None):
        """A ClusterPutStream of session sid: layer by layer to the first replicas nodes of its
        rank and to also (addresses outside the placement, e.g. the decode node's kvpackd)."""
        return ClusterPutStream(self, ns, sid, also)

    @_serial
    def close(self):
        """Close its put streams (they use the cluster's handle), then the cluster, once."""
        for st in list(getattr(self, "_streams", ())):
            st.close()
        self._close_parked()
        super().close()

    def _per_node(self, what, fn, arg, node):
        """fn(handle, k, byref(arg)) on one node (node: index or address; its result arg, or
        KvpError naming the node), or with node=None {address: arg or the KvpError it gave} for
        every node in turn (a fresh arg each); KvpError if no node answered."""
        if node is not None:
            k, out = self._node(node), arg()
            s = fn(self._handle(), k, ctypes.byref(out))
            if s != 0:
                raise _cluster_error(s, f"{what} {self.peers[k]}",
                                     [(self.peers[k], status_name(s), what)])
            return out
        res = {}
        for a in self.peers:
            try:
                res[a] = self._per_node(what, fn, arg, a)
            except KvpError as e:
                res[a] = e
        if not res:  # etcd may list no node at all
            raise _cluster_error(ERR_PEER_UNREACHABLE, f"{what}: no node registered")
        errs = [e for e in res.values() if isinstance(e, KvpError)]
        if len(errs) == len(res):
            raise _cluster_error(errs[0].status, f"{what}: no node answered",
                                 [f for e in errs for f in e.failed])
        return res

    @_serial
    def stat(self, node=None):
        """One node's NodeStat (node: index or address; KvpError naming it if it fails), or with
        node=None {address: NodeStat or the KvpError it gave} for every node; KvpError if no
        node answered."""
        got = self._per_node("stat", _L().kvp_cluster_stat, _NodeStat, node)
        conv = lambda st: NodeStat(*[getattr(st, n) for n in _STAT_FIELDS])  # noqa: E731
        if node is not None:
            return conv(got)
        return {a: v if isinstance(v, KvpError) else conv(v) for a, v in got.items()}

    @_serial
    def scrub(self, node=None):
        """Client.scrub on one node (node: index or address), or with node=None on every node in
        turn: {address: result dict or the KvpError it gave}; KvpError if no node answered."""
        got = self._per_node("scrub", _L().kvp_cluster_scrub, _ScrubResult, node)
        if node is not None:
            return _scrub_dict(got)
        return {a: v if isinstance(v, KvpError) else _scrub_dict(v) for a, v in got.items()}


class ClusterPutStream(_Handle):
    """kvp_cluster_stream_h (Cluster.put_stream): one session streamed to the first replicas nodes
    of its rank, each over its own connection and shipping thread, and to the also nodes (a decode
    node's kvpackd: P/D mode). push(pages) queues a layer's pages everywhere and returns at once
    (KvpError only for a page every node would refuse); finish(desc, pages=None) writes the record
    everywhere at one version, sends the whole session once more to a node whose stream failed
    for its connection (died, timed out), puts it on the next node of the rank in place
    of a stream that still failed, and returns the nodes that took it (like put_session); the also
    nodes' outcomes are in .also_status ({address: "OK" or a status name}), never raised. The
    stream keeps the pushed buffers alive and reads them while it ships: do not change one until
    finish or close returns. It takes turns with its Cluster (one lock)."""
    _destroy = "kvp_cluster_stream_close"

    def __init__(self, cluster, ns, sid, also=None):
        self._h = None
        if not isinstance(cluster, Cluster):  # its handle goes to C as a kvp_cluster_h
            raise TypeError(f"ClusterPutStream needs a kvpack.Cluster, got "
                            f"{type(cluster).__name__}")
        if cluster._pid != os.getpid():  # before its lock, as _serial: refused, never waited
            cluster._handle()
        self._lock = cluster._lock  # it uses the cluster's handle: one lock for both
        self._guard = cluster._guard
        self._parked = cluster._parked
        self._finished = False
        self._cluster, self._sid = cluster, sid
        self._keep = []
        if also is not None and not isinstance(also, str):
            also = ",".join(also)
        self._also = [a.strip() for a in also.split(",")] if also else []
        also = ",".join(self._also)
        self.also_status = {}
        h = ctypes.c_void_p()
        with self._lock:
            if self._guard[0] == threading.get_ident():  # as _serial: the get holds the handle
                raise RuntimeError("kvpack: ClusterPutStream() from inside on_pages of a get on "
                                   "the same Cluster")
            s = _L().kvp_cluster_stream_open(cluster._handle(), _u(ns, "ns", 64), _sid(sid),
                                             _text(also, "also") if also else None, ctypes.byref(h))
            if s != 0:
                raise _cluster_error(s, f"put_stream '{sid}'" +
                                     (f" (also {also})" if also else ""))
            self._h = h
            cluster._streams.add(self)  # closed with the cluster, never after it

    @_serial
    def push(self, pages):
        """Queue pages (buffers, each one encoded page) to every node; returns at once."""
        ptrs, lens, n, keep = _page_array(pages)
        self._keep.append((ptrs, lens, keep))
        _check(_L().kvp_cluster_stream_push(self._handle(), ptrs, lens, n),
               f"put_stream '{self._sid}' push")

    @_serial
    def finish(self, desc, pages=None):
        """Wait for the pushed pages, then write the record (SessionDesc) with pages (if any);
        returns the nodes that took the session; none: KvpError naming the failed nodes."""
        c, _ = _desc_c(desc)
        ptrs, lens, n, _keep = _page_array(pages or [])
        rep = _ClusterReport()
        also = (ctypes.c_int * max(1, len(self._also)))()
        try:
            s = _L().kvp_cluster_stream_finish(self._handle(), ctypes.byref(c), ptrs, lens, n,
                                               ctypes.byref(rep), also)
        finally:
            self._keep = []  # finish returned: no shipper holds them now
        if not self._finished:  # a second finish is refused by C: keep the first's outcome
            self.also_status = {a: status_name(also[i]) for i, a in enumerate(self._also)}
            self._finished = True
        return self._cluster._call(s, rep, f"put_stream '{self._sid}' finish")

    @_serial
    def close(self):
        super().close()
        self._keep = []
