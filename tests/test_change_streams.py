"""greenpool.Client's change streams beyond the spec's files: a stream that lives through
an election in the replica set emulator returns every change exactly once, in order; a
stream killed mid-wait lets its connection go; bad arguments are named.

Waits are on events and counts, never on durations.
"""

from __future__ import annotations

import re
from typing import Any

import gevent
import pytest
from pymongo import monitoring as _m
from pymongo.errors import DuplicateKeyError, InvalidOperation, OperationFailure

import greenpool
from greenpool.client.api.changestream import ChangeStream
from greenpool.testing.replset import ReplicaSet
from tests.events import AllEvents

pytestmark = pytest.mark.timeout(120)

CHANGES = 20


def insert(collection: Any, number: int) -> None:
    """Insert ``{_id: number}`` once, whatever the election does to the first attempt."""
    while True:
        try:
            collection.insert_one({"_id": number})
            return
        except DuplicateKeyError:
            return  # an attempt whose reply was lost had written it
        except greenpool.ServerSelectionTimeoutError:
            continue


@pytest.mark.parametrize("failover", ["step_down", "stop_member"])
def test_a_stream_returns_every_change_once_through_an_election(rs: ReplicaSet,
                                                                failover: str) -> None:
    events = AllEvents()
    uri = f"{rs.uri}&heartbeatFrequencyMS=500&serverSelectionTimeoutMS=30000"
    with greenpool.Client(uri, event_listeners=[events]) as client:
        collection = client.test_change_streams[f"election_{failover}"]
        collection.drop()
        seen: list[Any] = []
        with collection.watch(max_await_time_ms=200) as stream:
            def watch() -> None:
                for change in stream:
                    seen.append(change["documentKey"]["_id"])
                    if len(seen) == CHANGES:
                        return

            watcher = gevent.spawn(watch)
            for number in range(CHANGES // 2):
                insert(collection, number)
            getattr(rs, failover)(0)
            for number in range(CHANGES // 2, CHANGES):
                insert(collection, number)
            watcher.join(timeout=60)
            assert watcher.dead, f"the stream stopped after {seen}"
            watcher.get()
        assert seen == list(range(CHANGES))
        # Each aggregate after the first resumed after the last change returned.
        aggregates = [e.command for e in events.of(_m.CommandStartedEvent)
                      if e.command_name == "aggregate"]
        for later in aggregates[1:]:
            assert "resumeAfter" in later["pipeline"][0]["$changeStream"], later
        if failover == "stop_member":
            assert len(aggregates) >= 2, "the stream never resumed"


def test_a_resume_follows_the_primary_and_carries_the_last_token(rs: ReplicaSet) -> None:
    events = AllEvents()
    uri = f"{rs.uri}&heartbeatFrequencyMS=500&serverSelectionTimeoutMS=30000"
    with greenpool.Client(uri, event_listeners=[events]) as client:
        collection = client.test_change_streams.follows
        collection.drop()
        with collection.watch(max_await_time_ms=200) as stream:
            insert(collection, 1)
            assert next(stream)["documentKey"] == {"_id": 1}
            token = stream.resume_token
            rs.stop_member(0)
            insert(collection, 2)
            assert next(stream)["documentKey"] == {"_id": 2}
        started = [e for e in events.of(_m.CommandStartedEvent)
                   if e.command_name == "aggregate"]
        assert len(started) == 2
        resumed = started[1]
        assert resumed.connection_id[1] == int(rs.addresses[1].rpartition(":")[2])
        stage = resumed.command["pipeline"][0]["$changeStream"]
        assert stage["resumeAfter"] == token


def test_a_greenlet_killed_waiting_on_a_stream_closes_it(replset_uri: str) -> None:
    with greenpool.Client(replset_uri) as client:
        collection = client.test_change_streams.killed
        stream = collection.watch(max_await_time_ms=5000)
        waiter = gevent.spawn(next, stream)
        with gevent.Timeout(30, AssertionError("the getMore never went out")):
            while client.stats().in_use == 0:
                gevent.sleep(0.01)
        waiter.kill()
        assert not stream.alive
        assert stream.try_next() is None
        with gevent.Timeout(30, AssertionError("a connection stayed checked out")):
            while client.stats().in_use:
                gevent.sleep(0.01)
        collection.insert_one({"after": "the kill"})  # the client goes on


def test_a_non_resumable_error_ends_the_stream_without_a_resume(replset_uri: str) -> None:
    events = AllEvents()
    with greenpool.Client(replset_uri, event_listeners=[events]) as client:
        collection = client.test_change_streams.no_token
        # The server refuses to return a change whose token the pipeline removed.
        with collection.watch([{"$project": {"_id": 0}}], max_await_time_ms=200) as stream:
            collection.insert_one({})
            with pytest.raises(OperationFailure) as raised:
                next(stream)
            assert raised.value.has_error_label("NonResumableChangeStreamError")
            assert not stream.alive
        assert len([e for e in events.of(_m.CommandStartedEvent)
                    if e.command_name == "aggregate"]) == 1


class _TokenlessCursor:
    """A cursor whose server returned a change without its ``_id`` (a server that does
    not check the pipeline, as SecantusDB and MongoDB do)."""

    id = 1
    buffered = 1
    alive = True
    post_batch_resume_token = None
    operation_time = None
    closed = False

    def poll(self) -> list[dict[str, Any]]:
        return [{"operationType": "insert"}]

    def close(self) -> None:
        self.closed = True


def test_a_change_without_its_token_ends_the_stream() -> None:
    cursor = _TokenlessCursor()
    stream = ChangeStream(lambda pipeline: cursor, [])  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidOperation, match="resume token is missing"):
        stream.try_next()
    assert not stream.alive
    assert cursor.closed


@pytest.mark.parametrize(("keywords", "error", "named"), [
    ({"pipeline": {"$match": {}}}, TypeError, "{'$match': {}}"),
    ({"batch_size": -1}, ValueError, "-1"),
    ({"max_await_time_ms": "1"}, ValueError, "'1'"),
    ({"full_document": 1}, TypeError, "full_document"),
    ({"start_at_operation_time": 5}, TypeError, "start_at_operation_time"),
])
def test_bad_watch_arguments_are_named(keywords: dict[str, Any], error: type[Exception],
                                       named: str) -> None:
    with (greenpool.Client("mongodb://127.0.0.1:1/", connect=False) as client,
          pytest.raises(error, match=re.escape(named))):
        client.test_change_streams.bad.watch(**keywords)
