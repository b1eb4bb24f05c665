"""greenpool.Client against a real server (SecantusDB, or $GREENPOOL_TEST_URI).

Fail points are scoped to each test by appName, and switched off after it.
"""

from __future__ import annotations

import contextlib
import gc
import random
import time
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from pymongo import MongoClient
from pymongo import monitoring as _m
from pymongo.errors import (
    AutoReconnect,
    InvalidName,
    InvalidOperation,
    NotPrimaryError,
    OperationFailure,
    ServerSelectionTimeoutError,
)

import greenpool
from greenpool import Client, ConfigurationError, PoolClearedError
from greenpool.errors import AuthenticationError
from tests.events import AllEvents
from tests.failpoints import failpoint
from tests.fake_server import FakeServer, block
from tests.servers import ServerProcess, unique, with_options

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def app_name() -> str:
    return unique("client")


@pytest.fixture
def events() -> AllEvents:
    return AllEvents()


@pytest.fixture
def client(mongodb_uri: str, app_name: str, events: AllEvents) -> Iterator[Client]:
    with Client(with_options(mongodb_uri, appName=app_name, maxPoolSize=5),
                event_listeners=[events]) as client:
        yield client


def fail(app_name: str, commands: list[str], mode: Any = None, **data: Any) -> dict[str, Any]:
    return {"configureFailPoint": "failCommand", "mode": mode or {"times": 1},
            "data": {"failCommands": commands, "appName": app_name, **data}}


# -- commands -----------------------------------------------------------------------------


def test_command_round_trip(client: Client) -> None:
    assert client.command("admin", {"ping": 1})["ok"] == 1
    coll = unique("docs")
    reply = client.command("test", {"insert": coll, "documents": [{"_id": 1, "x": "y"}]})
    assert reply["n"] == 1
    found = list(client.find("test", coll, {"_id": 1}))
    assert found == [{"_id": 1, "x": "y"}]


def test_refused_command_carries_code_and_labels(
        client: Client, mongodb_uri: str, app_name: str) -> None:
    with pytest.raises(OperationFailure) as refused:
        client.command("admin", {"noSuchCommand": 1})
    assert refused.value.code == 59
    assert refused.value.details["codeName"] == "CommandNotFound"
    with failpoint(mongodb_uri, fail(app_name, ["ping"], errorCode=2,
                                     errorLabels=["SomeLabel"])), \
            pytest.raises(OperationFailure) as labelled:
        client.command("admin", {"ping": 1})
    assert labelled.value.code == 2
    assert labelled.value.has_error_label("SomeLabel")
    assert client.command("admin", {"ping": 1})["ok"] == 1


def test_bad_arguments_are_refused(client: Client) -> None:
    with pytest.raises(InvalidOperation, match="non-empty document"):
        client.command("admin", {})
    with pytest.raises(InvalidName, match="empty string"):
        client.command("", {"ping": 1})
    with pytest.raises(ValueError, match=r"batch_size .* -1"):
        client.find("test", "c", {}, batch_size=-1)


# -- cursors ----------------------------------------------------------------------------


def open_cursor_count(client: Client) -> int:
    status = client.command("admin", {"serverStatus": 1})
    return int(status["metrics"]["cursor"]["open"]["total"])


def test_cursor_closed_half_way_is_killed(client: Client, events: AllEvents) -> None:
    coll = unique("thousand")
    client.command("test", {"insert": coll, "documents": [{"i": i} for i in range(1000)]})
    before = open_cursor_count(client)
    with client.find("test", coll, {}, batch_size=7, sort={"i": 1}) as cursor:
        seen = [next(cursor)["i"] for _ in range(500)]
        assert seen == list(range(500))
        cursor_id = cursor.id
        assert cursor_id != 0
        assert open_cursor_count(client) == before + 1
    assert not cursor.alive
    kills = [e for e in events.of(_m.CommandSucceededEvent) if e.command_name == "killCursors"]
    assert len(kills) == 1
    assert kills[0].reply["cursorsKilled"] == [cursor_id]
    assert open_cursor_count(client) == before
    get_mores = [e for e in events.of(_m.CommandStartedEvent) if e.command_name == "getMore"]
    assert all(e.command["batchSize"] == 7 for e in get_mores)
    assert len(get_mores) == 500 // 7  # 7 in the first batch, 7 per getMore


def test_cursor_to_the_end(client: Client, events: AllEvents) -> None:
    coll = unique("hundred")
    client.command("test", {"insert": coll, "documents": [{"i": i} for i in range(100)]})
    cursor = client.cursor("test", {"aggregate": coll, "pipeline": [{"$sort": {"i": 1}}],
                                    "cursor": {"batchSize": 10}}, batch_size=30)
    assert [doc["i"] for doc in cursor] == list(range(100))
    assert cursor.id == 0
    cursor.close()  # nothing to kill
    assert not [e for e in events.of(_m.CommandStartedEvent) if e.command_name == "killCursors"]


def test_a_cursor_serves_one_greenlet_at_a_time(
        client: Client, mongodb_uri: str, app_name: str) -> None:
    coll = unique("shared")
    client.command("test", {"insert": coll, "documents": [{"i": i} for i in range(10)]})
    cursor = client.find("test", coll, {}, batch_size=2)
    for _ in range(2):
        next(cursor)
    with failpoint(mongodb_uri, fail(app_name, ["getMore"], blockConnection=True,
                                     blockTimeMS=300)):
        busy = gevent.spawn(next, cursor)
        gevent.sleep(0.05)
        with pytest.raises(InvalidOperation, match="another greenlet"):
            next(cursor)
        with pytest.raises(InvalidOperation, match="another greenlet"):
            cursor.close()
        busy.join(5)
    assert busy.successful()
    cursor.close()
    assert not cursor.alive


# -- command monitoring -------------------------------------------------------------------


def test_command_events(client: Client, events: AllEvents) -> None:
    client.command("admin", {"ping": 1})
    with pytest.raises(OperationFailure):
        client.command("admin", {"noSuchCommand": 1})
    started, succeeded, failed = (events.of(kind) for kind in (
        _m.CommandStartedEvent, _m.CommandSucceededEvent, _m.CommandFailedEvent))
    assert [e.command_name for e in started] == ["ping", "noSuchCommand"]
    assert started[0].request_id == succeeded[0].request_id
    assert started[1].request_id == failed[0].request_id
    assert started[0].database_name == "admin"
    assert started[0].command["ping"] == 1
    assert started[0].connection_id == client.address
    assert isinstance(started[0].server_connection_id, int)
    assert succeeded[0].reply["ok"] == 1
    assert failed[0].failure["code"] == 59


def test_sensitive_commands_are_redacted(client: Client, events: AllEvents) -> None:
    with contextlib.suppress(OperationFailure):  # the server may or may not refuse it
        client.command("admin", {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                                 "payload": b"n,,n=user,r=secret-nonce"})
    with pytest.raises(OperationFailure):
        client.command("admin", {"createUser": "u", "pwd": "secret-password", "roles": 7})
    with contextlib.suppress(OperationFailure):
        client.command("admin", {"hello": 1, "speculativeAuthenticate": {
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": b"n,,n=u,r=nonce"}})
    started = events.of(_m.CommandStartedEvent)
    assert [e.command for e in started] == [{}, {}, {}]
    outcomes = events.of(_m.CommandSucceededEvent, _m.CommandFailedEvent)
    assert len(outcomes) == 3
    assert all(e.reply == {} for e in outcomes if isinstance(e, _m.CommandSucceededEvent))
    # A refusal keeps only what says why (the spec's Security section), never the secret.
    failures = [e.failure for e in outcomes if isinstance(e, _m.CommandFailedEvent)]
    assert failures and all(set(f) <= {"code", "codeName", "errorLabels"} for f in failures)
    assert "secret" not in repr(failures)


def test_a_raising_listener_does_not_break_commands(mongodb_uri: str) -> None:
    class Broken(_m.CommandListener):
        def started(self, event: Any) -> None:
            raise RuntimeError("listener bug")

        succeeded = failed = started

    with Client(mongodb_uri, event_listeners=[Broken()]) as client:
        assert client.command("admin", {"ping": 1})["ok"] == 1


# -- sessions and transactions -------------------------------------------------------------


def count(client: Client, coll: str) -> int:
    return int(client.command("test", {"count": coll})["n"])


def test_transactions_commit_and_abort(client: Client, events: AllEvents) -> None:
    coll = unique("txn")
    client.command("test", {"create": coll})
    with client.start_session() as session:
        session.start_transaction()
        client.command("test", {"insert": coll, "documents": [{"a": 1}]}, session=session)
        session.abort_transaction()
        assert count(client, coll) == 0

        def insert(s: greenpool.Session) -> int:
            client.command("test", {"insert": coll, "documents": [{"b": 1}]}, session=s)
            return 7

        assert session.with_transaction(insert) == 7
        assert count(client, coll) == 1
        lsid = session.lsid
    sent = events.of(_m.CommandStartedEvent)
    inserts = [e.command for e in sent if e.command_name == "insert"]
    assert all(c["lsid"] == lsid and c["autocommit"] is False for c in inserts)
    assert [c.get("startTransaction") for c in inserts] == [True, True]
    assert [c["txnNumber"] for c in inserts] == [1, 2]
    names = [e.command_name for e in sent]
    assert "abortTransaction" in names and "commitTransaction" in names
    client.close()
    end = [e.command for e in events.of(_m.CommandStartedEvent) if e.command_name == "endSessions"]
    assert end and lsid in end[0]["endSessions"]


# -- authentication and TLS ------------------------------------------------------------------


def test_scram_sha_256(auth_server: Any) -> None:
    with Client(auth_server.uri_for(auth_server.user)) as client:
        assert client.command("test", {"count": unique("c")})["ok"] == 1


def test_scram_sha_1(auth_server: Any) -> None:
    uri = auth_server.uri_for(auth_server.sha1_user)
    assert "authMechanism=SCRAM-SHA-1" in uri
    with Client(uri) as client:
        assert client.command("admin", {"ping": 1})["ok"] == 1


def test_wrong_password(auth_server: Any, events: AllEvents) -> None:
    uri = with_options(auth_server.uri.replace("://", "://greenpool:not-the-password@"),
                       heartbeatFrequencyMS=500)
    with Client(uri, event_listeners=[events]) as client:
        with pytest.raises(AuthenticationError) as refused:
            client.command("admin", {"ping": 1})
        assert "not-the-password" not in str(refused.value)
        assert "greenpool" in str(refused.value)
        assert "not-the-password" not in repr(client.settings)
        # SDAM cleared the pool; the monitor's next check makes it ready again.
        events.wait_for(_m.PoolClearedEvent)
        deadline = time.monotonic() + 5
        while client.stats().state != "ready":
            assert time.monotonic() < deadline, "the pool stayed paused"
            gevent.sleep(0.05)
        with pytest.raises(AuthenticationError):
            client.command("admin", {"ping": 1})


def test_tls(tls_server: Any) -> None:
    with Client(tls_server.uri) as client:
        assert client.command("admin", {"ping": 1})["ok"] == 1


def test_tls_with_the_wrong_ca(tls_server: Any) -> None:
    uri = (f"mongodb://{tls_server.host}:{tls_server.port}/?tls=true&serverSelectionTimeoutMS=1500"
           f"&tlsCAFile={tls_server.files.wrong_ca_file}")
    with Client(uri) as client, pytest.raises(ServerSelectionTimeoutError,
                                              match="certificate verify failed"):
        client.command("admin", {"ping": 1})


# -- monitoring and SDAM -------------------------------------------------------------------------


def test_monitor_makes_the_pool_ready(mongodb_uri: str, events: AllEvents) -> None:
    with Client(mongodb_uri, event_listeners=[events]) as client:
        events.wait_for(_m.PoolReadyEvent)
        names = events.names(object)
        assert names.index("ServerHeartbeatSucceededEvent") < names.index("PoolReadyEvent")
        (server,) = client.topology.servers.values()
        assert server.description.server_type_name == "Standalone"
    assert events.names(_m.TopologyEvent, _m.ServerClosedEvent)[-2:] == [
        "TopologyDescriptionChangedEvent", "TopologyClosedEvent"]


def test_failed_check_clears_then_recovers(
        mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    uri = with_options(mongodb_uri, appName=app_name, heartbeatFrequencyMS=500)
    with Client(uri, event_listeners=[events]) as client:
        client.command("admin", {"ping": 1})
        with failpoint(mongodb_uri, fail(app_name, ["hello"], {"times": 2}, errorCode=91)):
            cleared = events.wait_for(_m.PoolClearedEvent)
            assert cleared[0].interrupt_connections is False
            events.wait_for(_m.PoolReadyEvent, 2)
        assert client.command("admin", {"ping": 1})["ok"] == 1
        assert events.of(_m.ServerHeartbeatFailedEvent)


def test_check_timeout_interrupts_in_use_connections(
        mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    uri = with_options(mongodb_uri, appName=app_name, heartbeatFrequencyMS=500,
                       connectTimeoutMS=300)
    with Client(uri, event_listeners=[events]) as client:
        client.command("admin", {"ping": 1})
        # Interrupted: the server would have answered after its 3 s block instead. Three
        # times: the ping, the monitor's hello, and the RTT monitor's hello (every 500 ms on
        # its own connection, with the same appName), which may come before the monitor's.
        with failpoint(mongodb_uri, fail(app_name, ["ping", "hello"], {"times": 3},
                                         blockConnection=True, blockTimeMS=3000)), \
                pytest.raises(PoolClearedError) as interrupted:
            client.command("admin", {"ping": 1})
        assert "interrupted" in str(interrupted.value)
        assert events.of(_m.PoolClearedEvent)[0].interrupt_connections is True


@pytest.fixture
def quick_client(mongodb_uri: str, app_name: str, events: AllEvents) -> Iterator[Client]:
    """A client whose streaming monitor's awaited hello comes back within half a second
    (heartbeatFrequencyMS): after a state change error the server is Unknown until then,
    as the Server Monitoring spec says, and the next command waits for it."""
    with Client(with_options(mongodb_uri, appName=app_name, maxPoolSize=5,
                             heartbeatFrequencyMS=500), event_listeners=[events]) as client:
        yield client


def test_shutdown_error_clears_the_pool(
        quick_client: Client, mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    client = quick_client
    client.command("admin", {"ping": 1})
    with failpoint(mongodb_uri, fail(app_name, ["ping"], errorCode=91)), \
            pytest.raises(NotPrimaryError):
        client.command("admin", {"ping": 1})
    assert len(events.of(_m.PoolClearedEvent)) == 1
    assert client.command("admin", {"ping": 1})["ok"] == 1


def test_not_primary_on_a_modern_server_keeps_connections(
        quick_client: Client, mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    client = quick_client
    client.command("admin", {"ping": 1})
    with failpoint(mongodb_uri, fail(app_name, ["ping"], errorCode=10107)), \
            pytest.raises(NotPrimaryError):
        client.command("admin", {"ping": 1})
    unknown = [e for e in events.of(_m.ServerDescriptionChangedEvent)
               if e.new_description.server_type_name == "Unknown"]
    assert unknown, "the server was not marked Unknown"
    assert not events.of(_m.PoolClearedEvent)
    assert client.command("admin", {"ping": 1})["ok"] == 1


def test_errors_on_stale_connections_are_ignored(
        client: Client, mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    warm = [gevent.spawn(client.command, "admin", {"ping": 1}) for _ in range(2)]
    gevent.joinall(warm)
    assert client.stats().total == 2
    # Both pings are in flight when the first error clears the pool; the
    # second error comes from a connection of the old generation.
    with failpoint(mongodb_uri, fail(app_name, ["ping"], {"times": 2}, errorCode=91,
                                     blockConnection=True, blockTimeMS=200)):
        both = [gevent.spawn(client.command, "admin", {"ping": 1}) for _ in range(2)]
        gevent.joinall(both)
    assert all(isinstance(g.exception, NotPrimaryError) for g in both)
    assert len(events.of(_m.PoolClearedEvent)) == 1, "\n".join(map(repr, events.events))


# -- the server goes away and comes back ----------------------------------------------------------


def test_server_killed_and_restarted(app_name: str, events: AllEvents) -> None:
    with ServerProcess() as server:
        uri = with_options(server.uri, appName=app_name, maxPoolSize=5,
                           heartbeatFrequencyMS=500, serverSelectionTimeoutMS=15000)
        with Client(uri, event_listeners=[events]) as client:
            gevent.joinall([gevent.spawn(client.command, "admin", {"ping": 1})
                            for _ in range(5)])
            admin: MongoClient[dict[str, Any]] = MongoClient(server.uri, directConnection=True)
            admin.admin.command(fail(app_name, ["ping"], "alwaysOn", blockConnection=True,
                                     blockTimeMS=5000))
            admin.close()
            work = [gevent.spawn(client.command, "admin", {"ping": 1}) for _ in range(40)]
            gevent.sleep(0.3)
            assert client.stats().in_use == 5 and client.stats().waiting == 35
            server.kill()
            killed_at = time.monotonic()
            gevent.joinall(work, timeout=10)
            assert all(g.ready() for g in work), "an operation hung"
            # At once, far from the server's 5 s block, which nothing waited out.
            assert time.monotonic() - killed_at < 4
            errors = [type(g.exception) for g in work]
            assert errors.count(AutoReconnect) == 5, errors
            assert errors.count(PoolClearedError) == 35, errors
            server.restart()
            deadline = time.monotonic() + 10
            while client.stats().state != "ready":
                assert time.monotonic() < deadline, "the monitor never brought the pool back"
                gevent.sleep(0.05)
            again = [gevent.spawn(client.command, "admin", {"ping": 1}) for _ in range(20)]
            gevent.joinall(again, timeout=10, raise_error=True)
            assert all(g.value["ok"] == 1 for g in again)


# -- kill safety, closing, configuration ---------------------------------------------------


def test_kills_never_leak_connections(client: Client) -> None:
    rng = random.Random(7)

    def ping() -> None:
        client.command("admin", {"ping": 1})

    for _ in range(10):
        greenlets = [gevent.spawn(ping) for _ in range(50)]
        gevent.sleep(rng.uniform(0, 0.01))
        for greenlet in rng.sample(greenlets, 25):
            greenlet.kill(block=False)
        gevent.joinall(greenlets, timeout=10)
        assert all(g.ready() for g in greenlets)
        client.pool._check_invariants()
    stats = client.stats()
    assert stats.in_use == 0 and stats.pending == 0 and stats.waiting == 0
    assert client.command("admin", {"ping": 1})["ok"] == 1


@pytest.mark.parametrize("route", ["plain", "session"])
def test_a_kill_in_a_command_is_never_replaced_by_the_greenlets_own_timeout(
        route: str) -> None:
    """A greenlet killed while its command waits for the server checks its
    connection in without yielding: a listener that blocks in
    connection_checked_in would otherwise let the greenlet's own
    gevent.Timeout fire there and replace the kill (the greenlet would
    carry on as if its request had merely timed out). Both the hot path
    (no session, no timeout) and the general one (a session) are tried."""

    class SlowCheckin(_m.ConnectionPoolListener):
        def connection_checked_in(self, event: object) -> None:
            gevent.sleep(1.0)

    with FakeServer(handlers={"ping": block(3600)}) as server:
        host, port = server.address
        with Client(f"mongodb://{host}:{port}/?directConnection=true",
                    event_listeners=[SlowCheckin()]) as client:
            client.topology.select()
            outcome: list[str] = []

            def victim() -> None:
                own = gevent.Timeout(0.5)
                try:
                    with own, contextlib.ExitStack() as stack:
                        session = (stack.enter_context(client.start_session())
                                   if route == "session" else None)
                        client.command("admin", {"ping": 1}, session=session)
                except gevent.Timeout as fired:
                    outcome.append("own timeout" if fired is own else "other timeout")
                    return
                outcome.append("finished")

            greenlet = gevent.spawn(victim)
            with gevent.Timeout(5):  # until the ping reaches the server
                while not any(r.name == "ping" for r in server.requests):
                    gevent.sleep(0.005)
            greenlet.kill(block=True, timeout=5)
            assert greenlet.dead and outcome == [], f"the kill was lost: {outcome}"
            gevent.sleep(1.2)  # the deferred ConnectionCheckedIn is delivered
            stats = client.stats()
            assert (stats.in_use, stats.pending, stats.waiting) == (0, 0, 0), stats


def live_greenlets() -> set[int]:
    live = set()
    for obj in gc.get_objects():
        try:
            if isinstance(obj, gevent.Greenlet) and not obj.dead:
                live.add(id(obj))
        except ReferenceError:  # a weakref.proxy (PyMongo 4.9 keeps some) whose referent died
            continue
    return live


def test_close_stops_everything(mongodb_uri: str) -> None:
    gevent.sleep(0)
    before = live_greenlets()
    client = Client(with_options(mongodb_uri, minPoolSize=2))
    client.command("admin", {"ping": 1})
    cursor_coll = unique("open")
    client.command("test", {"insert": cursor_coll, "documents": [{}, {}, {}]})
    cursor = client.find("test", cursor_coll, {}, batch_size=1)
    client.close()
    client.close()  # idempotent
    assert not cursor.alive
    gevent.sleep(0.05)
    assert live_greenlets() <= before
    with pytest.raises(InvalidOperation, match="closed"):
        client.command("admin", {"ping": 1})
    assert "closed" in repr(client)


@pytest.mark.parametrize(("uri", "message"), [
    ("mongodb://u@127.0.0.1:1/?authMechanism=MONGODB-X509", "MONGODB-X509"),
    ("mongodb://127.0.0.1:1/?tls=true&tlsCAFile=/no/such/ca.pem", "tlsCAFile.*/no/such/ca.pem"),
])
def test_configuration_errors(uri: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Client(uri)


def test_listeners_are_checked() -> None:
    with pytest.raises(TypeError, match="PyMongo listeners"):
        Client("mongodb://127.0.0.1:1", event_listeners=[object()])


# -- implicit sessions ------------------------------------------------------------------------


def lsids_of(events: AllEvents, name: str) -> list[Any]:
    return [e.command.get("lsid") for e in events.of(_m.CommandStartedEvent)
            if e.command_name == name]


def test_implicit_sessions_are_reused(client: Client, events: AllEvents) -> None:
    coll = unique("implicit")
    client.command("test", {"insert": coll, "documents": [{"i": i} for i in range(5)]})
    client.command("test", {"count": coll})
    first, second = lsids_of(events, "insert")[0], lsids_of(events, "count")[0]
    assert first is not None and first == second
    with client.find("test", coll, {}, batch_size=2) as cursor:
        assert len(list(cursor)) == 5
    assert set(map(str, lsids_of(events, "find") + lsids_of(events, "getMore"))) == {str(first)}


def test_a_network_error_discards_the_implicit_session(
        client: Client, mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    client.command("admin", {"ping": 1})
    with failpoint(mongodb_uri, fail(app_name, ["ping"], closeConnection=True)), \
            pytest.raises(AutoReconnect):
        client.command("admin", {"ping": 1})
    client.command("admin", {"ping": 1})
    first, dirty, after = lsids_of(events, "ping")
    assert first == dirty and after != dirty


def test_a_kill_mid_command_discards_the_implicit_session(
        client: Client, mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    client.command("admin", {"ping": 1})
    with failpoint(mongodb_uri, fail(app_name, ["ping"], blockConnection=True,
                                     blockTimeMS=1000)):
        with pytest.raises(gevent.Timeout), gevent.Timeout(0.2):
            client.command("admin", {"ping": 1})
        client.command("admin", {"ping": 1})
    first, killed, after = lsids_of(events, "ping")
    assert first == killed and after != killed


# -- transactions and the pool --------------------------------------------------------------


def test_no_connection_in_a_transaction_is_transient_and_starts_nothing(
        mongodb_uri: str, events: AllEvents) -> None:
    uri = with_options(mongodb_uri, maxPoolSize=1, waitQueueTimeoutMS=50)
    with Client(uri, event_listeners=[events]) as client, client.start_session() as session:
        coll = unique("txn_wait")
        client.command("test", {"create": coll})
        held = client.pool.checkout()
        session.start_transaction()
        with pytest.raises(greenpool.WaitQueueTimeoutError) as timed_out:
            client.command("test", {"insert": coll, "documents": [{}]}, session=session)
        assert timed_out.value.has_error_label("TransientTransactionError")
        assert session.state is greenpool.TransactionState.STARTING
        client.pool.checkin(held)
        client.command("test", {"insert": coll, "documents": [{}]}, session=session)
        session.commit_transaction()
        inserts = [e.command for e in events.of(_m.CommandStartedEvent)
                   if e.command_name == "insert"]
        assert len(inserts) == 1 and inserts[0]["startTransaction"] is True


# -- closing when things go wrong ------------------------------------------------------------


def test_close_does_not_wait_for_an_unreachable_server(app_name: str) -> None:
    with ServerProcess() as server:
        uri = with_options(server.uri, appName=app_name, serverSelectionTimeoutMS=5000)
        client = Client(uri)
        coll = unique("gone")
        client.command("test", {"insert": coll, "documents": [{}, {}, {}]})
        cursors = [client.find("test", coll, {}, batch_size=1) for _ in range(3)]
        session = client.start_session()
        session.start_transaction()
        client.command("test", {"insert": coll, "documents": [{}]}, session=session)
        server.kill()
        with pytest.raises(AutoReconnect):
            client.command("admin", {"ping": 1})  # the server is Unknown now
        started = time.monotonic()
        client.close()
        # Far from serverSelectionTimeoutMS (5 s), which a close that waited for the
        # server would take: half of it is a bound a busy machine meets.
        assert time.monotonic() - started < 2.5
        assert client.closed and session.ended and not any(c.alive for c in cursors)
        assert client.stats().state == "closed"


def test_close_from_a_listener_stops_the_monitor(mongodb_uri: str) -> None:
    class CloseOnHeartbeat(_m.ServerHeartbeatListener):
        client: Client | None = None
        beats = 0

        def started(self, event: Any) -> None:
            pass

        def succeeded(self, event: Any) -> None:
            self.beats += 1
            if self.client is not None and self.beats == 2:
                self.client.close()  # in the monitor's own greenlet

        def failed(self, event: Any) -> None:
            pass

    listener = CloseOnHeartbeat()
    client = Client(with_options(mongodb_uri, heartbeatFrequencyMS=500),
                    event_listeners=[listener])
    listener.client = client
    deadline = time.monotonic() + 10
    while not client.closed:
        assert time.monotonic() < deadline, "the listener never closed the client"
        gevent.sleep(0.05)
    beats = listener.beats
    gevent.sleep(1.5)
    assert listener.beats == beats
