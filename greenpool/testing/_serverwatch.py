"""The watchdog between a program and its embedded server (see :mod:`greenpool.testing.embedded`).

Rules of this module: the watchdog script; standard library only, and nothing imports it
(it runs as a separate process).

Run as a script, by path, with only the standard library (importing the greenpool package
would cost the startup of gevent and PyMongo)::

    python _serverwatch.py DIRECTORY PORT GRACE SERVER-COMMAND...

It starts the server (stdout and stderr to ``DIRECTORY/server.log``, ``TMPDIR`` inside
``DIRECTORY``), prints the server's pid on stdout, then reads its stdin: the program that
started it holds the other end of that pipe. End of file, whatever caused it (the program's
``stop()``, its exit, a SIGTERM or a SIGKILL it got), stops the server and deletes
``DIRECTORY``. So the server never outlives the program, and leaves nothing behind.

If the server exits on its own, the watchdog exits with the server's status and leaves
``DIRECTORY`` (its log says why) to the program.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_watchdog() -> None:
    # In the forked server: Linux SIGKILLs it if the watchdog itself is SIGKILLed.
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def stop(server: subprocess.Popen[bytes], port: int, grace: float) -> None:
    """SIGTERM, a connection to wake the accept loop, ``grace`` seconds, then SIGKILL.

    A server with only in-memory data loses nothing to the SIGKILL, so it gets a short
    grace: SecantusDB sometimes swallows a SIGTERM or takes seconds to act on it.
    """
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        # SecantusDB's accept thread notices a shutdown only on its next connection.
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
            pass
        try:
            server.wait(grace)
        except subprocess.TimeoutExpired:
            server.kill()
    server.wait()


class _Interrupted(Exception):
    pass


def _interrupt(signum: int, frame: object) -> None:
    raise _Interrupted


def main(argv: list[str]) -> int:
    directory, port, grace, command = Path(argv[0]), int(argv[1]), float(argv[2]), argv[3:]
    tmp = directory / "tmp"
    tmp.mkdir(exist_ok=True)
    with (directory / "server.log").open("ab") as log:
        server = subprocess.Popen(
            command, cwd=directory, env={**os.environ, "TMPDIR": str(tmp)},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_watchdog)
    print(server.pid, flush=True)
    # A SIGTERM or SIGINT to the watchdog itself (a kill of its process group) stops the
    # server as end of file does.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    stdin = sys.stdin.fileno()
    try:
        while True:
            ready, _, _ = select.select([stdin], [], [], 0.2)
            if ready and not os.read(stdin, 4096):
                break  # end of file: the program stopped us, or is gone
            if server.poll() is not None:
                return server.returncode or 1
    except _Interrupted:
        pass
    stop(server, port, grace)
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
