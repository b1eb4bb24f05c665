"""greenpool.Client's retries (the Retryable Reads and Writes specs, and the ``retry=``
override) against SecantusDB and the scripted server; the specs' own files run in
tests/test_retryable_spec.py.

Fail points are scoped to each test by appName, and switched off after it. A closed
connection marks the server Unknown, so a retry waits for the monitor's next check:
minHeartbeatFrequencyMS is 10 ms here (tests/test_failover.py checks the real 500 ms).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from pymongo import monitoring as _m
from pymongo.errors import AutoReconnect, InvalidOperation, NotPrimaryError

from greenpool import Client
from greenpool.client.topology import monitor
from tests.events import AllEvents
from tests.failpoints import failpoint
from tests.fake_server import HANG_UP, FakeServer, Request
from tests.lb_proxy import LBCluster
from tests.servers import with_options

pytestmark = pytest.mark.timeout(60)


def fail(app_name: str, commands: list[str], times: int = 1, **data: Any) -> dict[str, Any]:
    return {"configureFailPoint": "failCommand", "mode": {"times": times},
            "data": {"failCommands": commands, "appName": app_name, **data}}


def started(events: AllEvents, name: str) -> list[dict[str, Any]]:
    return [e.command for e in events.of(_m.CommandStartedEvent) if e.command_name == name]


@pytest.fixture(autouse=True)
def _quick_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "MIN_HEARTBEAT_FREQUENCY", 0.01)


@pytest.fixture
def app_name() -> str:
    return f"retries_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def events() -> AllEvents:
    return AllEvents()


@pytest.fixture
def replset(replset_uri: str, app_name: str, events: AllEvents) -> Iterator[Client]:
    uri = with_options(replset_uri, directConnection="true", appName=app_name)
    with Client(uri, event_listeners=[events]) as client:
        yield client


# -- reads ---------------------------------------------------------------------------------


def test_a_read_is_retried_once_on_a_new_connection(
        replset: Client, replset_uri: str, app_name: str, events: AllEvents) -> None:
    replset.command("db", {"insert": "reads", "documents": [{"_id": 1}]})
    with failpoint(replset_uri, fail(app_name, ["find"], closeConnection=True)), \
            replset.find("db", "reads", {"_id": 1}) as cursor:
        assert list(cursor) == [{"_id": 1}]
    with failpoint(replset_uri, fail(app_name, ["count"], closeConnection=True)):
        assert replset.command("db", {"count": "reads"})["n"] == 1
    finds = started(events, "find")
    assert len(finds) == 2 and len(started(events, "count")) == 2
    # The retry runs in the failed attempt's implicit session, dirty as it is (the
    # Sessions spec); then that session is dropped, and the next command's differs.
    assert finds[0]["lsid"] == finds[1]["lsid"]
    replset.command("db", {"ping": 1})
    assert started(events, "ping")[-1]["lsid"] != finds[0]["lsid"]


def test_retries_can_be_turned_off_per_client_and_per_call(
        replset_uri: str, app_name: str, events: AllEvents) -> None:
    uri = with_options(replset_uri, directConnection="true", appName=app_name,
                       retryReads="false")
    with Client(uri, event_listeners=[events]) as client:
        with failpoint(replset_uri, fail(app_name, ["count"], closeConnection=True)), \
                pytest.raises(AutoReconnect):
            client.command("db", {"count": "reads"})
        # retry=True on the call wins over retryReads=false...
        with failpoint(replset_uri, fail(app_name, ["count"], closeConnection=True)):
            client.command("db", {"count": "reads"}, retry=True)
    # ...and retry=False over the default.
    with Client(with_options(replset_uri, directConnection="true", appName=app_name),
                event_listeners=[events]) as client, \
            failpoint(replset_uri, fail(app_name, ["count"], closeConnection=True)), \
            pytest.raises(AutoReconnect):
        client.command("db", {"count": "reads"}, retry=False)
    assert len(started(events, "count")) == 4
    with Client(uri) as client, pytest.raises(
            TypeError, match="retry must be None, True or False, not 'yes'"):
        client.command("db", {"count": "reads"}, retry="yes")  # type: ignore[arg-type]


def test_other_commands_are_retried_only_when_the_call_says_so(
        replset: Client, replset_uri: str, app_name: str, events: AllEvents) -> None:
    with failpoint(replset_uri, fail(app_name, ["ping"], closeConnection=True)), \
            pytest.raises(AutoReconnect):
        replset.command("admin", {"ping": 1})
    with failpoint(replset_uri, fail(app_name, ["ping"], closeConnection=True)):
        assert replset.command("admin", {"ping": 1}, retry=True)["ok"] == 1
    assert len(started(events, "ping")) == 3


def test_a_get_more_is_never_retried(
        replset: Client, replset_uri: str, app_name: str, events: AllEvents) -> None:
    replset.command("db", {"insert": "more", "documents": [{}, {}, {}]})
    cursor = replset.find("db", "more", {}, batch_size=1)
    next(cursor)
    with failpoint(replset_uri, fail(app_name, ["getMore"], closeConnection=True)), \
            pytest.raises(AutoReconnect):
        list(cursor)
    cursor.close()
    assert len(started(events, "getMore")) == 1


# -- writes --------------------------------------------------------------------------------


def test_writes_carry_a_new_txn_number_in_their_server_session(
        replset: Client, events: AllEvents) -> None:
    for _ in range(3):
        replset.command("db", {"insert": "w", "documents": [{}]})
    replset.command("db", {"count": "w"})  # the same server session, no number
    replset.command("db", {"update": "w", "updates": [{"q": {}, "u": {"$set": {"a": 1}}}]})
    replset.command("db", {"delete": "w", "deletes": [{"q": {}, "limit": 1}]})
    replset.command("db", {"findAndModify": "w", "query": {}, "remove": True})
    # Not retryable writes: several documents per statement, unacknowledged.
    replset.command("db", {"update": "w", "updates": [{"q": {}, "u": {"$set": {"b": 1}},
                                                       "multi": True}]})
    replset.command("db", {"delete": "w", "deletes": [{"q": {}, "limit": 0}]})
    replset.command("db", {"insert": "w", "documents": [{}], "writeConcern": {"w": 0}})
    writes = [e.command for e in events.of(_m.CommandStartedEvent)
              if e.command_name in ("insert", "update", "delete", "findAndModify")]
    assert len({str(w["lsid"]) for w in writes}) == 1, "one implicit server session"
    numbers = [w.get("txnNumber") for w in writes]
    assert numbers == [1, 2, 3, 4, 5, 6, None, None, None]
    assert "txnNumber" not in started(events, "count")[0]


def test_a_write_in_an_explicit_session_takes_the_sessions_next_number(
        replset: Client, events: AllEvents) -> None:
    with replset.start_session() as session:
        replset.command("db", {"insert": "s", "documents": [{}]}, session=session)
        session.start_transaction()
        replset.command("db", {"insert": "s", "documents": [{}]}, session=session)
        session.commit_transaction()
        replset.command("db", {"insert": "s", "documents": [{}]}, session=session)
    assert [w["txnNumber"] for w in started(events, "insert")] == [1, 2, 3]


def test_a_network_error_on_a_write_is_retried_with_the_same_transaction_id(
        replset: Client, replset_uri: str, app_name: str, events: AllEvents) -> None:
    with failpoint(replset_uri, fail(app_name, ["insert"], closeConnection=True)):
        replset.command("db", {"insert": "once", "documents": [{"_id": 1}]})
    first, retried = started(events, "insert")
    assert first["lsid"] == retried["lsid"] and first["txnNumber"] == retried["txnNumber"]
    assert replset.command("db", {"count": "once"})["n"] == 1


def test_nothing_is_retried_in_a_transaction(
        replset: Client, replset_uri: str, app_name: str, events: AllEvents) -> None:
    replset.command("db", {"create": "txn"}, retry=True)
    with replset.start_session() as session:
        session.start_transaction()
        with failpoint(replset_uri, fail(app_name, ["insert"], closeConnection=True)), \
                pytest.raises(AutoReconnect) as failed:
            replset.command("db", {"insert": "txn", "documents": [{}]}, session=session)
        assert failed.value.has_error_label("TransientTransactionError")
        assert not failed.value.has_error_label("RetryableWriteError")
        session.abort_transaction()
    assert len(started(events, "insert")) == 1


def test_a_standalone_gets_no_transaction_ids(
        mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    with Client(with_options(mongodb_uri, appName=app_name), event_listeners=[events]) as client:
        with failpoint(mongodb_uri, fail(app_name, ["insert"], closeConnection=True)), \
                pytest.raises(AutoReconnect):
            client.command("db", {"insert": "standalone", "documents": [{}]})
        # The caller may still vouch for it: retried as a read, without a number.
        with failpoint(mongodb_uri, fail(app_name, ["insert"], closeConnection=True)):
            client.command("db", {"insert": "standalone", "documents": [{}]}, retry=True)
    assert [w.get("txnNumber") for w in started(events, "insert")] == [None, None, None]


# -- what a retry reports ------------------------------------------------------------------


def test_a_retry_that_finds_no_server_reports_the_first_error() -> None:
    """The first attempt's connection is closed; the server then stops answering, so the
    retry cannot select it: the caller sees the first error, not a selection timeout."""
    gone = False

    def find(request: Request) -> Any:
        nonlocal gone
        gone = True
        return HANG_UP

    def hello(request: Request) -> Any:
        if gone:
            return HANG_UP
        return {"ok": 1.0, "isWritablePrimary": True, "maxWireVersion": 21}

    with FakeServer(handlers={"find": find, "hello": hello, "isMaster": hello}) as server:
        host, port = server.address
        with Client(f"mongodb://{host}:{port}/?serverSelectionTimeoutMS=600") as client:
            client.topology.select()
            with pytest.raises(AutoReconnect) as failed:
                client.command("db", {"find": "c", "filter": {}})
    assert "closed" in str(failed.value), failed.value
    assert server.names().count("find") == 1


def test_kills_during_retries_leak_nothing() -> None:
    """Writes whose first attempt loses its connection, killed at random moments of their
    attempts and retries: no connection stays out, no dirty server session is reused."""
    inserts: list[dict[str, Any]] = []

    def insert(request: Request) -> Any:
        inserts.append(request.command)
        if len(inserts) % 2:
            return HANG_UP
        gevent.sleep(random.uniform(0, 0.003))
        return {"ok": 1.0, "n": 1}

    hello = {"setName": "rs", "isWritablePrimary": True, "logicalSessionTimeoutMinutes": 30}
    rng = random.Random(11)
    with FakeServer(hello=hello, handlers={"insert": insert}) as server:
        host, port = server.address
        uri = f"mongodb://{host}:{port}/?directConnection=true&maxPoolSize=4"
        with Client(uri) as client:
            client.topology.select()
            for _ in range(8):
                writers = [gevent.spawn(client.command, "db",
                                        {"insert": "c", "documents": [{}]})
                           for _ in range(30)]
                gevent.sleep(rng.uniform(0, 0.02))
                for writer in rng.sample(writers, 15):
                    writer.kill(block=False)
                gevent.joinall(writers, timeout=10)
                assert all(w.ready() for w in writers)
                for writer in writers:
                    assert writer.exception is None or isinstance(
                        writer.exception, AutoReconnect | NotPrimaryError | InvalidOperation)
                client.pool._check_invariants()
            stats = client.stats()
            assert stats.in_use == 0 and stats.pending == 0 and stats.waiting == 0
            # A server session whose write was cut off is never lent again: each
            # (lsid, txnNumber) pair names one write, retries aside.
            pairs: dict[tuple[str, int], int] = {}
            for command in inserts:
                key = (str(command["lsid"]), command["txnNumber"])
                pairs[key] = pairs.get(key, 0) + 1
            assert max(pairs.values()) <= 2
            assert client.command("db", {"insert": "c", "documents": [{}]}, retry=True)


# -- load-balanced mode --------------------------------------------------------------------


def test_a_cursor_opened_on_a_retry_is_pinned_to_the_retrys_connection(
        lb: LBCluster) -> None:
    events = AllEvents()
    for backend in range(2):  # each service is a server of its own
        with lb.direct_client(backend) as direct:
            direct.db.drop_collection("lb")
            direct.db.lb.insert_many([{}, {}, {}])
    with Client(lb.uri, event_listeners=[events]) as client:
        client.command("admin", {"ping": 1})
        # The find goes out on the client's one connection and fails there; the
        # retry opens another, on the other service (round robin).
        (idle,) = lb.proxy.connections()
        lb.configure_fail_point(idle.backend.index, {
            "configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["find"], "closeConnection": True}})
        try:
            with client.find("db", "lb", {}, batch_size=1) as cursor:
                assert cursor.pinned
                assert client.stats().in_use_by_purpose["cursor"] == 1
                assert len(list(cursor)) == 3
        finally:
            lb.reset()
        assert client.stats().in_use == 0
    finds = started(events, "find")
    assert len(finds) == 2
