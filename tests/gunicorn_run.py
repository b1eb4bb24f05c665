"""One gunicorn run for the example tests: boot an example's app on a free port of
127.0.0.1, wait for its workers, and stop exactly its process group afterwards."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]


def http_get(port: int, path: str = "/", timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@contextlib.contextmanager
def gunicorn(example: Path, env: dict[str, str], log: Path, *, workers: int,
             boot_timeout: float, ready_status: int | None = None,
             app: str = "app:app") -> Iterator[int]:
    """Run ``example``'s gunicorn.conf.py and ``app``; yield its port once all
    ``workers`` booted and ``/`` answers (with ``ready_status``, when given)."""
    port = free_port()
    env = dict(os.environ, **env, PORT=str(port), WORKERS=str(workers),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", app],
            cwd=example, env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + boot_timeout
        while log.read_text().count("Booting worker") < workers:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"gunicorn did not boot:\n{log.read_text()}"
            time.sleep(0.1)
        while True:
            assert process.poll() is None, log.read_text()
            with contextlib.suppress(OSError):
                status = http_get(port, timeout=2)[0]
                if ready_status is None or status == ready_status:
                    break
            assert time.monotonic() < deadline, f"gunicorn did not answer:\n{log.read_text()}"
            time.sleep(0.1)
        yield port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        # The workers are in the same group; none may outlive the master. Once the master
        # is gone they are orphans, reaped as soon as they exit: at once on a quiet
        # machine, later on a busy one; ten seconds guards against one that lives on.
        deadline = time.monotonic() + 10
        while group_alive(process.pid):
            if time.monotonic() > deadline:
                pytest.fail(f"gunicorn's process group {process.pid} survived")
            gevent.sleep(0.1)


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
