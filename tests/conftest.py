"""Tests run the way most greenpool users run: under gevent's monkey-patching."""

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
import pytest  # noqa: E402

# The pool's tests run with and without a listener (tests/listening.py).
from tests.listening import listening  # noqa: E402, F401

# The long runs, left out unless asked for (tests/slow_tests.py).
pytest_plugins = ["tests.slow_tests"]

# A run without the spec files says so loudly, and fails in CI (tests/spec_files.py).
from tests.spec_files import (  # noqa: E402, F401
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_unconfigure,
)


@pytest.fixture(autouse=True)
def _no_leftover_greenlets():
    """Fail a test that leaves the hub with greenlets still scheduled to run."""
    yield
    gevent.sleep(0)


# -- Servers for integration tests (tests/servers.py) ----------------------------------------
# Session-scoped: each starts once, on first use, and is stopped at the end of the session
# whatever the tests did. A test that kills or restarts a server starts its own ServerProcess.

from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

from pymongo import MongoClient  # noqa: E402

from greenpool.testing.replset import ReplicaSet  # noqa: E402
from tests.servers import (  # noqa: E402
    ADMIN,
    POOL_USER,
    SHA1_USER,
    AuthServer,
    ServerProcess,
    TLSServer,
    make_tls_files,
    restore_set,
    standalone_uri,
)
from tests.unified.deployment import Deployment  # noqa: E402


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


@pytest.fixture(scope="module")
def deployment(replset_uri: str) -> Iterator[Deployment]:
    """The unified runner's view of ``replset_uri``: the server, and the runner's own
    PyMongo client for initial data and outcomes (the spec modules' fixture)."""
    admin: MongoClient[dict[str, Any]]
    with MongoClient(replset_uri, directConnection=True,
                     serverSelectionTimeoutMS=10_000) as admin:
        yield Deployment.of(admin, auth=False)


@pytest.fixture(scope="module")
def module_set() -> Iterator[ReplicaSet]:
    """A three-member replica set on the emulator, for one module's tests."""
    with ReplicaSet(3) as members:
        yield members


@pytest.fixture
def rs(module_set: ReplicaSet) -> Iterator[ReplicaSet]:
    """The module's set, restored after the test (tests/servers.py restore_set)."""
    yield module_set
    restore_set(module_set)


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


# -- A load balancer in front of two servers (tests/lb_proxy.py) -----------------------------

from tests.lb_proxy import LBCluster, LBProxy  # noqa: E402


@pytest.fixture(scope="session")
def lb_cluster() -> Iterator[LBCluster]:
    """A round-robin load balancer (in this process) in front of two SecantusDB servers.

    Backend 0 and 1 are one-node replica sets (transactions work); each backend's hellos
    carry its own ``serviceId``. Prefer the ``lb`` fixture, which resets fail points and
    failure switches after the test.
    """
    with (
        ServerProcess(replica_set=True) as first,
        ServerProcess(replica_set=True) as second,
        LBProxy([first.address, second.address]) as proxy,
    ):
        yield LBCluster(proxy, [first, second])


@pytest.fixture(scope="session")
def lb_uri(lb_cluster: LBCluster) -> str:
    """``mongodb://127.0.0.1:<port>/?loadBalanced=true``: the load balancer of ``lb_cluster``."""
    return lb_cluster.uri


@pytest.fixture
def lb(lb_cluster: LBCluster) -> Iterator[LBCluster]:
    """``lb_cluster``, with every backend up and without fail point after the test."""
    try:
        yield lb_cluster
    finally:
        lb_cluster.reset()


@pytest.fixture(scope="session")
def lb_single_cluster(lb_cluster: LBCluster) -> Iterator[LBCluster]:
    """A second load balancer in front of ``lb_cluster``'s backend 0 only, with the same
    ``serviceId``: the Load Balancer tests' ``SINGLE_MONGOS_LB_URI`` (``lb_cluster`` is their
    ``MULTI_MONGOS_LB_URI``)."""
    server = lb_cluster.servers[0]
    with LBProxy([server.address], service_ids=lb_cluster.service_ids[:1]) as proxy:
        yield LBCluster(proxy, [server])
