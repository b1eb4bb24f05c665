"""Tests run the way most greenpool users run: under gevent's monkey-patching."""

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_leftover_greenlets():
    """Fail a test that leaves the hub with greenlets still scheduled to run."""
    yield
    gevent.sleep(0)


# -- Servers for integration tests (tests/servers.py) ----------------------------------------
# Session-scoped: each starts once, on first use, and is stopped at the end of the session
# whatever the tests did. A test that kills or restarts a server starts its own ServerProcess.

from collections.abc import Iterator  # noqa: E402

from tests.servers import (  # noqa: E402
    ADMIN,
    POOL_USER,
    SHA1_USER,
    AuthServer,
    ServerProcess,
    TLSServer,
    make_tls_files,
    standalone_uri,
)


@pytest.fixture(scope="session")
def mongodb_uri() -> Iterator[str]:
    """A standalone SecantusDB's URI, or ``$GREENPOOL_TEST_URI`` when set (nothing started)."""
    with standalone_uri() as uri:
        yield uri


@pytest.fixture(scope="session")
def replset_uri() -> Iterator[str]:
    """The URI of a SecantusDB presenting a one-node replica set ``secantus`` (transactions)."""
    with ServerProcess(replica_set=True) as server:
        yield server.uri


@pytest.fixture(scope="session")
def auth_server() -> Iterator[AuthServer]:
    """A standalone SecantusDB with ``--auth`` and the users ADMIN, POOL_USER and SHA1_USER."""
    with ServerProcess(users=[ADMIN, POOL_USER, SHA1_USER]) as server:
        yield AuthServer(server)


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSServer]:
    """A standalone SecantusDB serving TLS, with the CA and client certificates it trusts."""
    files = make_tls_files(tmp_path_factory.mktemp("tls"))
    with ServerProcess(tls=files) as server:
        yield TLSServer(server, files)
