"""The CMAP spec's logging tests (``logging/connection-logging.json`` and
``logging/connection-pool-options.json``, unified format, each case by name) and its
five prose tests (the CMAP tests README), each by name, against ``greenpool.Client``.

The files' "single" topology is a direct connection: to a one-node replica set (which
supports sessions, so that closing the client ends them, as the first case expects),
and, for the case that needs ``auth: true``, to a server running with ``--auth``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import monitoring as _m
from pymongo.errors import OperationFailure

import greenpool
import greenpool.pymongo
from greenpool import Client, PoolOptions
from greenpool.client.config.uri import parse_uri
from greenpool.pool.options import CMAP_OPTIONS, SPEC_NAMES
from tests.cmap_runner import SPEC_DIR
from tests.events import AllEvents
from tests.logging_unified import LoggingRunner
from tests.servers import ADMIN, AuthServer, ServerProcess, User, with_options
from tests.unified_match import load_cases

pytestmark = pytest.mark.timeout(60)

LOGGING_DIR = SPEC_DIR / "connection-monitoring-and-pooling" / "tests" / "logging"
CONNECTION_LOGGING = load_cases(LOGGING_DIR / "connection-logging.json")
POOL_OPTIONS = load_cases(LOGGING_DIR / "connection-pool-options.json")

# The CMAP spec, "Deprecated Options": waitQueueSize and waitQueueMultiple "MUST NOT be
# implemented if they do not already exist in a driver", and the pool-created message
# carries them "only ... if the driver supports this option and the user specified a
# value". greenpool never had them and refuses them by name.
_DEPRECATED = ("waitQueueSize", "waitQueueMultiple")
DEPRECATED_SKIP = (
    "the CMAP spec's own reason: waitQueueSize and waitQueueMultiple are deprecated options "
    "that 'MUST NOT be implemented if they do not already exist in a driver', and the pool "
    "created message includes them 'only ... if the driver supports this option'; greenpool "
    "never had them (it refuses them, naming them)")


@pytest.fixture(scope="module")
def single_server() -> Iterator[ServerProcess]:
    """A one-node replica set, reached directly: the "single" topology, with sessions."""
    with ServerProcess(replica_set=True) as server:
        yield server


def single_uri(server: ServerProcess) -> str:
    return with_options(server.uri, directConnection="true")


def test_the_spec_files_are_there() -> None:
    assert [t["description"] for _, t in CONNECTION_LOGGING] == [
        "Create a client, run a command, and close the client",
        "Connection checkout fails due to error establishing connection"]
    assert len(POOL_OPTIONS) == 5


def _ids(cases: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    return [test["description"] for _, test in cases]


def _needs_auth(test: dict[str, Any]) -> bool:
    return any(r.get("auth") for r in test.get("runOnRequirements") or [])


@pytest.mark.parametrize(("spec", "test"), CONNECTION_LOGGING, ids=_ids(CONNECTION_LOGGING))
def test_connection_logging(spec: dict[str, Any], test: dict[str, Any],
                            single_server: ServerProcess, auth_server: AuthServer) -> None:
    if _needs_auth(test):
        server = auth_server.server
        runner = LoggingRunner(server.uri_for(ADMIN),
                               fail_point_client=lambda: server.client(user=ADMIN))
    else:
        runner = LoggingRunner(single_uri(single_server),
                               fail_point_client=lambda: single_server.client())
    runner.run(spec, test)


@pytest.mark.parametrize(("spec", "test"), POOL_OPTIONS, ids=_ids(POOL_OPTIONS))
def test_connection_pool_options_logging(spec: dict[str, Any], test: dict[str, Any],
                                         single_server: ServerProcess) -> None:
    created = test["operations"][0]["arguments"]["entities"][0]["client"]
    if set(created.get("uriOptions") or {}) & set(_DEPRECATED):
        pytest.skip(DEPRECATED_SKIP)
    LoggingRunner(single_uri(single_server)).run(spec, test)


def test_deprecated_options_are_refused_by_name() -> None:
    """What the skip above rests on."""
    for name in _DEPRECATED:
        with pytest.raises(greenpool.ConfigurationError, match=name):
            PoolOptions({name: 5})


# -- the five prose tests --------------------------------------------------------------

ALL_OPTIONS = {"maxPoolSize": 7, "minPoolSize": 2, "maxIdleTimeMS": 60000,
               "maxConnecting": 3, "waitQueueTimeoutMS": 1500}


def test_prose_1_all_pool_options_are_specified_at_the_client_level(
        single_server: ServerProcess) -> None:
    """1. All ConnectionPoolOptions MUST be specified at the MongoClient level."""
    events = AllEvents()
    with Client(with_options(single_uri(single_server), **ALL_OPTIONS),
                event_listeners=[events]) as client:
        options = client.pool.options
        assert {SPEC_NAMES[name]: getattr(options, name) for name in CMAP_OPTIONS} == (
            ALL_OPTIONS)
    (created,) = events.of(_m.PoolCreatedEvent)
    assert created.options == ALL_OPTIONS


def test_prose_2_all_pools_of_a_client_have_the_same_options(lb_cluster: Any) -> None:
    """2. All ConnectionPoolOptions MUST be the same for all pools created by a
    MongoClient: greenpool.pymongo.MongoClient makes one pool per server, each with the
    client's options (greenpool.Client has one pool; its options are prose test 1's)."""
    events = AllEvents()
    seeds = ",".join(f"{host}:{port}" for host, port in
                     (server.address for server in lb_cluster.servers))
    uri = with_options(f"mongodb://{seeds}/", serverSelectionTimeoutMS=5000, **ALL_OPTIONS)
    client: Any = greenpool.pymongo.MongoClient(uri, event_listeners=[events])
    try:
        client.admin.command("ping")
        created = events.of(_m.PoolCreatedEvent)
        pools = {event.address: event.options for event in created}
    finally:
        client.close()
    assert set(pools) == {server.address for server in lb_cluster.servers}
    for address, options in pools.items():
        assert {k: options[k] for k in ALL_OPTIONS} == ALL_OPTIONS, address


def test_prose_3_every_pool_option_can_be_given_in_the_uri() -> None:
    """3. A user MUST be able to specify all ConnectionPoolOptions via a URI string."""
    settings = parse_uri(with_options("mongodb://h/", **ALL_OPTIONS))
    assert settings.pool.reported() == ALL_OPTIONS
    assert settings.pool == PoolOptions(ALL_OPTIONS)


def test_prose_4_cmap_events_reach_a_pymongo_listener(single_server: ServerProcess) -> None:
    """4. A user MUST be able to subscribe to Connection Monitoring Events in a manner
    idiomatic to their language and driver: a PyMongo ConnectionPoolListener, as
    event_listeners, exactly as with PyMongo."""

    class Listener(_m.ConnectionPoolListener):
        def __init__(self) -> None:
            self.names: list[str] = []

        def _record(self, event: Any) -> None:
            self.names.append(type(event).__name__)

        pool_created = pool_ready = pool_cleared = pool_closed = _record
        connection_created = connection_ready = connection_closed = _record
        connection_check_out_started = connection_check_out_failed = _record
        connection_checked_out = connection_checked_in = _record

    listener = Listener()
    with Client(single_uri(single_server), event_listeners=[listener]) as client:
        client.command("admin", {"ping": 1})
    assert listener.names[:1] == ["PoolCreatedEvent"]
    for name in ("PoolReadyEvent", "ConnectionCreatedEvent", "ConnectionReadyEvent",
                 "ConnectionCheckOutStartedEvent", "ConnectionCheckedOutEvent",
                 "ConnectionCheckedInEvent", "ConnectionClosedEvent", "PoolClosedEvent"):
        assert name in listener.names, name
    assert listener.names[-1] == "PoolClosedEvent"


def test_prose_5_a_failed_connection_set_up_is_a_connection_error(
        auth_server: AuthServer) -> None:
    """5. When a check out attempt fails because connection set up throws an error, assert
    that a ConnectionCheckOutFailedEvent with reason="connectionError" is emitted."""
    events = AllEvents()
    wrong = User(ADMIN.name, "not-the-password")
    uri = with_options(auth_server.server.uri_for(wrong), serverSelectionTimeoutMS=5000)
    with Client(uri, event_listeners=[events]) as client, pytest.raises(OperationFailure):
        client.command("admin", {"ping": 1})
    failed = events.of(_m.ConnectionCheckOutFailedEvent)
    assert [e.reason for e in failed] == ["connectionError"]
    assert failed[0].reason == _m.ConnectionCheckOutFailedReason.CONN_ERROR
