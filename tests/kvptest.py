"""kvptest.py - what the Python test scripts share: starting a kvpackd and waiting until it listens
(its --ready-file, written by rename, names the bound port), and importing the source tree's
Python binding against a built libkvpack.so. The scripts put tests/ on sys.path with bytecode
writing off, so nothing lands in the source tree."""
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_kvpackd(kvpackd, ready, args, env=None, stderr=None, what="kvpackd", timeout_s=30):
    """kvpackd ARGS --ready-file READY (a stale READY removed first); once it listens returns
    (proc, "127.0.0.1:PORT"). The test exits when the node dies or is not up in timeout_s."""
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
    sys.exit(f"{what} did not start")


def load_kvpack(lib):
    """The binding in client/python (kvpack.py), loaded against libkvpack.so at lib."""
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    import kvpack  # noqa: E402
    kvpack.load(lib)
    return kvpack
