"""A throwaway MongoDB-compatible server on 127.0.0.1, for the demo and trials.

Rules of this module: starting, addressing and stopping an embedded server process; no
MongoDB protocol code of its own (it waits for the server with
:func:`greenpool.wire.connector.connect`).

:class:`EmbeddedServer` runs SecantusDB (``pip install greenpool[demo]``)
as a child process on a free port of 127.0.0.1, in memory, and stops exactly
that process::

    with EmbeddedServer() as server:
        with greenpool.Client(server.uri) as client:
            client.command("admin", {"ping": 1})

It is for demos and experiments, not for production data. From a shell,
``python -m greenpool server`` runs one in the foreground (:mod:`greenpool.cli.server`).

The server never outlives the program that started it: a small watchdog
process between the two stops the server and deletes its files as soon as
the program stops it or ends, however it ends (an exception, Ctrl-C, SIGTERM
or SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from greenpool.errors import ConfigurationError
from greenpool.wire.connector import connect
from greenpool.wire.link import LinkOptions

# EmbeddedServer's public path is greenpool.testing.EmbeddedServer (see the end).
__all__ = ["HOST", "EmbeddedServer", "free_port", "secantusd_executable"]

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


def _can_bind(port: int) -> bool:
    with socket.socket() as sock:
        # As the server binds: a port whose old connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


class EmbeddedServer:
    """SecantusDB in a child process on 127.0.0.1, in memory; a context manager.

    ``port=0`` picks a free port. ``replica_set=True`` presents a one-node replica
    set named ``secantus`` (transactions need it); otherwise the server is a
    standalone. ``auth=("user", "password")`` creates that user (role ``root``)
    and requires SCRAM-SHA-256 authentication; ``tls=True`` serves TLS only, with
    a certificate authority made for this server (``ca_file``);
    ``test_commands=True`` enables the commands tests use (``configureFailPoint``).
    :attr:`uri` carries what a client needs for all of these::

        with EmbeddedServer(auth=("app", "secret")) as server:
            print(server.uri)   # mongodb://app:secret@127.0.0.1:PORT/?authSource=admin
    """

    #: Seconds a SIGTERM gets before SIGKILL. The data is in memory only, so a SIGKILL
    #: loses nothing, and SecantusDB sometimes swallows a SIGTERM for seconds.
    STOP_GRACE = 0.3

    def __init__(self, startup_timeout: float = 30.0, *, port: int = 0,
                 replica_set: bool = False, auth: tuple[str, str] | None = None,
                 tls: bool = False, test_commands: bool = False) -> None:
        if not 0 <= port <= 65535:
            raise ConfigurationError(f"port must be 0 (a free one) to 65535, not {port!r}")
        if auth is not None and (not auth[0] or not auth[1]):
            raise ConfigurationError(
                f"auth needs a user name and a password, not {auth!r}")
        self.startup_timeout = startup_timeout
        self.port = port
        self.replica_set = replica_set
        self.test_commands = test_commands
        self.auth = auth
        self.tls = tls
        self._fixed_port = port
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._server_pid: int | None = None
        self._directory: Path | None = None

    @property
    def uri(self) -> str:
        """The connection string for this server (credentials and TLS options included)."""
        credentials = ""
        options = []
        if self.auth is not None:
            user, password = self.auth
            credentials = f"{quote(user, safe='')}:{quote(password, safe='')}@"
            options.append("authSource=admin")
        if self.tls:
            options += ["tls=true", f"tlsCAFile={quote(str(self.ca_file))}"]
        query = "?" + "&".join(options) if options else ""
        return f"mongodb://{credentials}{HOST}:{self.port}/{query}"

    @property
    def ca_file(self) -> Path:
        """The PEM file of the certificate authority that signed the server's certificate."""
        if self._directory is None:
            raise RuntimeError("the server is not running")
        return self._directory / "tls" / "ca.pem"

    @property
    def pid(self) -> int | None:
        """The server process's pid while it runs (its watchdog is its parent)."""
        return self._server_pid

    def start(self) -> EmbeddedServer:
        """Start the server and wait until it accepts connections; returns ``self``."""
        if self._watchdog is not None:
            raise RuntimeError("the server is already running")
        self._directory = Path(tempfile.mkdtemp(prefix="greenpool-server-"))
        try:
            flags = []
            if self.tls:
                from greenpool.testing._tlsfiles import write_tls_files

                files = write_tls_files(self._directory / "tls")
                flags += ["--tls-cert-file", str(files.server), "--tls-key-file",
                          str(files.key), "--tls-ca-file", str(files.ca)]
            if self.auth is not None:
                self._provision(flags)
                flags.append("--auth")
            self._launch(flags, storage=self._storage(), scratch=self._directory)
        except BaseException:
            self.stop()
            raise
        return self

    def _storage(self) -> str:
        # Users must survive a restart, so an auth server keeps its data in its directory
        # (deleted with it); any other server keeps it in memory.
        assert self._directory is not None
        return str(self._directory / "data") if self.auth is not None else ":memory:"

    def _provision(self, tls_flags: list[str]) -> None:
        """Create the user on the server without ``--auth``, then stop it cleanly."""
        from greenpool.client.api.client import Client

        assert self.auth is not None and self._directory is not None
        # In a scratch directory of its own: the watchdog deletes it, not the data.
        self._launch([*tls_flags, "--sync-on-commit"], storage=self._storage(),
                     scratch=self._directory / "provision", grace=30.0)
        user, password = self.auth
        try:
            auth, self.auth = self.auth, None
            uri = self.uri
        finally:
            self.auth = auth
        with Client(uri) as client:
            client.command("admin", {"createUser": user, "pwd": password,
                                     "roles": [{"role": "root", "db": "admin"}],
                                     "mechanisms": ["SCRAM-SHA-256"]})
        self._end_watchdog()

    def _launch(self, flags: list[str], storage: str, scratch: Path,
                grace: float = STOP_GRACE) -> None:
        scratch.mkdir(exist_ok=True)
        config = scratch / "secantusd.toml"
        config.touch()
        if not self._fixed_port:
            self.port = free_port()
        elif not _can_bind(self.port):
            # Checked first: the readiness check would take another server for this one.
            raise ConfigurationError(
                f"port {self.port} on {HOST} is in use; choose another (0 picks a free one)")
        command = [secantusd_executable(), "--config", str(config), "--host", HOST,
                   "--port", str(self.port), "--storage-path", storage]
        if not self.replica_set:
            command.append("--standalone")
        if self.test_commands:
            command.append("--enable-test-commands")
        watchdog = Path(__file__).with_name("_serverwatch.py")
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", str(watchdog), str(scratch), str(self.port),
             str(grace), *command, *flags],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            # Its own session: a Ctrl-C in the terminal reaches only the program, which
            # then stops the server in order.
            start_new_session=True)
        assert self._watchdog.stdout is not None
        line = self._watchdog.stdout.readline()
        self._server_pid = int(line) if line.strip().isdigit() else None
        self._wait_until_ready(scratch / "server.log")

    def _wait_until_ready(self, log: Path) -> None:
        assert self._watchdog is not None
        deadline = time.monotonic() + self.startup_timeout
        options = LinkOptions(connect_timeout=1.0, socket_timeout=1.0)
        while True:
            if self._watchdog.poll() is not None:
                raise ConfigurationError(
                    f"the embedded server exited with {self._watchdog.returncode}:\n"
                    f"{log.read_text(errors='replace')[-2000:]}")
            with contextlib.suppress(Exception), socket.create_connection(
                    (HOST, self.port), 1.0):
                # A TLS server is ready once it accepts; a plain one once it answers.
                if self.tls:
                    return
                connect((HOST, self.port), options).close()
                return
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"the embedded server did not answer on {HOST}:{self.port} within "
                    f"{self.startup_timeout:g} s")
            time.sleep(0.05)

    def _end_watchdog(self) -> None:
        """Close the watchdog's pipe (it stops the server) and wait for it."""
        watchdog, self._watchdog = self._watchdog, None
        self._server_pid = None
        if watchdog is None:
            return
        assert watchdog.stdin is not None and watchdog.stdout is not None
        watchdog.stdin.close()
        try:
            watchdog.wait(10 + self.STOP_GRACE)
        except subprocess.TimeoutExpired:
            watchdog.kill()
            watchdog.wait()
        watchdog.stdout.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after :attr:`STOP_GRACE` seconds) and delete
        its files. Does nothing when it is not running."""
        self._end_watchdog()
        directory, self._directory = self._directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
