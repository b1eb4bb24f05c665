"""greenpool.wire.link against a real server: SecantusDB, started here on 127.0.0.1.

Round trips, the handshake as the server saw it, interruption of a command
the server blocks (``configureFailPoint failCommand``), timeouts, a
server-closed connection, kills, TLS (a CA and certificates made here with
``cryptography``), SCRAM-SHA-256 against a server with ``--auth``, and links
without monkey-patching, in a subprocess, proving their I/O is cooperative.

Each fail point is scoped to one test's appName, so nothing else on the
module's server is affected, and is switched off when the test ends.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import pymongo
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from gevent import monkey
from gevent import ssl as gssl
from pymongo.errors import AutoReconnect, NetworkTimeout, OperationFailure

import greenpool
from greenpool import Pool, PoolClearedError
from greenpool.errors import AuthenticationError
from greenpool.wire.auth import Credentials
from greenpool.wire.connector import connect, handshake_completed, make_connector
from greenpool.wire.handshake import MIN_WIRE_VERSION
from greenpool.wire.link import Link, LinkOptions
from tests.turns import hub_turns_until, switches_during

pytestmark = pytest.mark.timeout(60)

SERVER = Path(sys.executable).with_name("secantusd-py")
PASSWORD = "Marmalade-Oxbow-3319-distinctive"
Address = tuple[str, int]


# -- the server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def secantus(*arguments: str) -> Iterator[Address]:
    """Run SecantusDB on a free 127.0.0.1 port until the block ends."""
    port = free_port()
    with tempfile.TemporaryFile() as log, tempfile.NamedTemporaryFile(suffix=".toml") as config:
        # An empty configuration file: no secantusd.toml found on the machine applies.
        command = [
            str(SERVER), "--config", config.name, "--host", "127.0.0.1", "--port", str(port),
            *arguments,
        ]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(process, port, log)
            yield ("127.0.0.1", port)
        finally:
            _stop(process)


def _wait_for_port(process: subprocess.Popen[bytes], port: int, log: Any) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            pytest.fail(f"SecantusDB exited with {process.returncode}:\n{log.read().decode()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    pytest.fail("SecantusDB did not listen within 30 s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def server() -> Iterator[Address]:
    with secantus("--storage-path", ":memory:", "--enable-test-commands", "--standalone") as a:
        yield a


@pytest.fixture
def admin(server: Address) -> Iterator[Link]:
    """A link for configuring fail points."""
    link = connect(server, LinkOptions(app_name="admin"))
    yield link
    link.close()


@pytest.fixture
def app_name() -> str:
    return f"link-test-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def fail_point(admin: Link, app_name: str, **data: Any) -> Iterator[None]:
    """failCommand for ``app_name``'s connections only, off again afterwards."""
    admin.command("admin", {
        "configureFailPoint": "failCommand",
        "mode": "alwaysOn",
        "data": {"appName": app_name, **data},
    })
    try:
        yield
    finally:
        admin.command("admin", {"configureFailPoint": "failCommand", "mode": "off"})


def blocking_ping(admin: Link, app_name: str, milliseconds: int) -> Any:
    return fail_point(
        admin, app_name, failCommands=["ping"], blockConnection=True, blockTimeMS=milliseconds
    )


# -- round trips -----------------------------------------------------------------------------


def test_round_trips(server: Address) -> None:
    link = connect(server, LinkOptions())
    try:
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        documents = [{"_id": i, "word": f"w{i}"} for i in range(5)]
        reply = link.command("links", {"insert": "round", "documents": documents})
        assert reply["n"] == 5
        found = link.command("links", {"find": "round", "filter": {"_id": {"$gte": 3}}})
        assert found["cursor"]["firstBatch"] == documents[3:]
        duplicate = link.command("links", {"insert": "round", "documents": [{"_id": 1}]})
        assert duplicate["writeErrors"][0]["code"] == 11000  # a result, not an error
        assert not link.broken
        assert link.max_wire_version >= MIN_WIRE_VERSION
        assert link.server_connection_id is not None
    finally:
        link.close()


def test_through_a_pool(server: Address) -> None:
    pool: Pool[Link] = Pool(server, {"maxPoolSize": 2}, connector=make_connector(LinkOptions()))
    pool.ready()
    try:
        with pool.checkout() as conn:
            assert conn.transport is not None
            assert conn.transport.command("admin", {"ping": 1})["ok"] == 1.0
            first = conn.transport
        with pool.checkout() as conn:
            assert conn.transport is first  # reused
    finally:
        pool.close()
    assert first.closed


def test_the_server_saw_our_handshake(server: Address, app_name: str) -> None:
    link = connect(server, LinkOptions(app_name=app_name))
    try:
        operations = link.command("admin", {"currentOp": 1})["inprog"]
        mine = [op for op in operations if op.get("connectionId") == link.server_connection_id]
        assert len(mine) == 1
        metadata = mine[0]["clientMetadata"]
        assert metadata["application"] == {"name": app_name}
        assert metadata["driver"] == {"name": "greenpool", "version": greenpool.__version__}
        assert metadata["os"]["type"] == os.uname().sysname
        assert metadata["platform"].startswith("CPython 3.")
        assert "; gevent " in metadata["platform"]
        assert link.hello is not None and link.hello["helloOk"] is True
    finally:
        link.close()


def test_app_name_reaches_the_server(server: Address, admin: Link, app_name: str) -> None:
    ours = connect(server, LinkOptions(app_name=app_name))
    other = connect(server, LinkOptions(app_name="someone-else"))
    try:
        with fail_point(admin, app_name, failCommands=["ping"], errorCode=8000):
            with pytest.raises(OperationFailure) as caught:
                ours.command("admin", {"ping": 1})
            assert caught.value.code == 8000
            assert other.command("admin", {"ping": 1})["ok"] == 1.0
        assert not ours.broken
        assert ours.command("admin", {"ping": 1})["ok"] == 1.0
    finally:
        ours.close()
        other.close()


# -- breaking ------------------------------------------------------------------------------


def test_interrupt_a_blocked_command(server: Address, admin: Link, app_name: str) -> None:
    link = connect(server, LinkOptions(app_name=app_name))
    with blocking_ping(admin, app_name, 3000):
        worker = gevent.spawn(link.command, "admin", {"ping": 1})
        gevent.sleep(0.2)  # the server holds the ping
        assert not worker.ready()
        assert switches_during(link.interrupt) == 0  # the caller never blocks
        # At once: within a few turns of the hub, long before the server answers (3 s).
        assert hub_turns_until(lambda: worker.dead) <= 3
    assert isinstance(worker.exception, PoolClearedError)
    assert link.broken


def test_pool_clear_interrupts_in_use_links(server: Address, admin: Link, app_name: str) -> None:
    pool: Pool[Link] = Pool(server, connector=make_connector(LinkOptions(app_name=app_name)))
    pool.ready()
    try:
        conn = pool.checkout()
        assert conn.transport is not None
        with blocking_ping(admin, app_name, 3000):
            worker = gevent.spawn(conn.transport.command, "admin", {"ping": 1})
            gevent.sleep(0.2)
            pool.clear(interrupt_in_use_connections=True)
            # Within a few turns of the hub, long before the server answers (3 s).
            assert hub_turns_until(lambda: worker.dead) <= 3
        assert isinstance(worker.exception, PoolClearedError)
        pool.checkin(conn)
        assert pool.stats().total == 0
    finally:
        pool.close()


def test_socket_timeout(server: Address, admin: Link, app_name: str) -> None:
    link = connect(server, LinkOptions(app_name=app_name, socket_timeout=0.25))
    with blocking_ping(admin, app_name, 2000):
        started = time.monotonic()
        with pytest.raises(NetworkTimeout, match=f"127.0.0.1:{server[1]}: timed out after 250 ms"):
            link.command("admin", {"ping": 1})
        # Not before its 250 ms; the error (not the reply due after 2 s) says the timeout
        # ended the call.
        assert time.monotonic() - started > 0.2
    assert link.broken


def test_server_closes_the_connection(server: Address, admin: Link, app_name: str) -> None:
    link = connect(server, LinkOptions(app_name=app_name))
    with (
        fail_point(admin, app_name, failCommands=["ping"], closeConnection=True),
        pytest.raises(AutoReconnect) as caught,
    ):
        link.command("admin", {"ping": 1})
    assert str(caught.value) == f"127.0.0.1:{server[1]}: connection closed"
    assert not isinstance(caught.value, PoolClearedError)
    assert link.broken and link.closed


def test_kill_mid_request(server: Address, admin: Link, app_name: str) -> None:
    link = connect(server, LinkOptions(app_name=app_name))
    with blocking_ping(admin, app_name, 2000), pytest.raises(gevent.Timeout), gevent.Timeout(0.2):
        link.command("admin", {"ping": 1})
    assert link.broken and link.closed
    with pytest.raises(AutoReconnect, match="connection closed"):
        link.command("admin", {"ping": 1})


def test_concurrent_use_is_refused(server: Address, admin: Link, app_name: str) -> None:
    link = connect(server, LinkOptions(app_name=app_name))
    try:
        with blocking_ping(admin, app_name, 300):
            first = gevent.spawn(link.command, "admin", {"ping": 1})
            gevent.sleep(0.05)
            with pytest.raises(RuntimeError, match="one request at a time"):
                link.command("admin", {"ping": 1})
            assert first.get(timeout=5) == {"ok": 1.0}
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
    finally:
        link.close()


# -- TLS -------------------------------------------------------------------------------------


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str, key: Any, issuer: str, issuer_key: Any, *, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    else:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        ).add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write_pem(path: Path, certificate: x509.Certificate, key: Any = None) -> str:
    data = certificate.public_bytes(serialization.Encoding.PEM)
    if key is not None:
        data = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a server certificate it signed (localhost, 127.0.0.1), and another CA."""
    directory = tmp_path_factory.mktemp("tls")
    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate("greenpool test CA", ca_key, "greenpool test CA", ca_key, ca=True)
    other = _certificate("another CA", other_key, "another CA", other_key, ca=True)
    leaf = _certificate("localhost", server_key, "greenpool test CA", ca_key, ca=False)
    return {
        "ca": _write_pem(directory / "ca.pem", ca),
        "other_ca": _write_pem(directory / "other-ca.pem", other),
        "cert": _write_pem(directory / "server.pem", leaf),
        "key": _write_pem(directory / "server.key", leaf, server_key),
    }


@pytest.fixture(scope="module")
def tls_server(tls_files: dict[str, str]) -> Iterator[Address]:
    with secantus(
        "--storage-path", ":memory:", "--enable-test-commands", "--standalone",
        "--tls-cert-file", tls_files["cert"], "--tls-key-file", tls_files["key"],
        "--tls-ca-file", tls_files["ca"],
    ) as address:
        yield address


def stdlib_context(cafile: str) -> Any:
    """A genuine standard-library context, even under monkey-patching."""
    context_class = monkey.get_original("ssl", "SSLContext")
    context = context_class(monkey.get_original("ssl", "PROTOCOL_TLS_CLIENT"))
    context.load_verify_locations(cafile)
    return context


def gevent_context(cafile: str) -> Any:
    context = gssl.SSLContext(gssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile)
    return context


@pytest.mark.parametrize("make_context", [stdlib_context, gevent_context])
def test_tls_with_the_right_ca(
    tls_server: Address, tls_files: dict[str, str], make_context: Any
) -> None:
    context = make_context(tls_files["ca"])
    for host in ("127.0.0.1", "localhost"):
        link = connect((host, tls_server[1]), LinkOptions(ssl_context=context))
        try:
            assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        finally:
            link.close()


def test_tls_with_the_wrong_ca(tls_server: Address, tls_files: dict[str, str]) -> None:
    options = LinkOptions(ssl_context=stdlib_context(tls_files["other_ca"]))
    with pytest.raises(AutoReconnect) as caught:
        connect(tls_server, options)
    message = str(caught.value)
    assert message.startswith(f"127.0.0.1:{tls_server[1]}: TLS handshake failed: ")
    assert "certificate verify failed" in message
    assert not handshake_completed(caught.value)


def test_tls_hostname_mismatch(tls_server: Address, tls_files: dict[str, str]) -> None:
    checking = stdlib_context(tls_files["ca"])
    options = LinkOptions(ssl_context=checking, server_hostname="db.example.com")
    with pytest.raises(AutoReconnect, match="certificate verify failed: Hostname mismatch"):
        connect(tls_server, options)
    lenient = stdlib_context(tls_files["ca"])
    lenient.check_hostname = False  # tlsAllowInvalidHostnames
    link = connect(tls_server, LinkOptions(ssl_context=lenient, server_hostname="db.example.com"))
    try:
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
    finally:
        link.close()


def test_tls_interrupt(
    tls_server: Address, tls_files: dict[str, str], app_name: str
) -> None:
    options = LinkOptions(ssl_context=stdlib_context(tls_files["ca"]), app_name=app_name)
    admin = connect(tls_server, LinkOptions(ssl_context=options.ssl_context))
    link = connect(tls_server, options)
    try:
        with blocking_ping(admin, app_name, 3000):
            worker = gevent.spawn(link.command, "admin", {"ping": 1})
            gevent.sleep(0.2)
            link.interrupt()
            # Within a few turns of the hub, long before the server answers (3 s).
            assert hub_turns_until(lambda: worker.dead) <= 3
        assert isinstance(worker.exception, PoolClearedError)
    finally:
        admin.close()


def test_tls_close_wakes_the_blocked_greenlet(
    tls_server: Address, tls_files: dict[str, str], app_name: str
) -> None:
    context = stdlib_context(tls_files["ca"])
    admin = connect(tls_server, LinkOptions(ssl_context=context))
    link = connect(tls_server, LinkOptions(ssl_context=context, app_name=app_name))
    try:
        with blocking_ping(admin, app_name, 3000):
            worker = gevent.spawn(link.command, "admin", {"ping": 1})
            gevent.sleep(0.2)
            link.close()
            worker.join(timeout=1)
        assert isinstance(worker.exception, AutoReconnect)
        assert not isinstance(worker.exception, PoolClearedError)
        assert str(worker.exception) == f"127.0.0.1:{tls_server[1]}: connection closed"
    finally:
        admin.close()


# -- SCRAM-SHA-256 -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Address]:
    """SecantusDB with --auth and one user, provisioned before auth was on."""
    storage = str(tmp_path_factory.mktemp("auth-storage"))
    with secantus("--storage-path", storage, "--standalone") as (host, port):
        client: pymongo.MongoClient[Any] = pymongo.MongoClient(
            host, port, directConnection=True, serverSelectionTimeoutMS=10_000
        )
        try:
            client.admin.command(
                "createUser", "app", pwd=PASSWORD, roles=["root"], mechanisms=["SCRAM-SHA-256"]
            )
        finally:
            client.close()
    with secantus("--storage-path", storage, "--standalone", "--auth") as address:
        yield address


def test_scram_sha_256_with_the_right_password(auth_server: Address) -> None:
    options = LinkOptions(credentials=Credentials("app", PASSWORD))
    link = connect(auth_server, options)
    try:
        reply = link.command("links", {"insert": "secured", "documents": [{"x": 1}]})
        assert reply["n"] == 1
        status = link.command("admin", {"connectionStatus": 1})["authInfo"]
        assert {"user": "app", "db": "admin"} in status["authenticatedUsers"]
    finally:
        link.close()


def test_scram_with_the_wrong_password(auth_server: Address) -> None:
    options = LinkOptions(credentials=Credentials("app", PASSWORD + "-wrong"))
    with pytest.raises(AuthenticationError) as caught:
        connect(auth_server, options)
    error = caught.value
    assert "authentication of user 'app' on 'admin' failed" in str(error)
    assert handshake_completed(error)
    for text in (str(error), repr(error), repr(error.details), repr(options)):
        assert PASSWORD not in text


def test_an_unauthenticated_link_is_refused(auth_server: Address) -> None:
    link = connect(auth_server, LinkOptions())
    try:
        with pytest.raises(OperationFailure) as caught:
            link.command("links", {"insert": "secured", "documents": [{"x": 1}]})
        assert caught.value.code == 13  # Unauthorized
    finally:
        link.close()


# -- without monkey-patching -----------------------------------------------------------------

_UNPATCHED = textwrap.dedent(
    """
    import ssl, sys, time
    import gevent
    from gevent import monkey
    from greenpool.wire.connector import connect
    from greenpool.wire.link import LinkOptions

    host, port, app_name, cafile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    assert not monkey.is_module_patched("socket") and not monkey.is_module_patched("ssl")
    context = None
    if cafile:
        context = ssl.create_default_context(cafile=cafile)
        assert type(context) is ssl.SSLContext  # the standard library's own
    options = LinkOptions(app_name=app_name, ssl_context=context)
    links = [connect((host, port), options) for _ in range(20)]
    in_flight = most = 0

    def ping(link):
        global in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        link.command("admin", {"ping": 1})
        in_flight -= 1

    started = time.monotonic()
    jobs = [gevent.spawn(ping, link) for link in links]
    gevent.joinall(jobs, timeout=30, raise_error=True)
    print(most, time.monotonic() - started)
    """
)


def run_unpatched(address: Address, app_name: str, cafile: str = "") -> tuple[int, float]:
    """The most pings in flight at once, and the seconds all took."""
    result = subprocess.run(
        [sys.executable, "-c", _UNPATCHED, address[0], str(address[1]), app_name, cafile],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    most, seconds = result.stdout.split()
    return int(most), float(seconds)


def test_links_overlap_without_monkey_patching(
    server: Address, admin: Link, app_name: str
) -> None:
    """20 pings, each held 500 ms by the server, are all in flight at once: a ping that
    blocked the process would end before the next one started."""
    with blocking_ping(admin, app_name, 500):
        in_flight, seconds = run_unpatched(server, app_name)
    assert in_flight == 20
    assert seconds > 0.45  # the server did hold them


def test_tls_links_overlap_without_monkey_patching(
    tls_server: Address, tls_files: dict[str, str], app_name: str
) -> None:
    admin = connect(tls_server, LinkOptions(ssl_context=stdlib_context(tls_files["ca"])))
    try:
        with blocking_ping(admin, app_name, 500):
            in_flight, seconds = run_unpatched(tls_server, app_name, tls_files["ca"])
    finally:
        admin.close()
    assert in_flight == 20
    assert seconds > 0.45
