#!/usr/bin/env python3
"""check_demo_interrupt.py - `kvpack demo` stopped by a signal cleans up after itself: SIGINT to
its process group (Ctrl-C) or SIGTERM to the demo alone, sent while its node runs, exits 128 + the
signal, stops the node and the client process, and removes its temporary directory; with
--keep-dir the directory stays and is named. Its node holds no disk reserve file (192 MiB at
least). A geometry whose fp16 tail pages cannot exist is refused (exit 2)
before any node starts.
usage: check_demo_interrupt.py KVPACK"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

kvpack = sys.argv[1]
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
        print("FAIL:", what)


def node_pids(tmpdir):
    """kvpackd processes whose command line names a directory under tmpdir."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"kvpackd") and any(tmpdir.encode() in a for a in cmd):
                pids.append(int(d))
    return pids


def run(sig, to_group, keep):
    tmpdir = tempfile.mkdtemp(prefix="kvp_demo_int_")
    try:
        argv = [kvpack, "demo", "--layers", "4", "--tokens", "4096", *(["--keep-dir"] if keep else [])]
        p = subprocess.Popen(argv, env=dict(os.environ, TMPDIR=tmpdir, KVP_PROGRESS="0"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        line = p.stdout.readline()  # the geometry line, then "[1/5] node up ..."
        line = p.stdout.readline()
        check(line.startswith("[1/5]"), f"demo's second line: {line!r}")
        demo_dirs = [d for d in os.listdir(tmpdir) if d.startswith("kvpack-demo-")]
        reserve = os.path.join(tmpdir, demo_dirs[0], "data", "kvpack.reserve") if demo_dirs else ""
        check(demo_dirs and not os.path.exists(reserve), f"demo node holds a reserve file: {demo_dirs}")
        if to_group:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        what = f"demo with {signal.Signals(sig).name} to the {'group' if to_group else 'demo'}"
        check(p.returncode == 128 + sig, f"{what}: exit {p.returncode}, stderr {err[-300:]!r}")
        left = os.listdir(tmpdir)
        if keep:
            check(len(left) == 1 and "files kept in" in err, f"{what}, --keep-dir: left {left}")
        else:
            check(left == [] and "interrupted; removed" in err, f"{what}: left {left}, {err[-300:]!r}")
        deadline = time.time() + 10
        while node_pids(tmpdir) and time.time() < deadline:
            time.sleep(0.1)
        check(not node_pids(tmpdir), f"{what}: kvpackd still running")
    finally:
        for pid in node_pids(tmpdir):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmpdir, ignore_errors=True)


run(signal.SIGINT, True, False)
run(signal.SIGTERM, False, False)
run(signal.SIGTERM, False, True)

tmpdir = tempfile.mkdtemp(prefix="kvp_demo_geo_")
p = subprocess.run([kvpack, "demo", "--layers", "1", "--tokens", "1", "--heads", "128",
                    "--head-dim", "1024", "--page-tokens", "1024"], capture_output=True, text=True,
                   env=dict(os.environ, TMPDIR=tmpdir), timeout=60)
check(p.returncode == 2 and os.listdir(tmpdir) == [] and "fp16" in p.stderr,
      f"demo with a geometry fp16 pages cannot hold: exit {p.returncode}, {p.stderr!r}")
shutil.rmtree(tmpdir, ignore_errors=True)
print("demo interrupt checks:", "FAILED" if fails else "passed")
sys.exit(1 if fails else 0)
