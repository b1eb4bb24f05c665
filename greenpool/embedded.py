"""A throwaway MongoDB-compatible server on 127.0.0.1, for the demo and trials.

:class:`EmbeddedServer` runs SecantusDB (``pip install greenpool[demo]``)
as a child process on a free port of 127.0.0.1, in memory, and stops exactly
that process::

    with EmbeddedServer() as server:
        with greenpool.Client(server.uri) as client:
            client.command("admin", {"ping": 1})

It is for demos and experiments, not for production data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from greenpool.errors import ConfigurationError
from greenpool.link import LinkOptions, connect

__all__ = ["EmbeddedServer", "free_port", "secantusd_executable"]

HOST = "127.0.0.1"


def secantusd_executable() -> str:
    """The ``secantusd-py`` script of the running interpreter's environment, else PATH's."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which("secantusd-py", path=path)
    if found is None:
        raise ConfigurationError(
            "no embedded server: secantusd-py was not found (pip install 'greenpool[demo]')")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (another
    process may still take it before the server binds it)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    """SecantusDB in a child process on 127.0.0.1; a context manager."""

    def __init__(self, startup_timeout: float = 30.0) -> None:
        self.startup_timeout = startup_timeout
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    @property
    def uri(self) -> str:
        return f"mongodb://{HOST}:{self.port}/"

    def start(self) -> EmbeddedServer:
        self._directory = tempfile.TemporaryDirectory(prefix="greenpool-server-")
        directory = Path(self._directory.name)
        config = directory / "secantusd.toml"
        config.touch()
        self.port = free_port()
        command = [secantusd_executable(), "--config", str(config), "--host", HOST,
                   "--port", str(self.port), "--storage-path", ":memory:", "--standalone"]
        log = (directory / "server.log").open("wb")
        with log:
            self._process = subprocess.Popen(
                command, cwd=directory, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_until_ready(directory / "server.log")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self, log: Path) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        options = LinkOptions(connect_timeout=1.0, socket_timeout=1.0)
        while True:
            if self._process.poll() is not None:
                raise ConfigurationError(
                    f"the embedded server exited with {self._process.returncode}:\n"
                    f"{log.read_text(errors='replace')[-2000:]}")
            with contextlib.suppress(Exception):
                connect((HOST, self.port), options).close()
                return
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"the embedded server did not answer on {HOST}:{self.port} within "
                    f"{self.startup_timeout:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server process (SIGTERM, then SIGKILL) and delete its files."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            # The server notices a shutdown on its next connection.
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 1):
                pass
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        directory, self._directory = self._directory, None
        if directory is not None:
            directory.cleanup()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
