"""The replica set emulator (greenpool.testing.replset): stock PyMongo, the reference driver,
against a set of member processes in front of one SecantusDB; the members' hello and
refusals on the wire; the controls; the command line; no process outliving its owner."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import bson
import gevent
import pytest
from bson.objectid import ObjectId
from pymongo import CursorType, MongoClient, ReadPreference, WriteConcern, monitoring
from pymongo.errors import (
    AutoReconnect,
    NotPrimaryError,
    OperationFailure,
    WriteConcernError,
)
from pymongo.read_preferences import Secondary

import greenpool
from greenpool.errors import ConfigurationError
from greenpool.testing.replset import MemberConfig, ReplicaSet
from greenpool.wire.connector import connect
from greenpool.wire.link import Link, LinkOptions
from tests.events import AllEvents
from tests.test_embedded import ROOT, interruptible, wait_gone

pytestmark = pytest.mark.timeout(300)

OPTIONS = LinkOptions(connect_timeout=10.0, socket_timeout=30.0)


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host, int(port))


def client(rs: ReplicaSet, events: AllEvents | None = None, **options: Any) -> MongoClient:
    listeners = [events] if events is not None else []
    return MongoClient(rs.uri, event_listeners=listeners, serverSelectionTimeoutMS=20000,
                       **options)


@pytest.fixture
def link_to() -> Iterator[Callable[[str], Link]]:
    """Opens links (greenpool's wire layer) to members; closes them after the test."""
    links: list[Link] = []

    def open_link(member: str) -> Link:
        links.append(connect(address(member), OPTIONS))
        return links[-1]

    yield open_link
    for link in links:
        link.close()


def awaited_everywhere(events: AllEvents, rs: ReplicaSet) -> None:
    """Wait until PyMongo's monitor of every member streams (an awaited check started)."""
    members = {address(s.address) for s in rs.status() if s.pid is not None}

    def streaming() -> bool:
        return members <= {e.connection_id for e in events.of(
            monitoring.ServerHeartbeatStartedEvent) if e.awaited}

    events.until(streaming, "every member monitored by an awaitable hello")


def replies_from(events: list[Any], member: str) -> list[dict[str, Any]]:
    return [e.reply.document for e in events
            if isinstance(e, monitoring.ServerHeartbeatSucceededEvent)
            and e.connection_id == address(member)]


# -- PyMongo against the set ------------------------------------------------------------


def test_pymongo_discovers_every_member_from_one_seed(rs: ReplicaSet) -> None:
    events = AllEvents()
    seed = f"mongodb://{rs.addresses[2]}/?replicaSet={rs.name}"
    with MongoClient(seed, event_listeners=[events], serverSelectionTimeoutMS=20000) as mc:
        mc.admin.command("ping")
        events.until(lambda: len(mc.secondaries) == 2, "both secondaries discovered")
        assert mc.primary == address(rs.addresses[0])
        assert mc.secondaries == {address(a) for a in rs.addresses[1:]}
        assert mc.nodes == {address(a) for a in rs.addresses}


def test_writes_go_to_the_primary_and_secondary_reads_to_a_secondary(rs: ReplicaSet) -> None:
    events = AllEvents()
    with client(rs, events) as mc:
        collection = mc.test_replset.split
        collection.drop()
        collection.insert_many([{"n": n} for n in range(10)])
        events.until(lambda: len(mc.secondaries) == 2, "both secondaries discovered")
        reader = collection.with_options(read_preference=ReadPreference.SECONDARY_PREFERRED)
        assert reader.count_documents({}) == 10
        # The shared backend: a secondary sees every write at once, and a cursor's
        # getMore goes through the member that opened it.
        assert [d["n"] for d in reader.find({}, batch_size=3).sort("n")] == list(range(10))
        by_command = {(e.command_name, e.connection_id) for e in
                      events.of(monitoring.CommandStartedEvent)}
        assert {name for name, where in by_command
                if where == address(rs.addresses[0])} >= {"drop", "insert"}
        secondaries = {address(a) for a in rs.addresses[1:]}
        assert {where for name, where in by_command if name in ("aggregate", "find",
                                                                "getMore")} <= secondaries
        assert ("getMore", next(w for n, w in by_command if n == "find")) in by_command


def test_pymongo_streaming_monitor_follows_a_stepdown(rs: ReplicaSet) -> None:
    events = AllEvents()
    old, new = rs.addresses[0], rs.addresses[1]
    # maxAwaitTimeMS is heartbeatFrequencyMS: a change seen before the test's timeout
    # was delivered by the member waking its awaitable hello, not by a check's timeout.
    with client(rs, events, heartbeatFrequencyMS=120_000) as mc:
        mc.admin.command("ping")
        awaited_everywhere(events, rs)
        mark = len(events.events)
        assert rs.step_down(successor=1) == old
        events.until(lambda: mc.primary == address(new), "the new primary seen")
        mc.test_replset.stepdown.insert_one({"after": "stepdown"})
        after = events.events[mark:]
        # Every check that told of the change was an awaited one, and none failed.
        heartbeats = [e for e in after if isinstance(e, monitoring.ServerHeartbeatSucceededEvent)]
        assert heartbeats and all(e.awaited for e in heartbeats)
        assert not [e for e in after if isinstance(e, monitoring.ServerHeartbeatFailedEvent)]
        # As mongod: the old primary stops taking writes (neither primary nor
        # secondary), then it is a secondary; each is a new topologyVersion.
        old_replies = replies_from(after, old)
        assert [(r["isWritablePrimary"], r["secondary"]) for r in old_replies[:2]] == [
            (False, False), (False, True)]
        counters = [r["topologyVersion"]["counter"] for r in old_replies]
        assert counters == sorted(counters) and len(set(counters)) == len(counters)
        new_replies = replies_from(after, new)
        assert new_replies[-1]["isWritablePrimary"] is True
        assert new_replies[-1]["electionId"] > ObjectId(b"\x7f\xff\xff\xff" + bytes(7) + b"\x01")
        # The write after the election ran on the new primary.
        insert = [e for e in after if isinstance(e, monitoring.CommandSucceededEvent)
                  and e.command_name == "insert"]
        assert insert[-1].connection_id == address(new)


def test_a_stopped_member_is_found_again_after_a_restart(rs: ReplicaSet) -> None:
    events = AllEvents()
    with client(rs, events, heartbeatFrequencyMS=500) as mc:
        events.until(lambda: len(mc.secondaries) == 2, "both secondaries discovered")
        stopped = rs.addresses[2]
        first_process = replies_from(events.events, stopped)[-1]["topologyVersion"]["processId"]
        rs.stop_member(2)
        assert rs.status()[2].state == "DOWN" and rs.status()[2].pid is None
        events.until(lambda: address(stopped) not in mc.secondaries, "the stopped member lost")
        # Reads that may go to a secondary still find one.
        reader = mc.test_replset.stopped.with_options(
            read_preference=ReadPreference.SECONDARY)
        reader.find_one()
        rs.start_member(2)
        events.until(lambda: address(stopped) in mc.secondaries, "the member found again")
        assert rs.addresses[2] == stopped
        again = replies_from(events.events, stopped)[-1]["topologyVersion"]
        assert again["processId"] != first_process


def test_a_stopped_primary_is_replaced_and_writes_go_on(rs: ReplicaSet) -> None:
    events = AllEvents()
    with client(rs, events, heartbeatFrequencyMS=500) as mc:
        collection = mc.test_replset.failover
        collection.insert_one({"before": True})
        rs.stop_member(0)
        # The election is immediate (election_delay 0): member 1 is next in index order.
        assert rs.primary == rs.addresses[1]
        collection.insert_one({"after": True})  # retried on the new primary if need be
        assert mc.primary == address(rs.addresses[1])
        failures = events.of(monitoring.ServerHeartbeatFailedEvent)
        assert {e.connection_id for e in failures} == {address(rs.addresses[0])}


def test_a_partitioned_member_hangs_and_is_marked_unknown(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    events = AllEvents()
    with client(rs, events, heartbeatFrequencyMS=500, connectTimeoutMS=1000) as mc:
        events.until(lambda: len(mc.secondaries) == 2, "both secondaries discovered")
        hung = rs.addresses[2]
        link = link_to(hung)
        rs.partition(2)
        # Its connections stay open and never answer...
        with pytest.raises(AutoReconnect):
            link.command("admin", {"ping": 1}, timeout=0.5)
        # ...so PyMongo's monitor times out, marks it Unknown, and reads go elsewhere.
        events.until(lambda: address(hung) not in mc.secondaries, "the hung member lost")
        failed = [e for e in events.of(monitoring.ServerHeartbeatFailedEvent)
                  if e.connection_id == address(hung)]
        assert failed
        reader = mc.test_replset.partition.with_options(
            read_preference=ReadPreference.SECONDARY)
        reader.find_one()
        rs.heal(2)
        events.until(lambda: address(hung) in mc.secondaries, "the member back")


def test_what_a_partition_held_goes_through_when_it_heals(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    link = link_to(rs.addresses[1])
    rs.partition(1)
    pinged = gevent.spawn(link.command, "admin", {"ping": 1})
    gevent.sleep(0.2)  # a turn for the request to reach the member, which holds it
    assert not pinged.ready()
    rs.heal(1)
    assert pinged.get(timeout=30)["ok"] == 1


def test_transactions_run_on_the_primary(rs: ReplicaSet) -> None:
    with client(rs) as mc:
        collection = mc.test_replset.transactions
        collection.drop()
        collection.insert_one({"_id": 0})
        with mc.start_session() as session:
            with session.start_transaction():
                collection.insert_one({"_id": 1}, session=session)
                collection.insert_one({"_id": 2}, session=session)
            with session.start_transaction():
                collection.insert_one({"_id": 3}, session=session)
                session.abort_transaction()
        assert sorted(d["_id"] for d in collection.find()) == [0, 1, 2]


def test_max_staleness_excludes_a_lagging_secondary(rs: ReplicaSet) -> None:
    events = AllEvents()
    with client(rs, events, heartbeatFrequencyMS=500) as mc:
        events.until(lambda: len(mc.secondaries) == 2, "both secondaries discovered")
        lagging, fresh = rs.addresses[2], rs.addresses[1]
        rs.set_lag(2, 300)

        def lag_seen() -> bool:
            description = mc.topology_description.server_descriptions()[address(lagging)]
            primary = mc.topology_description.server_descriptions()[address(rs.addresses[0])]
            return bool(description.last_write_date and primary.last_write_date and (
                primary.last_write_date - description.last_write_date) > 250)

        events.until(lag_seen, "the lag seen")
        mark = len(events.events)
        reader = mc.test_replset.stale.with_options(
            read_preference=Secondary(max_staleness=120))
        for _ in range(10):
            reader.find_one()
        finds = {e.connection_id for e in events.events[mark:]
                 if isinstance(e, monitoring.CommandStartedEvent) and e.command_name == "find"}
        assert finds == {address(fresh)}


def test_tags_are_a_reconfig_and_select_a_secondary(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    events = AllEvents()
    with client(rs, events, heartbeatFrequencyMS=500) as mc:
        events.until(lambda: len(mc.secondaries) == 2, "both secondaries discovered")
        version = rs.set_version
        rs.set_tags(2, {"dc": "east"})
        assert rs.set_version == version + 1
        hello = link_to(rs.addresses[0]).hello
        assert hello is not None and hello["setVersion"] == version + 1
        tagged = address(rs.addresses[2])
        events.until(lambda: mc.topology_description.server_descriptions()[tagged].tags,
                     "the tags seen")
        mark = len(events.events)
        reader = mc.test_replset.tags.with_options(
            read_preference=Secondary(tag_sets=[{"dc": "east"}]))
        for _ in range(5):
            reader.find_one()
        finds = {e.connection_id for e in events.events[mark:]
                 if isinstance(e, monitoring.CommandStartedEvent) and e.command_name == "find"}
        assert finds == {tagged}


def test_write_concern_counts_the_data_bearing_members(rs: ReplicaSet) -> None:
    with client(rs) as mc:
        collection = mc.test_replset["concerns"]
        collection.with_options(write_concern=WriteConcern(w=3)).insert_one({"w": 3})
        with pytest.raises(WriteConcernError) as refused:
            collection.with_options(write_concern=WriteConcern(w=4)).insert_one({"w": 4})
        assert refused.value.code == 100  # UnsatisfiableWriteConcern


def test_large_messages_pass_both_ways(rs: ReplicaSet) -> None:
    with client(rs) as mc:
        collection = mc.test_replset.large
        collection.drop()
        blob = os.urandom(8 * 1024 * 1024)
        collection.insert_one({"_id": 1, "blob": blob})
        reader = collection.with_options(read_preference=ReadPreference.SECONDARY)
        assert reader.find_one({"_id": 1})["blob"] == blob


# -- the members on the wire ------------------------------------------------------------


def test_hello_as_a_mongod_member(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    primary, secondary = link_to(rs.addresses[0]), link_to(rs.addresses[1])
    for link, writable in ((primary, True), (secondary, False)):
        hello = link.command("admin", {"hello": 1})
        assert hello["setName"] == rs.name and hello["setVersion"] == rs.set_version
        assert hello["hosts"] == rs.addresses and hello["primary"] == rs.addresses[0]
        assert hello["isWritablePrimary"] is writable and hello["secondary"] is not writable
        assert ("electionId" in hello) is writable
        assert hello["me"] == rs.addresses[0 if writable else 1]
        assert set(hello["lastWrite"]) == {"opTime", "lastWriteDate", "majorityOpTime",
                                           "majorityWriteDate"}
        assert isinstance(hello["topologyVersion"]["processId"], ObjectId)
        assert hello["maxWireVersion"] >= 21 and hello["logicalSessionTimeoutMinutes"]
        assert "compression" not in hello
        legacy = link.command("admin", {"isMaster": 1})
        assert legacy["ismaster"] is writable and "isWritablePrimary" not in legacy
    assert primary.server_connection_id != link_to(rs.addresses[0]).server_connection_id


def test_a_secondary_refuses_writes_and_primary_reads(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    link = link_to(rs.addresses[1])
    with pytest.raises(NotPrimaryError) as refused:
        link.command("test_replset", {"insert": "refused", "documents": [{}]})
    details = refused.value.details
    assert details is not None and details["code"] == 10107
    assert details["codeName"] == "NotWritablePrimary" and "topologyVersion" in details
    assert "errorLabels" not in details
    with pytest.raises(NotPrimaryError) as refused:
        link.command("test_replset", {"find": "refused"})
    assert refused.value.details is not None and refused.value.details["code"] == 13435
    reply = link.command("test_replset", {"find": "refused",
                                          "$readPreference": {"mode": "secondary"}})
    assert reply["ok"] == 1
    assert link.command("admin", {"ping": 1})["ok"] == 1  # runs anywhere
    # A retryable write gets the label drivers retry on.
    with pytest.raises(NotPrimaryError) as refused:
        link.command("test_replset", {"insert": "refused", "documents": [{}],
                                      "lsid": {"id": bson.Binary(os.urandom(16), 4)},
                                      "txnNumber": bson.Int64(1)})
    assert refused.value.details is not None
    assert refused.value.details["errorLabels"] == ["RetryableWriteError"]


def test_a_refused_fire_and_forget_write_closes_the_connection(rs: ReplicaSet) -> None:
    body = bson.encode({"insert": "refused", "documents": [{}], "writeConcern": {"w": 0},
                        "$db": "test_replset"})
    more_to_come = 2
    message = struct.pack("<iiiii", 21 + len(body), 1, 0, 2013, more_to_come) + b"\x00" + body
    with socket.create_connection(address(rs.addresses[1]), timeout=30) as sock:
        sock.sendall(message)
        assert sock.recv(16) == b""


def test_awaitable_hello_waits_for_a_change(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    link = link_to(rs.addresses[1])
    version = link.command("admin", {"hello": 1})["topologyVersion"]
    # Stale or foreign topologyVersions are answered at once...
    other = {"processId": ObjectId(), "counter": version["counter"]}
    assert link.command("admin", {"hello": 1, "topologyVersion": other,
                                  "maxAwaitTimeMS": 600_000})["topologyVersion"] == version
    # ...the current one waits: for maxAwaitTimeMS, or until a change.
    timed_out = link.command("admin", {"hello": 1, "topologyVersion": version,
                                       "maxAwaitTimeMS": 10})
    assert timed_out["topologyVersion"] == version
    waiting = gevent.spawn(link.command, "admin", {"hello": 1, "topologyVersion": version,
                                                   "maxAwaitTimeMS": 600_000})
    gevent.sleep(0.1)
    assert not waiting.ready()
    rs.set_lag(1, 5)
    woken = waiting.get(timeout=30)
    assert woken["topologyVersion"]["counter"] == version["counter"] + 1
    assert woken["topologyVersion"]["processId"] == version["processId"]


@pytest.mark.parametrize(("fields", "code"), [
    ({"topologyVersion": "x", "maxAwaitTimeMS": 0}, 10065),
    ({"topologyVersion": {"processId": ObjectId()}, "maxAwaitTimeMS": 0}, 40414),
    ({"topologyVersion": {"processId": ObjectId(), "counter": bson.Int64(-1)},
      "maxAwaitTimeMS": 0}, 31372),
    ({"maxAwaitTimeMS": 0}, 31368),
    ({"topologyVersion": {"processId": ObjectId(), "counter": bson.Int64(0)}}, 31368),
    ({"topologyVersion": {"processId": ObjectId(), "counter": bson.Int64(0)},
      "maxAwaitTimeMS": -1}, 31373),
])
def test_a_malformed_awaitable_hello_is_refused_as_mongod_does(
        rs: ReplicaSet, link_to: Callable[[str], Link], fields: dict[str, Any],
        code: int) -> None:
    with pytest.raises(OperationFailure) as refused:
        link_to(rs.addresses[0]).command("admin", {"hello": 1, **fields})
    assert refused.value.code == code


def test_exhaust_hello_streams_a_reply_per_change(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    link = link_to(rs.addresses[2])
    version = link.command("admin", {"hello": 1})["topologyVersion"]
    request = {"hello": 1, "topologyVersion": version, "maxAwaitTimeMS": 600_000}
    replies = gevent.spawn(link.command, "admin", request, exhaust_allowed=True)
    gevent.sleep(0.1)
    rs.set_lag(2, 1)
    first = replies.get(timeout=30)
    assert link.more_to_come
    rs.set_lag(2, 2)
    second = link.receive(timeout=30)
    assert link.more_to_come
    counters = [r["topologyVersion"]["counter"] for r in (first, second)]
    assert counters == [version["counter"] + 1, version["counter"] + 2]


def test_replset_commands_over_the_wire(rs: ReplicaSet) -> None:
    with MongoClient(rs.member_uri(0)) as primary:
        assert primary.admin.command("replSetStepDown", 60)["ok"] == 1
    # Another member is elected; the old primary is not, for stepDownSecs.
    assert rs.wait_for_primary() == rs.addresses[1]
    with MongoClient(rs.member_uri(2)) as secondary:
        status = secondary.admin.command("replSetGetStatus")
        assert [m["stateStr"] for m in status["members"]] == ["SECONDARY", "PRIMARY",
                                                              "SECONDARY"]
        assert secondary.admin.command("replSetStepUp")["ok"] == 1
        assert rs.primary == rs.addresses[2]
        config = secondary.admin.command("replSetGetConfig")["config"]
        assert [m["host"] for m in config["members"]] == rs.addresses
        with MongoClient(rs.member_uri(0)) as old, pytest.raises(NotPrimaryError):
            old.admin.command("replSetStepDown", 60)
        with pytest.raises(OperationFailure, match="not supported"):
            secondary.admin.command("replSetReconfig", {})
    with MongoClient(rs.member_uri(1)) as member, pytest.raises(AutoReconnect):
        member.admin.command("shutdown")
    wait_gone_member(rs, 1)


def test_rediscover_quickly_after_step_down(rs: ReplicaSet) -> None:
    # The SDAM spec's rediscover-quickly-after-step-down scenario, with stock PyMongo.
    events = AllEvents()
    with client(rs, events, appname="replSetStepDownTest", heartbeatFrequencyMS=60000,
                w="majority") as mc:
        collection = mc["sdam-tests"]["test-replSetStepDown"]
        collection.insert_many([{"_id": 3}, {"_id": 4}])
        before = mc.primary
        mc.admin.command("replSetFreeze", 0, read_preference=ReadPreference.SECONDARY)
        mc.admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=30, force=False)
        events.until(lambda: mc.primary not in (None, before), "a new primary")
        collection.insert_many([{"_id": 5}, {"_id": 6}])
        assert not events.of(monitoring.PoolClearedEvent)
        collection.drop()


def wait_gone_member(rs: ReplicaSet, index: int) -> None:
    with gevent.Timeout(30, AssertionError(f"member {index} still up: {rs!r}")):
        while rs.status()[index].state != "DOWN":
            gevent.sleep(0.01)


def test_election_ids_grow_with_each_election(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    ids = []
    for member in (1, 2, 0):
        rs.elect(member)
        hello = link_to(rs.addresses[member]).command("admin", {"hello": 1})
        ids.append(hello["electionId"])
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert rs.term == int.from_bytes(ids[-1].binary[4:], "big")


def test_a_delayed_election_leaves_the_set_without_primary_meanwhile(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    rs.step_down(delay=600)
    assert rs.primary is None
    hello = link_to(rs.addresses[2]).command("admin", {"hello": 1})
    assert "primary" not in hello and hello["secondary"]
    rs.elect(2)  # a control cancels the pending election
    assert rs.primary == rs.addresses[2]
    rs.step_down(delay=0.1)
    assert rs.wait_for_primary() == rs.addresses[0]  # the next after member 2
    rs.step_down(elect=False)
    assert rs.primary is None


def test_greenpool_client_on_one_member(rs: ReplicaSet) -> None:
    with greenpool.Client(rs.member_uri(0)) as primary:
        primary.command("test_replset", {"insert": "greenpool", "documents": [{"x": 1}]})
    with greenpool.Client(rs.member_uri(1)) as secondary:
        reply = secondary.command("test_replset", {"find": "greenpool"})
        assert reply["cursor"]["firstBatch"]
        with pytest.raises(NotPrimaryError):
            secondary.command("test_replset", {"insert": "greenpool", "documents": [{}]})


def test_exhaust_cursors_pass_through(rs: ReplicaSet) -> None:
    with client(rs) as mc:
        collection = mc.test_replset.exhaust
        collection.drop()
        collection.insert_many([{"n": n} for n in range(20)])
        cursor = collection.find({}, cursor_type=CursorType.EXHAUST, batch_size=3).sort("n")
        assert [d["n"] for d in cursor] == list(range(20))


def test_a_malformed_message_costs_its_connection_only(
        rs: ReplicaSet, link_to: Callable[[str], Link]) -> None:
    # A hello whose body is not BSON (an unknown type): the member must read it, and cannot.
    body = b"\x10\x00\x00\x00\x99hello\x00\x01\x00\x00\x00\x00"
    message = struct.pack("<iiiii", 21 + len(body), 1, 0, 2013, 0) + b"\x00" + body
    with socket.create_connection(address(rs.addresses[0]), timeout=30) as sock:
        sock.sendall(message)
        assert sock.recv(16) == b""
    assert link_to(rs.addresses[0]).command("admin", {"ping": 1})["ok"] == 1


def test_a_set_in_front_of_a_running_backend(module_set: ReplicaSet) -> None:
    # Only the member starts; the backend is shared with the module's set, and stays.
    with ReplicaSet(1, name="solo", backend=module_set.backend_uri[10:-1]) as solo:
        with MongoClient(solo.uri, serverSelectionTimeoutMS=20000) as mc:
            mc.test_replset.solo.insert_one({"solo": True})
        with MongoClient(solo.member_uri(0)) as member:
            # stepDownSecs passed, the only member runs for election again.
            member.admin.command("replSetStepDown", 1, secondaryCatchUpPeriodSecs=0)
        assert solo.primary is None
        assert solo.wait_for_primary() == solo.addresses[0]
    with client(module_set) as mc:
        assert mc.test_replset.solo.find_one({"solo": True})


# -- fail points ------------------------------------------------------------------------


def fail_command(member: str, mode: Any, **data: Any) -> None:
    with MongoClient(f"mongodb://{member}/?directConnection=true") as mc:
        mc.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)


def test_a_hello_fail_point_is_the_members_own(rs: ReplicaSet) -> None:
    primary, secondary = rs.addresses[0], rs.addresses[1]
    fail_command(primary, {"times": 1}, failCommands=["hello", "isMaster"], errorCode=91,
                 appName="failing")
    failing = LinkOptions(connect_timeout=10.0, app_name="failing")
    # Another member, another appName: no effect.
    connect(address(secondary), failing).close()
    connect(address(primary), OPTIONS).close()
    with pytest.raises(NotPrimaryError) as refused:  # 91: ShutdownInProgress
        connect(address(primary), failing)
    details = refused.value.details
    assert details is not None and details["code"] == 91
    assert "topologyVersion" in details  # a state change error
    connect(address(primary), failing).close()  # {times: 1}: spent
    fail_command(primary, {"times": 1}, failCommands=["hello"], closeConnection=True,
                 blockConnection=True, blockTimeMS=50)
    link = connect(address(primary), OPTIONS)
    with pytest.raises(AutoReconnect):
        link.command("admin", {"hello": 1})
    assert connect(address(primary), OPTIONS).command("admin", {"hello": 1})["ok"] == 1


def test_the_rest_of_a_fail_point_is_the_backends(rs: ReplicaSet) -> None:
    # The backend is shared: a find fail point set through one member acts through all,
    # for the appName the client gave (each member passes the client's metadata on).
    fail_command(rs.addresses[0], "alwaysOn", failCommands=["find", "hello", "isMaster"],
                 errorCode=2, appName="finder")
    with MongoClient(rs.member_uri(1), appName="finder") as finder, \
            MongoClient(rs.member_uri(1), appName="other") as other:
        with pytest.raises(OperationFailure) as refused:
            finder.test_replset.points.find_one()
        assert refused.value.code == 2
        other.test_replset.points.find_one()
    hello = LinkOptions(connect_timeout=10.0, app_name="finder")
    connect(address(rs.addresses[1]), hello).close()  # member 1 has no hello fail point
    with pytest.raises(OperationFailure):
        connect(address(rs.addresses[0]), hello)
    fail_command(rs.addresses[0], "off")
    connect(address(rs.addresses[0]), hello).close()
    with MongoClient(rs.member_uri(1), appName="finder") as finder:
        finder.test_replset.points.find_one()


def test_pymongo_sees_a_member_whose_hello_fails(rs: ReplicaSet) -> None:
    # As the SDAM spec's hello-network-error test: the monitor's checks of the primary
    # fail, the primary is Unknown, then found again.
    events = AllEvents()
    with client(rs, events, appName="monitored", heartbeatFrequencyMS=500) as mc:
        mc.admin.command("ping")
        awaited_everywhere(events, rs)
        fail_command(rs.addresses[0], {"times": 2}, failCommands=["hello", "isMaster"],
                     closeConnection=True, appName="monitored")
        primary = address(rs.addresses[0])
        events.until(lambda: any(e.connection_id == primary for e in events.of(
            monitoring.ServerHeartbeatFailedEvent)), "a failed check of the primary")
        events.until(lambda: mc.primary == primary, "the primary found again")
        mc.test_replset.points.insert_one({})


# -- configurations and bad input -------------------------------------------------------


def test_passives_arbiters_and_hidden_members(link_to: Callable[[str], Link]) -> None:
    configs = [MemberConfig(tags={"dc": "west"}), MemberConfig(priority=0),
               MemberConfig(arbiter_only=True), MemberConfig(hidden=True)]
    with ReplicaSet(configs, name="mixed") as rs:
        member, passive, arbiter, hidden = rs.addresses
        assert rs.uri == f"mongodb://{member},{passive},{arbiter}/?replicaSet=mixed"
        hello = link_to(hidden).command("admin", {"hello": 1})
        assert hello["hosts"] == [member] and hello["passives"] == [passive]
        assert hello["arbiters"] == [arbiter] and hello["hidden"] is True
        assert link_to(passive).command("admin", {"hello": 1})["passive"] is True
        arbiter_hello = link_to(arbiter).command("admin", {"hello": 1})
        assert arbiter_hello["arbiterOnly"] is True and "lastWrite" not in arbiter_hello
        assert link_to(member).command("admin", {"hello": 1})["tags"] == {"dc": "west"}
        with pytest.raises(NotPrimaryError) as refused:
            link_to(arbiter).command("t", {"find": "c", "$readPreference": {"mode": "secondary"}})
        assert refused.value.details is not None and refused.value.details["code"] == 13436
        for unelectable in (passive, arbiter, hidden):
            with pytest.raises(RuntimeError, match=re.escape(f"{unelectable} cannot be")):
                rs.elect(unelectable)
        # No other member can be elected: the one that stepped down is elected again.
        rs.step_down()
        assert rs.primary == member
        with MongoClient(rs.uri, serverSelectionTimeoutMS=20000) as mc:
            mc.test_replset.mixed.insert_one({})
            assert mc.primary == address(member)


@pytest.mark.parametrize(("arguments", "named"), [
    ({"members": 0}, "0"),
    ({"members": "3"}, "'3'"),
    ({"name": "a/b"}, "'a/b'"),
    ({"ports": [1, 2]}, r"\[1, 2\]"),
    ({"election_delay": -1}, "-1"),
    ({"backend": "a:b:c"}, "'a:b:c'"),
])
def test_bad_arguments_are_named(arguments: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        ReplicaSet(**arguments)


def test_bad_member_configs_are_named() -> None:
    with pytest.raises(ConfigurationError, match="priority 0, not 1"):
        MemberConfig(hidden=True, priority=1)
    with pytest.raises(ConfigurationError, match="1001"):
        MemberConfig(priority=1001)
    with pytest.raises(ConfigurationError, match="-2"):
        MemberConfig(lag=-2)
    with pytest.raises(ConfigurationError, match="'dc': 1"):
        MemberConfig(tags={"dc": 1})  # type: ignore[dict-item]


def test_bad_controls_are_named(rs: ReplicaSet) -> None:
    with pytest.raises(ConfigurationError, match="no member 7"):
        rs.elect(7)
    with pytest.raises(ConfigurationError, match=re.escape("'127.0.0.1:1'")):
        rs.partition("127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="'soon'"):
        rs.set_lag(1, "soon")  # type: ignore[arg-type]
    rs.stop_member(2)
    with pytest.raises(RuntimeError, match=re.escape(f"{rs.addresses[2]} is stopped")):
        rs.partition(2)
    with pytest.raises(RuntimeError, match="is running"):
        rs.start_member(1)


def test_a_taken_port_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=re.escape(f"127.0.0.1:{port}")):
            ReplicaSet(2, ports=[0, port]).start()


# -- processes: the command line, no orphans --------------------------------------------

PARENT = textwrap.dedent("""
    import time
    from greenpool.testing.replset import ReplicaSet
    with ReplicaSet(3) as rs:
        pids = [s.pid for s in rs.status()] + [rs._backend.pid]
        print(*pids, flush=True)
        time.sleep(120)
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL],
                         ids=["SIGTERM", "SIGKILL"])
def test_no_process_outlives_its_owner(signum: int) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 4
        parent.send_signal(signum)
        parent.wait(30)
        for pid in pids:
            assert wait_gone(pid), f"process {pid} outlived its owner"
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_command_line_starts_a_set_and_stops_it(signum: int) -> None:
    command = [sys.executable, "-m", "greenpool", "server", "--replset", "3", "--port", "0"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              preexec_fn=interruptible)
    try:
        assert server.stdout is not None
        lines = []
        for line in server.stdout:
            lines.append(line)
            if line.startswith("export MONGODB_URI="):
                break
        output = "".join(lines)
        assert "replSetStepDown" in output
        uri = next(line.split(" ", 1)[1] for line in lines if line.startswith("URI: "))
        pids = [int(line.rsplit("pid ", 1)[1]) for line in lines if " pid " in line]
        assert len(pids) == 3 and uri.strip().endswith("/?replicaSet=rs0")
        with MongoClient(uri.strip(), serverSelectionTimeoutMS=20000) as mc:
            mc.test_replset.cli.insert_one({})
            assert len(mc.nodes) >= 1
        server.send_signal(signum)
        assert server.wait(30) == 0
        for pid in pids:
            assert wait_gone(pid)
    finally:
        server.kill()
        server.wait()


def test_the_command_line_refuses_bad_replset_options() -> None:
    for arguments, message in ((["--replset", "0"], "not 0"),
                               (["--replset", "3", "--tls"], "--replset N")):
        result = subprocess.run([sys.executable, "-m", "greenpool", "server", *arguments],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and message in result.stderr
