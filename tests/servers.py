"""SecantusDB servers for greenpool's integration tests.

Each :class:`ServerProcess` runs ``secantusd-py`` (``pip install secantusdb``, in the test
extra) as a subprocess on 127.0.0.1, on a free port, in its own process group and its own
scratch directory (empty config file, log, data, temporary files)::

    with ServerProcess() as server:                       # standalone, in-memory storage
        client = MongoClient(server.uri)
    with ServerProcess(replica_set=True) as server: ...   # one-node set "secantus"
    with ServerProcess(users=[ADMIN, POOL_USER]) as server: ...   # --auth
    with ServerProcess(tls=make_tls_files(tmp_path)) as server: ...

Behaviour of the server this module works around (SecantusDB 0.7.0b3, measured):

- Without ``--config`` the server reads ``./secantusd.toml``, ``~/.secantus/secantusd.toml``
  or ``/etc/secantus/secantusd.toml`` if one exists, so every server gets an empty config
  file of its own and runs in its scratch directory.
- ``--storage-path :memory:`` is a ``mkdtemp()`` directory that only a clean shutdown
  removes; ``TMPDIR`` points into the scratch directory so a killed server leaks nothing.
- The port accepts connections a little before the server is ready for a SIGTERM: a SIGTERM
  sent just after the port opens is often swallowed and the server never exits (its main
  thread sleeps in ``Event.wait()`` while the signal is handled elsewhere). So a server
  counts as started only once it has answered ``hello``, and :meth:`ServerProcess.stop`
  repeats the SIGTERM if the server still answers, then falls back to SIGKILL.
- After a SIGTERM the server's accept thread only notices the shutdown on its next
  connection, which holds the exit for 2 s unless :meth:`ServerProcess.stop` connects
  once. A connection that is busy (e.g. held by a ``blockConnection`` failpoint) holds it
  for 5 s more.
- The server binds with ``SO_REUSEADDR``, so it can listen on the same port again at once
  after a SIGKILL or SIGTERM, even with old connections in TIME_WAIT; a bind without that
  option (like :func:`free_port`'s) fails for a while. :meth:`ServerProcess.restart`
  therefore reuses the port directly and only retries while the port is taken.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, urlencode

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from greenpool.testing.embedded import free_port, secantusd_executable
from greenpool.testing.replset import ReplicaSet

HOST = "127.0.0.1"
TEST_URI_VARIABLE = "GREENPOOL_TEST_URI"
"""The environment variable that points the suite at an existing server instead."""

REPLICA_SET_NAME = "secantus"
"""The set name SecantusDB advertises when started without ``--standalone``."""

STARTUP_TIMEOUT = 30.0
"""Seconds a server gets to answer ``hello``; it usually takes 0.3-0.9 s."""

STOP_TIMEOUT = 15.0
"""Seconds a SIGTERM gets before SIGKILL; a stop usually takes 0.2 s, at most about 7 s."""


MEMORY_STOP_GRACE = 0.5
"""Seconds a server with in-memory data gets after SIGTERM before SIGKILL."""


class ServerStartError(RuntimeError):
    """The server exited or did not answer ``hello`` in time; the message ends with its log."""


@dataclass(frozen=True)
class User:
    """A user created in the ``admin`` database before the server restarts with ``--auth``.

    SecantusDB's ``createUser`` stores SCRAM-SHA-256 credentials only, unless ``mechanisms``
    asks otherwise (mongod stores both by default).
    """

    name: str
    password: str
    roles: tuple[str, ...] = ("root",)
    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256",)


ADMIN = User("admin", "admin-password")
POOL_USER = User(
    "greenpool",
    # URI-reserved characters (percent-encoding), SCRAM's ',' and '=', and non-ASCII
    # characters that SASLprep leaves unchanged.
    "p@ss:w/rd?#%,=Ωü",
    roles=("readWriteAnyDatabase",),
)
SHA1_USER = User("sha1-user", "sha1-password", mechanisms=("SCRAM-SHA-1",))
"""The only way to test SCRAM-SHA-1: pymongo needs ``authMechanism=SCRAM-SHA-1`` for it."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM files from :func:`make_tls_files`.

    ``ca_file`` signed the server certificate (for 127.0.0.1 and localhost) and the
    client certificate; ``wrong_ca_file`` is an unrelated CA, which signed
    ``wrong_client_cert_key_file``. Client certificate files hold the certificate and its
    key, the way pymongo's ``tlsCertificateKeyFile`` wants them.
    """

    ca_file: Path
    server_cert_file: Path
    server_key_file: Path
    client_cert_key_file: Path
    wrong_ca_file: Path
    wrong_client_cert_key_file: Path


def make_tls_files(directory: Path, *, server_names: Sequence[str] = ()) -> TLSFiles:
    """Create two CAs, a server certificate and two client certificates in ``directory``.

    The server certificate is for 127.0.0.1, localhost and ``server_names``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = _CertificateAuthority("greenpool test CA")
    wrong_ca = _CertificateAuthority("unrelated test CA")
    server_cert, server_key = ca.issue("localhost", server=True, names=server_names)
    client_cert, client_key = ca.issue("greenpool test client", server=False)
    wrong_cert, wrong_key = wrong_ca.issue("greenpool test client", server=False)
    files = TLSFiles(
        ca_file=directory / "ca.pem",
        server_cert_file=directory / "server.pem",
        server_key_file=directory / "server-key.pem",
        client_cert_key_file=directory / "client.pem",
        wrong_ca_file=directory / "wrong-ca.pem",
        wrong_client_cert_key_file=directory / "wrong-client.pem",
    )
    files.ca_file.write_bytes(_pem(ca.cert))
    files.wrong_ca_file.write_bytes(_pem(wrong_ca.cert))
    files.server_cert_file.write_bytes(_pem(server_cert))
    _write_private(files.server_key_file, _pem(server_key))
    _write_private(files.client_cert_key_file, _pem(client_cert) + _pem(client_key))
    _write_private(files.wrong_client_cert_key_file, _pem(wrong_cert) + _pem(wrong_key))
    return files


class _CertificateAuthority:
    """A self-signed CA that issues leaf certificates, valid from an hour ago for 30 days.

    The extensions (key usages, key identifiers, SAN) are the ones strict verifiers
    (OpenSSL 3, Python 3.13's ``VERIFY_X509_STRICT``) insist on.
    """

    def __init__(self, common_name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        self.cert = (
            _builder(name, name, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self, common_name: str, *, server: bool, names: Sequence[str] = ()
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _builder(_name(common_name), self.cert.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            san = x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST)),
                *(x509.DNSName(name) for name in names),
            ])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "greenpool tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _pem(obj: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600)
    path.write_bytes(data)


class ServerProcess:
    """A SecantusDB server in a subprocess; stopped (and its files removed) by :meth:`close`.

    :param replica_set: leave out ``--standalone``: the server presents itself as the
        primary of a one-node replica set named ``secantus`` (transactions need it).
    :param persistent: keep data in the scratch directory across :meth:`restart`
        instead of ``:memory:``. Implied by ``users``.
    :param users: start with ``--auth``, after creating these users on a first run
        without it (SecantusDB's documented provisioning).
    :param tls: serve TLS with ``tls.server_*`` and ask clients for a certificate signed by
        ``tls.ca_file`` (verified if offered).
    :param tls_require_client_cert: refuse TLS clients without such a certificate.
    :param port: listen here instead of on a free port.
    """

    def __init__(
        self,
        *,
        replica_set: bool = False,
        persistent: bool = False,
        users: Sequence[User] = (),
        tls: TLSFiles | None = None,
        tls_require_client_cert: bool = False,
        port: int | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        stop_timeout: float = STOP_TIMEOUT,
    ) -> None:
        if tls_require_client_cert and tls is None:
            raise ValueError("tls_require_client_cert needs tls")
        self.replica_set = replica_set
        self.users = tuple(users)
        self.persistent = persistent or bool(self.users)
        self.tls = tls
        self.tls_require_client_cert = tls_require_client_cert
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._port = port
        self._directory: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self._provisioned = False

    # -- where it is ----------------------------------------------------------------

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server has not been started")
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def pid(self) -> int:
        """The running server's process id (a restart changes it)."""
        if self._process is None:
            raise RuntimeError("the server is not running")
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def directory(self) -> Path:
        """The scratch directory: ``server.log``, ``secantusd.toml``, ``data``, ``tmp``."""
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="greenpool-secantus-"))
        return self._directory

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def uri(self) -> str:
        """``mongodb://127.0.0.1:<port>/``, with ``replicaSet`` and TLS options if needed."""
        return self.uri_for(None)

    def uri_for(self, user: User | None) -> str:
        """:attr:`uri` with ``user``'s credentials, percent-encoded."""
        credentials = ""
        if user is not None:
            credentials = f"{quote(user.name, safe='')}:{quote(user.password, safe='')}@"
        options: dict[str, str] = {}
        if self.replica_set:
            options["replicaSet"] = REPLICA_SET_NAME
        if self.tls is not None:
            options["tls"] = "true"
            options["tlsCAFile"] = str(self.tls.ca_file)
            if self.tls_require_client_cert:
                options["tlsCertificateKeyFile"] = str(self.tls.client_cert_key_file)
        if user is not None and user.mechanisms != ("SCRAM-SHA-256",):
            options["authMechanism"] = user.mechanisms[0]
        query = f"?{urlencode(options, quote_via=quote)}" if options else ""
        return f"mongodb://{credentials}{HOST}:{self.port}/{query}"

    def client(self, user: User | None = None, **options: Any) -> MongoClient[dict[str, Any]]:
        """A pymongo client connected straight to this server, with short timeouts.

        For provisioning and checks; ``options`` override the defaults.
        """
        settings: dict[str, Any] = {
            "directConnection": True,
            "serverSelectionTimeoutMS": 5000,
            "connectTimeoutMS": 2000,
            "socketTimeoutMS": 10000,
            "appname": "greenpool-test-servers",
        }
        if self.tls is not None:
            settings.update(
                tls=True,
                tlsCAFile=str(self.tls.ca_file),
                tlsCertificateKeyFile=str(self.tls.client_cert_key_file),
            )
        if user is not None:
            settings.update(
                username=user.name,
                password=user.password,
                authSource="admin",
                authMechanism=user.mechanisms[0],
            )
        settings.update(options)
        return MongoClient(HOST, self.port, **settings)

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> Self:
        """Start the server (provisioning users first) and wait until it answers ``hello``."""
        if self.running:
            raise RuntimeError(f"the server is already running (pid {self.pid})")
        if self.users and not self._provisioned:
            self._launch(auth=False)
            with self.client() as client:
                for user in self.users:
                    client.admin.command(
                        "createUser",
                        user.name,
                        pwd=user.password,
                        roles=list(user.roles),
                        mechanisms=list(user.mechanisms),
                    )
            self.stop()
            self._provisioned = True
        self._launch(auth=bool(self.users))
        return self

    def stop(self) -> None:
        """SIGTERM, wait for the pid; repeat the SIGTERM if it was swallowed; SIGKILL at the end.

        Leaves the scratch directory (and persistent data) for :meth:`restart`. A server
        with in-memory data has nothing to lose to a SIGKILL, so it gets SIGKILL after
        MEMORY_STOP_GRACE seconds instead of ``stop_timeout``.
        """
        process = self._process
        if process is None:
            return
        grace = self.stop_timeout if self.persistent else MEMORY_STOP_GRACE
        deadline = time.monotonic() + grace
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        if not _wait(process, 0.2):
            # The accept thread notices the shutdown only on its next connection (it would
            # hold the exit for 2 s): make one.
            self._port_open()
        while not _wait(process, min(0.5, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                process.kill()
                process.wait()
                break
            # A server that is shutting down answers nothing; one that answers swallowed
            # the SIGTERM.
            if self._answers_hello(timeout=0.5):
                process.send_signal(signal.SIGTERM)
        self._process = None

    def kill(self) -> None:
        """SIGKILL at once (a crash) and reap the process."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        self._process = None

    def restart(self) -> Self:
        """Stop the server if it runs, and start it again on the same port.

        Data survives when the server is ``persistent``, users included.
        """
        self.stop()
        self._launch(auth=bool(self.users))
        return self

    def close(self) -> None:
        """Stop the server and remove its scratch directory."""
        try:
            self.stop()
        finally:
            if self._directory is not None:
                shutil.rmtree(self._directory, ignore_errors=True)
                self._directory = None
                self._provisioned = False

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log (stdout and stderr, all its runs)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<ServerProcess {HOST}:{self._port} {state}>"

    # -- internals ------------------------------------------------------------------

    def _log_of_this_run(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def _command_flags(self, *, auth: bool) -> list[str]:
        flags = ["--enable-test-commands"]
        if not self.replica_set:
            flags.append("--standalone")
        if auth:
            flags.append("--auth")
        if self.tls is not None:
            flags += [
                "--tls-cert-file", str(self.tls.server_cert_file),
                "--tls-key-file", str(self.tls.server_key_file),
                "--tls-ca-file", str(self.tls.ca_file),
            ]  # fmt: skip
            if self.tls_require_client_cert:
                flags.append("--tls-require-client-cert")
        return flags

    def _launch(self, *, auth: bool) -> None:
        """Run the server, on a new free port when none was fixed and the port is taken."""
        deadline = time.monotonic() + self.startup_timeout
        fixed = self._port is not None
        while True:
            if self._port is None:
                self._port = free_port()
            process = self._spawn(auth)
            try:
                self._wait_until_ready(process, deadline)
            except _PortInUse:
                if time.monotonic() >= deadline:
                    raise ServerStartError(
                        f"port {self._port} stayed in use for {self.startup_timeout} s\n"
                        + self.log_tail()
                    ) from None
                if not fixed:
                    self._port = None
                time.sleep(0.1)
                continue
            except BaseException:
                # Never leave a half-started server behind (a timeout or a kill included).
                if process.poll() is None:
                    process.kill()
                process.wait()
                raise
            self._process = process
            return

    def _spawn(self, auth: bool) -> subprocess.Popen[bytes]:
        directory = self.directory
        config = directory / "secantusd.toml"
        config.touch()
        tmp = directory / "tmp"
        tmp.mkdir(exist_ok=True)
        storage = directory / "data" if self.persistent else ":memory:"
        command = [
            secantusd_executable(),
            "--config", str(config),
            "--host", HOST,
            "--port", str(self.port),
            "--storage-path", str(storage),
            *self._command_flags(auth=auth),
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            log.write(f"+ {' '.join(command)}\n".encode())
            log.flush()
            self._log_start = log.tell()
            return subprocess.Popen(
                command,
                cwd=directory,
                env={**os.environ, "TMPDIR": str(tmp)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group: a Ctrl-C on the test run reaches pytest, whose
                # fixture teardown then stops the server properly.
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def _wait_until_ready(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        while True:
            code = process.poll()
            if code is not None:
                if "Address already in use" in self._log_of_this_run():
                    raise _PortInUse
                raise ServerStartError(
                    f"secantusd-py exited with {code} during startup; log {self.log_path}:\n"
                    + self.log_tail()
                )
            if self._port_open() and self._answers_hello(timeout=1.0):
                return
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"secantusd-py did not answer hello on {HOST}:{self.port} within "
                    f"{self.startup_timeout} s; log {self.log_path}:\n" + self.log_tail()
                )
            time.sleep(0.02)

    def _port_open(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def _answers_hello(self, timeout: float) -> bool:
        ms = int(timeout * 1000)
        with self.client(
            serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, socketTimeoutMS=ms
        ) as client:
            try:
                client.admin.command("hello")
            except PyMongoError:
                return False
            return True


def _die_with_parent() -> None:
    """Run in the forked child: have Linux SIGKILL the server if the test process dies.

    Fixture teardown stops servers on every normal exit; this covers a test run that is
    itself killed (a CI timeout), which would otherwise leave servers holding their ports.
    """
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


class _PortInUse(Exception):
    """The server could not bind its port."""


@contextlib.contextmanager
def standalone_uri() -> Iterator[str]:
    """``$GREENPOOL_TEST_URI`` if set (nothing is started), else a new standalone server's URI.

    The server runs until the ``with`` block ends.
    """
    uri = os.environ.get(TEST_URI_VARIABLE)
    if uri:
        yield uri
        return
    with ServerProcess() as server:
        yield server.uri


def _wait(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether ``process`` exits within ``timeout`` seconds."""
    try:
        process.wait(max(timeout, 0))
    except subprocess.TimeoutExpired:
        return False
    return True


@dataclass(frozen=True)
class AuthServer:
    """What the ``auth_server`` fixture yields: a ``--auth`` server and its users.

    ``uri`` carries no credentials; ``uri_for(user)`` does.
    """

    server: ServerProcess
    admin: User = ADMIN
    user: User = POOL_USER
    sha1_user: User = SHA1_USER

    @property
    def uri(self) -> str:
        return self.server.uri

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def usernames(self) -> tuple[str, ...]:
        return tuple(user.name for user in self.server.users)

    @property
    def passwords(self) -> dict[str, str]:
        """Each user's password, by user name."""
        return {user.name: user.password for user in self.server.users}

    def uri_for(self, user: User) -> str:
        return self.server.uri_for(user)


@dataclass(frozen=True)
class TLSServer:
    """What the ``tls_server`` fixture yields: a TLS server and its certificate files.

    ``uri`` trusts ``files.ca_file`` and presents no client certificate (the server accepts
    that; a certificate it is offered must be signed by ``files.ca_file``).
    """

    server: ServerProcess
    files: TLSFiles

    @property
    def uri(self) -> str:
        return self.server.uri

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port


def with_options(uri: str, **options: Any) -> str:
    """``uri`` with ``options`` added to its query (name=value, as given)."""
    query = "&".join(f"{key}={value}" for key, value in options.items())
    separator = "&" if "?" in uri else ("?" if uri.endswith("/") else "/?")
    return f"{uri}{separator}{query}"


def unique(prefix: str) -> str:
    """A name no other test uses: ``prefix`` and 8 random hex digits."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def restore_set(members: ReplicaSet) -> None:
    """A module's replica set as its tests expect to find it: every member up, healed,
    without lag, tags or fail point, member 0 primary."""
    for status in members.status():
        if status.state == "DOWN":
            members.start_member(status.index)
        elif status.partitioned:
            members.heal(status.index)
        if status.config.lag:
            members.set_lag(status.index, 0)
        if status.config.tags:
            members.set_tags(status.index, {})
    if members.primary != members.addresses[0]:
        members.elect(0)
    for member in members.addresses:
        with MongoClient[dict[str, Any]](f"mongodb://{member}/?directConnection=true") as client:
            client.admin.command("configureFailPoint", "failCommand", mode="off")
