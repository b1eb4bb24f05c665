"""Fork safety: the child never uses (or writes to) its parent's connections.

Transports here are real socketpairs, so the test can check, from the far
end, that nothing was written, and that the parent's sockets still work.
The fork runs in a subprocess so the test process's own hub is untouched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.servers import with_options

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()

    import json, os, socket, sys
    import gevent
    from greenpool import Pool, PoolClearedError, PoolState
    from tests.cmap_runner import Recorder

    far_ends = {}

    class SocketTransport:
        def __init__(self, sock):
            self.sock = sock
        def close(self):
            self.sock.close()

    def connector(conn):
        if conn.id == 3:
            gevent.sleep(30)  # an establishment still running at fork time
        near, far = socket.socketpair()
        far_ends[conn.id] = far
        return SocketTransport(near)

    recorder = Recorder()
    pool = Pool(("db.test", 27017), {"maxPoolSize": 5}, connector=connector,
                listeners=[recorder])
    pool.ready()
    kept = pool.checkout()          # in use across the fork
    idle = pool.checkout()
    establishing = gevent.spawn(pool.checkout)
    gevent.sleep(0.01)
    pool.checkin(idle)              # available across the fork
    assert [pool.stats().pending, pool.stats().available] == [1, 1]

    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        report = {}
        gevent.sleep(0.05)  # let the interrupted establishment finish failing
        report["establishing"] = repr(establishing.exception)
        report["kept_closed_in_child"] = kept.transport.sock.fileno() == -1
        fresh = pool.checkout()
        report["fresh"] = [fresh.id, fresh.generation]
        report["stats"] = [pool.stats().total, pool.stats().in_use, pool.state.value]
        pool.checkin(kept)  # from before the fork: dropped quietly
        pool.checkin(fresh)
        report["after"] = [pool.stats().total, pool.stats().available]
        report["cleared_events"] = recorder.count("ConnectionPoolCleared")
        os.write(writer, json.dumps(report).encode())
        os._exit(0)

    os.close(writer)
    _, status = os.waitpid(pid, 0)
    report = json.loads(os.read(reader, 65536))
    # The parent's sockets: untouched by the child, and still working.
    for conn_id, far in far_ends.items():
        far.setblocking(False)
        try:
            data = far.recv(1)
        except BlockingIOError:
            data = None
        assert data is None, f"the child wrote to connection {conn_id}: {data!r}"
    kept.transport.sock.sendall(b"ping")
    assert far_ends[kept.id].recv(4) == b"ping"
    establishing.kill()
    report["parent_stats"] = [pool.stats().total, pool.stats().generation]
    report["status"] = status
    print(json.dumps(report))
""")


def test_a_forked_child_starts_clean_and_leaves_the_parent_alone() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 0
    assert "PoolClearedError" in report["establishing"], "establishment in the child interrupted"
    assert report["kept_closed_in_child"], "inherited descriptors are closed in the child"
    fresh_id, fresh_generation = report["fresh"]
    assert fresh_id > 3 and fresh_generation == 1, "the child's pool has a new generation"
    assert report["stats"] == [1, 1, "ready"], "a ready pool stays ready, with only new conns"
    assert report["after"] == [1, 1]
    assert report["cleared_events"] == 1
    assert report["parent_stats"][1] == 0, "the parent's pool is not cleared"


# A fork as uWSGI makes it (libc's fork(), so none of Python's at-fork hooks run, then
# gevent.reinit() in the child) or as gunicorn does (os.fork). Parent and child each
# monitor the server (every 500 ms, streamed or polled) and ping it for two seconds;
# neither may see a failed heartbeat or a clear. A fork while the monitor streams finds
# it waiting for the next reply on the stream: the child must never read from it.
FORK = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()

    import ctypes, json, os, sys, time
    import gevent
    import greenpool
    from pymongo import monitoring

    class Heartbeats(monitoring.ServerHeartbeatListener):
        def __init__(self):
            self.failed = []
            self.awaited = 0
        def started(self, event): pass
        def succeeded(self, event):
            self.awaited += event.awaited
        def failed(self, event):
            self.failed.append(repr(event.reply))

    heartbeats = Heartbeats()
    client = greenpool.Client(sys.argv[1], event_listeners=[heartbeats])
    client.command("admin", {"ping": 1})
    gevent.sleep(0.6)  # the monitoring connection is open and in use

    def run(role):
        heartbeats.awaited = 0
        errors = []
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            try:
                client.command("admin", {"ping": 1})
            except Exception as error:
                errors.append(repr(error))
            gevent.sleep(0.02)
        return {"role": role, "errors": errors, "failed_heartbeats": heartbeats.failed,
                "awaited": heartbeats.awaited, "generation": client.pool.stats().generation}

    reader, writer = os.pipe()
    libc = sys.argv[2] == "libc"
    pid = ctypes.CDLL(None).fork() if libc else os.fork()
    if pid == 0:
        if libc:
            gevent.reinit()
        os.write(writer, json.dumps(run("child")).encode())
        os._exit(0)
    parent = run("parent")
    os.close(writer)
    _, status = os.waitpid(pid, 0)
    print(json.dumps([parent, json.loads(os.read(reader, 65536)), status]))
""")


@pytest.mark.parametrize("mode", ["stream", "poll"])
@pytest.mark.parametrize("fork", ["libc", "os"])
def test_a_forked_child_gets_its_own_monitor(mongodb_uri: str, fork: str, mode: str) -> None:
    uri = with_options(mongodb_uri, heartbeatFrequencyMS=500, serverMonitoringMode=mode)
    done = subprocess.run([sys.executable, "-c", FORK, uri, fork], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    parent, child, status = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == 0
    for report in (parent, child):
        assert report["errors"] == [], report
        assert report["failed_heartbeats"] == [], report
        # Streaming goes on in both (the child on a stream of its own); polling never awaits.
        assert (report["awaited"] > 0) is (mode == "stream"), report
    # The child's pool starts a new generation once, at the fork; a clear would add one.
    assert (parent["generation"], child["generation"]) == (0, 1)


# The owner mark behind the pool's per-checkout fork check, in a child forked
# by os.fork and by libc's fork(), for the wiped page and the pid fallback.
OWNER_MARK = textwrap.dedent("""
    import ctypes, json, mmap, os
    from greenpool.pool import forkmark

    def in_child(mark, fork):
        reader, writer = os.pipe()
        pid = fork()
        if pid == 0:
            seen = mark[0]
            mark[0] = 1  # the child makes itself the owner
            os.write(writer, bytes([seen, mark[0]]))
            os._exit(0)
        os.close(writer)
        os.waitpid(pid, 0)
        return list(os.read(reader, 2))

    marks = {"page": forkmark.owner_mark()}
    forkmark._MADV_WIPEONFORK = None
    marks["pid"] = forkmark.owner_mark()
    report = {"page_is_mmap": isinstance(marks["page"], mmap.mmap)}
    for kind, mark in marks.items():
        for how, fork in (("os.fork", os.fork), ("libc", ctypes.CDLL(None).fork)):
            report[f"{kind} {how}"] = [mark[0], *in_child(mark, fork), mark[0]]
    print(json.dumps(report))
""")


def test_the_owner_mark_reads_zero_in_any_forked_child() -> None:
    done = subprocess.run([sys.executable, "-c", OWNER_MARK], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if sys.platform == "linux":
        assert report.pop("page_is_mmap"), "Linux wipes a page on fork: no system call"
    # [parent before, child as forked, child after taking over, parent after]
    for kind in ("page", "pid"):
        for how in ("os.fork", "libc"):
            assert report[f"{kind} {how}"] == [1, 0, 1, 1], (kind, how, report)
