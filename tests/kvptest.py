"""kvptest.py - what the Python test scripts share: check() (failures kept in FAILS), starting a kvpackd and waiting until it listens
(its --ready-file, written by rename, names the bound port; with --http, its port and one
/metrics value), and importing the source tree's
Python binding against a built libkvpack.so; free ports and a one-member etcd; .kvd files. The scripts put tests/ on sys.path with bytecode
writing off, so nothing lands in the source tree."""
import glob
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAILS = []  # what check() found wrong in this run, in order


def check(cond, what):
    """A check that does not stop the script: a false cond prints FAIL and is kept in FAILS, so
    one run reports every failure (the script exits non-zero at its end when FAILS is not empty)."""
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def _fixed_port(args):
    """The port of args' --listen HOST:PORT when it is not 0 (a node coming back on its port)."""
    for i, a in enumerate(args[:-1]):
        if a == "--listen" and not args[i + 1].endswith(":0"):
            return args[i + 1].rsplit(":", 1)[1]
    return None


def _below_ephemeral(args):
    """args with a loopback --listen 127.0.0.1:0 given a free port below the kernel's ephemeral
    range (ip_local_port_range starts at 32768 here), and whether it was: a node is often started
    again on the port it got first, and an ephemeral one can meanwhile be the local end of any
    process's outgoing connection (seen: 'address already in use' for over 10 s)."""
    args = list(args)
    for i, a in enumerate(args[:-1]):
        if a == "--listen" and args[i + 1] == "127.0.0.1:0":
            for _ in range(100):
                port = random.randrange(20000, 32768)
                with socket.socket() as s:
                    try:
                        s.bind(("127.0.0.1", port))
                    except OSError:
                        continue
                args[i + 1] = f"127.0.0.1:{port}"
                return args, True
    return args, False


def start_kvpackd(kvpackd, ready, args, env=None, stderr=None, what="kvpackd", timeout_s=30):
    """kvpackd ARGS --ready-file READY (a stale READY removed first); once it listens returns
    (proc, "127.0.0.1:PORT"). The test exits when the node dies or is not up in timeout_s. A
    --listen 127.0.0.1:0 gets a free port below the ephemeral range (_below_ephemeral), another
    one when the node exits at once (a test running beside this one took it meanwhile). A node
    coming back on a fixed port that exits at once is started again for up to 10 s: meanwhile
    another test's client may hold that port as the local end of a connection (tests run two at a
    time), and the node then fails 'address already in use' until it closes."""
    asked = args
    args, picked = _below_ephemeral(asked)
    retry_until = time.monotonic() + (10 if _fixed_port(asked) else 0)
    repicks = 3  # a port taken between the check and the node's bind: up to 3 others
    while True:
        if os.path.exists(ready):
            os.unlink(ready)
        proc = subprocess.Popen([kvpackd, *args, "--ready-file", ready], stdout=subprocess.DEVNULL,
                                stderr=stderr, env=env)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            port = open(ready).read().strip() if os.path.exists(ready) else ""
            if port:
                return proc, "127.0.0.1:" + port
            time.sleep(0.02)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        elif picked and proc.returncode == 1 and repicks > 0:
            # exit 1 is how a node refuses a taken port (a crash is a signal: not retried)
            repicks -= 1
            print(f"{what} exited 1 at start on port {_fixed_port(args)}: another port",
                  file=sys.stderr)
            args, picked = _below_ephemeral(asked)
            continue
        elif time.monotonic() < retry_until:
            print(f"{what} exited at start on port {_fixed_port(args)}: started again",
                  file=sys.stderr)
            time.sleep(0.5)
            continue
        sys.exit(f"{what} did not start")


def start_kvpackd_http(kvpackd, tmp, args, env=None):
    """start_kvpackd(ARGS + --http 127.0.0.1:0) with its ready files in tmp; once it listens on
    both returns (proc, "127.0.0.1:PORT", http_port)."""
    ready, http_ready = os.path.join(tmp, "ready"), os.path.join(tmp, "http_ready")
    if os.path.exists(http_ready):
        os.unlink(http_ready)
    proc, addr = start_kvpackd(kvpackd, ready, [*args, "--http", "127.0.0.1:0",
                                                "--http-ready-file", http_ready], env=env)
    for _ in range(300):
        if os.path.exists(http_ready):
            break
        time.sleep(0.01)
    return proc, addr, int(open(http_ready).read())


class CliNode:
    """One kvpackd (data in tmp/data, 64M DRAM, --http) that a script restarts and drives with the
    kvpack CLI: start(args) adds args, stop() ends it (SIGTERM), kill() only if still running,
    kv(cmd, *args) runs `kvpack CMD --node ADDR ARGS` -> (exit status, stderr), metric(name)."""

    def __init__(self, kvpack, kvpackd, tmp, env):
        self.kvpack, self.kvpackd, self.tmp, self.env = kvpack, kvpackd, tmp, env
        self.proc = self.addr = self.http = None

    def start(self, args):
        self.proc, self.addr, self.http = start_kvpackd_http(
            self.kvpackd, self.tmp, ["--listen", "127.0.0.1:0", "--data-dir",
                                     os.path.join(self.tmp, "data"), "--dram-budget", "64M", *args],
            env=self.env)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def kv(self, cmd, *args):
        p = subprocess.run([self.kvpack, cmd, "--node", self.addr, *args], capture_output=True,
                           text=True, timeout=120, env=self.env)
        if p.stderr:
            sys.stderr.write(p.stderr)
        return p.returncode, p.stderr

    def metric(self, name):
        return metric(self.http, name)


def run_cli(kvpack, env, *args):
    """`kvpack ARGS` (2 minutes at most): (exit status, stdout, stderr)."""
    p = subprocess.run([kvpack, *args], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def get_kvd(kvpack, env, node, sid, out, *extra):
    """`kvpack get --node NODE --session SID --out OUT [EXTRA...]` into a fresh OUT: (its bytes, or
    None when the get failed, stderr)."""
    if os.path.exists(out):
        os.unlink(out)
    rc, _, err = run_cli(kvpack, env, "get", "--node", node, "--session", sid, "--out", out,
                         *extra)
    if rc != 0 or not os.path.exists(out):
        return None, err
    with open(out, "rb") as f:
        return f.read(), err


def flip_segment_byte(data_dir, offset=200):
    """Flip one byte (default: in the first page's payload) of the node's only segment file (the
    node stopped); returns the segment files found (the caller checks there is one)."""
    segs = sorted(glob.glob(os.path.join(data_dir, "seg", "*.seg")))
    if len(segs) == 1:
        with open(segs[0], "r+b") as f:
            f.seek(offset)
            byte = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([byte ^ 0x40]))
    return segs


class Nodes:
    """Named kvpackd processes (ready files in tmp) that come back on the port each got first:
    start(name, args) -> "127.0.0.1:PORT", stop(name) (SIGTERM, waited), kill_all() (finally)."""

    def __init__(self, kvpackd, tmp, env):
        self.kvpackd, self.tmp, self.env = kvpackd, tmp, env
        self.procs, self.ports = {}, {}

    def start(self, name, args):
        self.procs[name], addr = start_kvpackd(
            self.kvpackd, os.path.join(self.tmp, name + ".ready"),
            ["--listen", f"127.0.0.1:{self.ports.get(name, 0)}", *args], env=self.env)
        self.ports[name] = int(addr.rsplit(":", 1)[1])
        return addr

    def stop(self, name):
        self.procs[name].terminate()
        self.procs[name].wait(timeout=60)

    def kill_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def metric(http_port, name):
    """The value of the unlabelled series `name` in the node's /metrics, or None."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def load_kvpack(lib):
    """The binding in client/python (kvpack.py), loaded against libkvpack.so at lib."""
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    import kvpack  # noqa: E402
    kvpack.load(lib)
    return kvpack


def free_port():
    """A loopback TCP port that was free a moment ago (for servers that must be told a port)."""
    return free_ports(1)[0]


def kvd_bytes(L, T, H, D, values):
    """A .kvd v1 (README: magic "KVD1", version 1, L, T, H, D as u32, then K and V as fp32) of
    values (2*L*T*H*D floats: an array('f') or any iterable)."""
    import array
    import struct
    vals = values if isinstance(values, array.array) and values.typecode == "f" \
        else array.array("f", values)
    return b"KVD1" + struct.pack("<5I", 1, L, T, H, D) + vals.tobytes()


def write_kvd(path, L, T, H, D, values):
    """kvd_bytes written to path; returns the bytes."""
    data = kvd_bytes(L, T, H, D, values)
    with open(path, "wb") as f:
        f.write(data)
    return data


def write_token_ids(path, T, first):
    """T uint32 LE token ids first, first+1, ... for `kvpack put --tokens`: sessions that put one
    dump with ids of their own share no page (without --tokens the keys follow the KV, and one
    dump put as many sessions is stored once); returns path."""
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{T}I", *range(first, first + T)))
    return path


def etcd_or_skip():
    """The etcd binary's path; without one, a SKIP line and exit 77 (ctest: skipped)."""
    import shutil
    etcd = shutil.which("etcd")
    if etcd is None:
        print("SKIP: the etcd binary is not installed (Debian: apt-get install etcd-server; "
              ".ci/quickstart installs it)")
        sys.exit(77)
    return etcd


def free_ports(n):
    """n distinct loopback TCP ports that were free a moment ago (all bound at once, so no two
    are the same)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _etcd_try(etcd, data_dir, cport, pport):
    """One start of a one-member etcd: (proc, url) once /health says true, (None, why) when it
    exits first (its stderr's last lines: a port taken meanwhile, say) or is not up in ~15 s."""
    url, peer = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
    err_path = data_dir.rstrip("/") + ".stderr"
    with open(err_path, "ab") as err:
        proc = subprocess.Popen(
            [etcd, "--name", "kvp", "--data-dir", data_dir, "--logger=zap", "--log-level=error",
             "--listen-client-urls", url, "--advertise-client-urls", url, "--listen-peer-urls",
             peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"kvp={peer}"],
            stdout=subprocess.DEVNULL, stderr=err)
    for _ in range(300):
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if json.loads(r.read()).get("health") == "true":
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        why = "not healthy after ~15 s"
    else:
        why = f"exited with {proc.returncode}"
    with open(err_path, "rb") as f:
        tail = f.read()[-600:].decode("utf-8", "replace").strip()
    return None, f"{why} on ports {cport}/{pport}" + (f"; its stderr ends: {tail}" if tail else "")


def start_etcd(etcd, data_dir, cport=None, pport=None):
    """A one-member etcd on 127.0.0.1:cport (clients) and :pport (peers), as PLATFORM.md starts
    it; returns (proc, client URL) once /health says true. Without ports it picks free ones and,
    should one be taken before etcd binds it (tests run in parallel), tries twice more with new
    ones. The test exits, saying why (etcd's stderr), when it dies or is not up in ~15 s."""
    import shutil
    tries = 3 if cport is None and pport is None else 1
    for attempt in range(tries):
        if tries > 1:
            cport, pport = free_ports(2)
            if attempt > 0:  # the failed try's member (its old peer URL) must not be reused
                shutil.rmtree(data_dir, ignore_errors=True)
        proc, url_or_why = _etcd_try(etcd, data_dir, cport, pport)
        if proc is not None:
            return proc, url_or_why
        print(f"etcd did not start: {url_or_why}", file=sys.stderr)
    sys.exit("etcd did not start")
