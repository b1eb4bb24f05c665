"""greenpool.Client against a three-member replica set on one machine (the emulator,
greenpool.testing.replset): discovery from one seed, reads by read preference, and failover
(a stepdown, a stopped primary, a stopped secondary). What the Client sent, and where,
comes from its command events; waits are on events and states, never on durations.

The emulator answers hello as each member and forwards the rest to one SecantusDB: it
emulates no replication (what one member writes every member reads at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import pytest
from pymongo import monitoring as _m

import greenpool
from greenpool.testing.replset import ReplicaSet
from tests.events import AllEvents

pytestmark = pytest.mark.timeout(120)


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host, int(port))


def until(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    with gevent.Timeout(timeout, AssertionError(f"never: {what}")):
        while not condition():
            gevent.sleep(0.02)


def where(events: AllEvents, name: str) -> list[tuple[str, int]]:
    """The servers each ``name`` command succeeded on, in order."""
    return [e.connection_id for e in events.of(_m.CommandSucceededEvent)
            if e.command_name == name]


def test_the_client_discovers_the_set_from_one_seed(rs: ReplicaSet) -> None:
    seed = rs.uri.replace(",".join(rs.addresses), rs.addresses[2])
    with greenpool.Client(seed) as client:
        client.command("test_client_replset", {"ping": 1})
        until(lambda: len(client.nodes) == 3, "every member known")
        assert client.primary == address(rs.addresses[0])
        assert client.secondaries == {address(a) for a in rs.addresses[1:]}
        assert client.topology_description.topology_type_name == "ReplicaSetWithPrimary"


def test_writes_go_to_the_primary_and_reads_where_their_preference_says(
        rs: ReplicaSet) -> None:
    events = AllEvents()
    with greenpool.Client(rs.uri, event_listeners=[events]) as client:
        client.command("test_client_replset", {"insert": "reads",
                                               "documents": [{"n": n} for n in range(5)]})
        until(lambda: len(client.secondaries) == 2, "both secondaries known")
        with client.find("test_client_replset", "reads", {}, batch_size=2,
                         read_preference="secondary") as cursor:
            assert len(list(cursor)) == 5
        assert where(events, "insert") == [address(rs.addresses[0])]
        (found,) = where(events, "find")
        assert found in client.secondaries
        assert set(where(events, "getMore")) == {found}  # the cursor's own server


def test_a_stepdown_moves_retryable_writes_to_the_new_primary(rs: ReplicaSet) -> None:
    events = AllEvents()
    uri = f"{rs.uri}&heartbeatFrequencyMS=500"
    with greenpool.Client(uri, event_listeners=[events]) as client:
        client.command("test_client_replset", {"insert": "stepdown", "documents": [{}]})
        old = rs.step_down(successor=1)
        assert old == rs.addresses[0]
        # The next write fails on the old primary (or finds it Unknown already), and is
        # retried on the new one: no error reaches the caller.
        client.command("test_client_replset", {"insert": "stepdown", "documents": [{}]})
        assert where(events, "insert")[-1] == address(rs.addresses[1])
        until(lambda: client.primary == address(rs.addresses[1]), "the new primary known")
        # "not primary" clears no pool.
        assert not events.of(_m.PoolClearedEvent)


def test_writes_go_on_when_the_primary_stops(rs: ReplicaSet) -> None:
    events = AllEvents()
    uri = f"{rs.uri}&heartbeatFrequencyMS=500"
    with greenpool.Client(uri, event_listeners=[events]) as client:
        client.command("test_client_replset", {"insert": "stopped", "documents": [{}]})
        rs.stop_member(0)
        assert rs.primary == rs.addresses[1]
        client.command("test_client_replset", {"insert": "stopped", "documents": [{}]})
        assert where(events, "insert")[-1] == address(rs.addresses[1])
        cleared = {e.address for e in events.of(_m.PoolClearedEvent)}
        assert cleared <= {address(rs.addresses[0])}  # only the stopped member's pool


def test_secondary_preferred_reads_never_fail_while_a_secondary_is_up(
        rs: ReplicaSet) -> None:
    events = AllEvents()
    uri = f"{rs.uri}&heartbeatFrequencyMS=500&readPreference=secondaryPreferred"
    with greenpool.Client(uri, event_listeners=[events]) as client:
        client.command("test_client_replset", {"insert": "sp", "documents": [{}]})
        until(lambda: len(client.secondaries) == 2, "both secondaries known")
        rs.stop_member(2)
        failures: list[Any] = []
        for _ in range(50):
            try:
                with client.find("test_client_replset", "sp", {}) as cursor:
                    list(cursor)
            except Exception as error:  # any failure is the test's failure
                failures.append(error)
        assert not failures, failures[:3]
        assert set(where(events, "find")) <= {address(a) for a in rs.addresses[1:]}


def test_every_member_is_streamed_and_an_election_is_learned_from_the_streams(
        rs: ReplicaSet) -> None:
    """heartbeatFrequencyMS is a minute and the client sends nothing after
    discovery: the new primary (and the old one's stepping down) can only come
    from the replies each member's monitor has awaiting (Server Monitoring spec),
    while an RTT monitor per member measures on a connection of its own."""
    events = AllEvents()
    uri = f"{rs.uri}&heartbeatFrequencyMS=60000"
    with greenpool.Client(uri, event_listeners=[events]) as client:
        members = {address(a) for a in rs.addresses}
        until(lambda: {e.connection_id for e in events.of(_m.ServerHeartbeatStartedEvent)
                       if e.awaited} == members, "an awaited hello on every member")
        monitors = [server.monitor for server in client.topology.servers.values()]
        assert len(monitors) == 3
        assert all(m is not None and m.streaming and m._rtt._greenlet is not None
                   for m in monitors)
        events.clear()
        rs.step_down(successor=1)
        until(lambda: client.primary == address(rs.addresses[1]), "the new primary known")
        until(lambda: address(rs.addresses[0]) in client.secondaries,
              "the old primary a secondary")
        assert all(e.awaited for e in events.of(_m.ServerHeartbeatSucceededEvent))
        assert not events.of(_m.ServerHeartbeatFailedEvent)
