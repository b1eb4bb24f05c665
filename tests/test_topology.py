"""greenpool.Client on many servers: discovery, selection, failover and bad members.

Against scripted members (tests/fake_replset.py): each case is deterministic, and
what the client sent is recorded server side. Waits are on events and counts, never
on wall-clock bounds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import dns.name
import dns.rdatatype
import dns.resolver
import gevent
import pytest
from pymongo import monitoring as _m
from pymongo.errors import (
    AutoReconnect,
    InvalidOperation,
    NotPrimaryError,
    OperationFailure,
    ServerSelectionTimeoutError,
)
from pymongo.hello import Hello
from pymongo.read_preferences import ReadPreference
from pymongo.server_description import ServerDescription

from greenpool import Client, Pool, PoolOptions
from greenpool.client.topology import monitor as monitor_module
from greenpool.client.topology.srvpoll import SrvPoller
from greenpool.client.topology.topology import Topology
from greenpool.testing.embedded import free_port
from tests.events import AllEvents
from tests.fake_replset import FakeMongoses, FakeReplicaSet
from tests.fake_server import HANG_UP, FakeServer
from tests.mock import MockConnector
from tests.slow_dns import SlowDNSServer
from tests.uri_dns import seedlist_zone

pytestmark = pytest.mark.timeout(60)


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    with gevent.Timeout(timeout, AssertionError("the condition never held")):
        while not condition():
            gevent.sleep(0.01)


@pytest.fixture
def rs() -> Iterator[FakeReplicaSet]:
    with FakeReplicaSet(3) as members:
        yield members


def addresses(rs: FakeReplicaSet, *indexes: int) -> set[tuple[str, int | None]]:
    return {rs.address(i) for i in indexes}


def monitors_running() -> list[Any]:
    return [m for m in list(monitor_module._monitors) if not m._stopped]


# -- discovery -----------------------------------------------------------------------------


def test_discovers_the_set_from_one_secondary_seed(rs: FakeReplicaSet) -> None:
    events = AllEvents()
    with Client(rs.uri(1), event_listeners=[events]) as client:
        client.command("db", {"insert": "c", "documents": [{}]})
        assert rs.received("insert") == [0]  # the primary, found through member 1
        wait_for(lambda: len(client.nodes) == 3)
        assert client.primary == rs.address(0)
        assert client.secondaries == addresses(rs, 1, 2)
        assert client.address == rs.address(0)
        assert client.topology_description.topology_type_name == "ReplicaSetWithPrimary"
        assert set(client.pools) == addresses(rs, 0, 1, 2)
        opened = [e.server_address for e in events.of(_m.ServerOpeningEvent)]
        assert opened[0] == rs.address(1) and set(opened) == addresses(rs, 0, 1, 2)


def test_one_host_without_direct_connection_is_discovered(rs: FakeReplicaSet) -> None:
    """The URI and SDAM specs: directConnection defaults to false, so one host is a seed."""
    with Client(rs.uri(1, replicaSet=None)) as client:
        client.command("db", {"insert": "c", "documents": [{}]})
        assert rs.received("insert") == [0]
        assert client.topology_description.topology_type_name == "ReplicaSetWithPrimary"


def test_direct_connection_talks_to_the_one_member(rs: FakeReplicaSet) -> None:
    with Client(rs.uri(1, directConnection="true")) as client:
        with pytest.raises(NotPrimaryError):
            client.command("db", {"insert": "c", "documents": [{}]}, retry=False)
        client.command("db", {"count": "c"})
        assert rs.received("insert") == [1] and rs.received("count") == [1]
        # A direct connection to a secondary: primary reads say primaryPreferred.
        assert rs.requests("count")[0].command["$readPreference"] == {
            "mode": "primaryPreferred"}
        assert client.nodes == addresses(rs, 1)
        assert client.address == rs.address(1)
        assert client.pool is client.pools[rs.address(1)]


def test_single_server_attributes_name_the_servers_when_there_are_several(
        rs: FakeReplicaSet) -> None:
    with Client(rs.uri()) as client:
        client.command("admin", {"ping": 1})
        for attribute in ("pool", "min_round_trip"):
            with pytest.raises(InvalidOperation) as caught:
                getattr(client, attribute)
            message = str(caught.value)
            assert f"client.{attribute}" in message and "use client.pools[address]" in message
            assert all(rs.host(i) in message for i in range(3))
        with pytest.raises(InvalidOperation):
            client.stats()
        assert all(pool.stats().state in ("ready", "paused") for pool in client.pools.values())


# -- selection -----------------------------------------------------------------------------


def test_reads_follow_the_read_preference_and_cursors_stay_on_their_server(
        rs: FakeReplicaSet) -> None:
    with Client(rs.uri()) as client:
        wait_for(lambda: len(client.secondaries) == 2)
        with client.find("db", "c", {}, read_preference=ReadPreference.SECONDARY) as cursor:
            documents = list(cursor)
        member = documents[0]["member"]
        assert member in (1, 2) and documents == [{"member": member}, {"member": member}]
        assert cursor.address == rs.address(member)
        assert rs.received("find") == [member] and rs.received("getMore") == [member]
        find = rs.requests("find")[0].command
        assert find["$readPreference"] == {"mode": "secondary"}
        assert "$readPreference" not in rs.requests("getMore")[0].command
        client.command("db", {"count": "c"})  # primary: no $readPreference (Server Selection)
        assert rs.received("count") == [0]
        assert "$readPreference" not in rs.requests("count")[0].command


def test_secondary_reads_spread_over_the_secondaries(rs: FakeReplicaSet) -> None:
    # A wide latency window: round trips on a busy machine must not decide.
    with Client(rs.uri(localThresholdMS=60000)) as client:
        wait_for(lambda: len(client.secondaries) == 2)
        for _ in range(40):
            client.command("db", {"count": "c"}, read_preference="secondary")
        served = rs.received("count")
        assert set(served) == {1, 2}, served


def test_cluster_time_is_gossiped(rs: FakeReplicaSet) -> None:
    rs.cluster_time = True
    with Client(rs.uri()) as client, client.start_session() as session:
        client.command("db", {"count": "c"})
        first = client.topology.cluster_time
        assert first is not None
        client.command("db", {"count": "c"}, session=session)
        counts = rs.requests("count")
        assert counts[1].command["$clusterTime"] == first  # sent on the next command
        assert session.cluster_time is not None
        assert session.cluster_time["clusterTime"] > first["clusterTime"]
        client.command("db", {"count": "c"})
        assert client.topology.cluster_time["clusterTime"] > first["clusterTime"]


# -- failover ------------------------------------------------------------------------------


def test_a_retryable_write_after_a_stepdown_runs_on_the_new_primary(
        rs: FakeReplicaSet) -> None:
    events = AllEvents()
    with Client(rs.uri(), event_listeners=[events]) as client:
        client.command("db", {"insert": "c", "documents": [{}]})
        rs.step_down()  # member 0 refuses writes from now on
        gevent.spawn_later(0.2, rs.elect, 1)
        reply = client.command("db", {"insert": "c", "documents": [{}]})
        assert reply["n"] == 1
        first, refused, retried = (r.command for r in rs.requests("insert"))
        assert rs.received("insert") == [0, 0, 1]
        assert refused["lsid"] == retried["lsid"] == first["lsid"]
        assert refused["txnNumber"] == retried["txnNumber"] == first["txnNumber"] + 1
        assert client.primary == rs.address(1)
        # "not primary" marked member 0 Unknown and cleared no pool.
        unknown = [e.server_address for e in events.of(_m.ServerDescriptionChangedEvent)
                   if e.new_description.server_type_name == "Unknown"]
        assert rs.address(0) in unknown
        assert not events.of(_m.PoolClearedEvent)


def test_a_network_error_marks_the_server_unknown_and_clears_its_pool_alone(
        rs: FakeReplicaSet) -> None:
    events = AllEvents()
    with Client(rs.uri(), event_listeners=[events]) as client:
        wait_for(lambda: len(client.secondaries) == 2)
        client.command("db", {"count": "c"}, read_preference="secondary")
        hang = rs.servers[0].handlers["count"]
        rs.servers[0].handlers["count"] = lambda request: HANG_UP
        with pytest.raises(AutoReconnect) as caught:
            client.command("db", {"count": "c"}, retry=False)
        rs.servers[0].handlers["count"] = hang
        cleared = [e.address for e in events.of(_m.PoolClearedEvent)]
        assert cleared == [rs.address(0)]
        described = client.topology_description.server_descriptions()[rs.address(0)]
        assert described.server_type_name == "Unknown" and described.error is caught.value
        assert client.topology_description.topology_type_name == "ReplicaSetNoPrimary"
        assert client.command("db", {"count": "c"})["n"] == 0  # back on the primary


# -- bad members ---------------------------------------------------------------------------


def test_a_seed_the_primary_does_not_list_is_removed_and_closed(
        rs: FakeReplicaSet, caplog: pytest.LogCaptureFixture) -> None:
    """A seed that answers as a member of the set but is not in the primary's
    host list (a hidden member, a stale config) leaves the topology: its monitor
    stops, its pool closes, and the log says why, naming it."""
    caplog.set_level(logging.INFO, logger="greenpool")
    stranger = FakeServer(hello={"setName": "rs", "isWritablePrimary": False,
                                 "secondary": True, "hosts": [rs.host(0)]})
    events = AllEvents()
    with stranger:
        host, port = stranger.address
        uri = rs.uri(0).replace(rs.host(0), f"{rs.host(0)},{host}:{port}")
        with Client(uri, event_listeners=[events]) as client:
            pool = client.pools[(host, port)]
            client.command("admin", {"ping": 1})
            wait_for(lambda: events.of(_m.ServerClosedEvent))
            (closed,) = events.of(_m.ServerClosedEvent)
            assert closed.server_address == (host, port)
            assert (host, port) not in client.pools
            assert pool.stats().state == "closed"
            assert f"{host}:{port} left the topology: the primary {rs.host(0)} does not " \
                   f"list it" in caplog.text
            running = [m for m in monitors_running() if m._owner.address == (host, port)]
            assert not running


def test_a_member_of_another_set_is_removed(
        rs: FakeReplicaSet, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="greenpool")
    rs.overrides[2]["setName"] = "other"
    rs.primary = None
    rs.refresh()
    with Client(rs.uri(2, 1, serverSelectionTimeoutMS=1000)) as client:
        wait_for(lambda: rs.address(2) not in client.pools)
        assert (f"{rs.host(2)} left the topology: it is a member of replica set 'other', "
                f"not 'rs'") in caplog.text


def test_a_server_that_is_not_mongodb_is_named_in_the_selection_error() -> None:
    class HttpServer(FakeServer):
        def _serve(self, sock: Any, _address: Any) -> None:
            with sock:
                sock.recv(1024)
                sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    with HttpServer() as server:
        host, port = server.address
        with (Client(f"mongodb://{host}:{port}/?serverSelectionTimeoutMS=1000") as client,
              pytest.raises(ServerSelectionTimeoutError) as caught):
            client.command("admin", {"ping": 1})
    message = str(caught.value)
    assert f"{host}:{port} Unknown" in message
    assert "is not a MongoDB server" in message


def test_a_primary_that_lists_itself_wrongly_is_replaced_by_the_hosts_it_lists(
        caplog: pytest.LogCaptureFixture) -> None:
    """The primary's host list names another address (a dead one): the seed leaves
    the topology, the listed host is monitored, and selection fails within its
    timeout with an error that names both, and why."""
    caplog.set_level(logging.INFO, logger="greenpool")
    dead = f"127.0.0.1:{free_port()}"
    with FakeServer(hello={"setName": "rs", "hosts": [dead], "primary": dead,
                           "me": dead}) as server:
        host, port = server.address
        with Client(f"mongodb://{host}:{port}/?serverSelectionTimeoutMS=1000") as client:
            with pytest.raises(ServerSelectionTimeoutError) as caught:
                client.command("admin", {"ping": 1})
            assert (host, port) not in client.pools
            message = str(caught.value)
            assert f"{dead} Unknown (last error:" in message
            assert (f"{host}:{port} left the topology: the primary {host}:{port} does not "
                    f"list it (hosts, passives, arbiters: {dead})") in message
            # Its monitor stopped; the dead host's keeps checking.
            assert [m._owner.address for m in monitors_running()
                    if m._owner.address in ((host, port), ("127.0.0.1", int(dead[10:])))] \
                == [("127.0.0.1", int(dead[10:]))]


def test_members_that_do_not_answer_never_hold_up_the_primary(
        caplog: pytest.LogCaptureFixture) -> None:
    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    with FakeServer(hello={"setName": "rs", "isWritablePrimary": True}) as server:
        host, port = server.address
        me = f"{host}:{port}"
        server.hello.update(hosts=[me, *dead], primary=me, me=me)
        with Client(f"mongodb://{me}/?replicaSet=rs&serverSelectionTimeoutMS=1000") as client:
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            with pytest.raises(ServerSelectionTimeoutError) as caught:
                client.command("admin", {"ping": 1}, read_preference="secondary")
            message = str(caught.value)
            assert "a read with read preference {'mode': 'secondary'}" in message
            assert all(f"{each} Unknown (last error:" in message for each in dead)
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            owners = {m._owner.address for m in monitors_running()}
            assert {("127.0.0.1", int(each.rpartition(":")[2])) for each in dead} <= owners


def test_a_standalone_among_several_seeds_is_removed(
        rs: FakeReplicaSet, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="greenpool")
    with FakeServer() as standalone:
        host, port = standalone.address
        uri = f"mongodb://{host}:{port},{rs.host(0)}/"
        with Client(uri) as client:
            client.command("db", {"insert": "c", "documents": [{}]})
            wait_for(lambda: (host, port) not in client.pools)
            assert rs.received("insert") == [0]
            # Whichever check comes first: in an Unknown topology a standalone among
            # several seeds is removed; once the primary is known, it is not listed.
            assert (f"{host}:{port} left the topology: it is a standalone server, and the "
                    f"client was given 2 hosts") in caplog.text or (
                f"{host}:{port} left the topology: the primary {rs.host(0)} does not "
                f"list it") in caplog.text


# -- sharded clusters ----------------------------------------------------------------------


def test_a_sharded_cluster_spreads_work_and_pins_transactions() -> None:
    # A wide latency window: round trips on a busy machine must not decide.
    with FakeMongoses(2) as mongoses, Client(mongoses.uri(localThresholdMS=60000)) as client:
        wait_for(lambda: len(client.nodes) == 2)
        assert client.topology_description.topology_type_name == "Sharded"
        with pytest.raises(InvalidOperation, match=r"use client\.nodes"):
            _ = client.address
        for _ in range(30):
            client.command("db", {"ping": 1})
        assert set(mongoses.received("ping")) == {0, 1}
        client.command("db", {"find": "c"}, read_preference="secondaryPreferred")
        assert mongoses.requests("find")[-1].command["$readPreference"] == {
            "mode": "secondaryPreferred"}
        with client.start_session() as session:
            session.start_transaction()
            for _ in range(6):
                client.command("db", {"insert": "c", "documents": [{}]}, session=session)
            session.commit_transaction()
            pinned = set(mongoses.received("insert")) | set(
                mongoses.received("commitTransaction"))
            assert len(pinned) == 1, mongoses.log
            assert session.pinned_address in client.nodes
            # A transient error unpins (the transaction may be retried elsewhere).
            session.start_transaction()
            assert session.pinned_address is None
            client.command("db", {"insert": "c", "documents": [{}]}, session=session)
            assert session.pinned_address is not None
            mongoses.failures["insert"] = [
                {"ok": 0.0, "code": 112, "errmsg": "write conflict",
                 "errorLabels": ["TransientTransactionError"]}] * 2
            with pytest.raises(OperationFailure) as caught:
                client.command("db", {"insert": "c", "documents": [{}]}, session=session)
            assert caught.value.has_error_label("TransientTransactionError")
            assert session.pinned_address is None
            session.abort_transaction()


# -- SRV polling: the hosts a poll finds -----------------------------------------------------


def mock_topology(seeds: list[tuple[str, int]], events: AllEvents, **options: Any) -> Topology:
    topology = Topology(seeds, lambda address: Pool(address, PoolOptions(),
                                                    connector=MockConnector()),
                        listeners=[events], **options)
    topology.open(None)
    return topology


def test_an_srv_poll_closes_the_mongoses_it_no_longer_lists_and_opens_new_ones() -> None:
    a, b, c, d = (("h", port) for port in (1, 2, 3, 4))
    events = AllEvents()
    topology = mock_topology([a, b], events)
    try:
        pool_a = topology.servers[a].pool
        events.clear()
        topology.srv_hosts_changed([b, c])
        assert set(topology.servers) == {b, c}
        assert pool_a.stats().state == "closed"
        assert [type(e).__name__ for e in events.events] == [
            "ServerOpeningEvent", "ServerClosedEvent", "TopologyDescriptionChangedEvent"]
        assert (events.events[0].server_address, events.events[1].server_address) == (c, a)
        events.clear()
        topology.srv_hosts_changed([])  # no verified hosts: nothing changes
        topology.srv_hosts_changed([b, c])
        assert set(topology.servers) == {b, c} and not events.events
        topology.srv_hosts_changed([b, c, d], srv_max_hosts=2)  # full already
        assert set(topology.servers) == {b, c}
        topology.srv_hosts_changed([c, d, a], srv_max_hosts=2)
        assert len(topology.servers) == 2 and c in topology.servers
    finally:
        topology.close()


def test_an_srv_poll_never_changes_a_replica_set() -> None:
    events = AllEvents()
    topology = mock_topology([("h", 1)], events, replica_set="rs")
    try:
        assert not topology.polls_srv
        topology.srv_hosts_changed([("h", 2)])
        assert set(topology.servers) == {("h", 1)}
    finally:
        topology.close()


def test_a_client_on_a_srv_name_follows_its_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Client polls a mongodb+srv:// name while its topology is Unknown or Sharded:
    a rescan that finds other records closes the servers they no longer name and opens
    the new ones (nothing listens there: they stay Unknown)."""
    host = "test1.test.build.10gen.cc"
    records = [f"0 0 {port} localhost.test.build.10gen.cc." for port in (27017, 27018)]
    zone = {**seedlist_zone(), (dns.name.from_text(f"_mongodb._tcp.{host}"),
                                dns.rdatatype.SRV): records}
    with SlowDNSServer(zone, ttl=0) as server:
        monkeypatch.setattr(dns.resolver, "default_resolver", server.resolver())
        with Client(f"mongodb+srv://{host}/?tls=false&serverSelectionTimeoutMS=100") as client:
            poller = client.topology.srv_poller
            assert poller is not None and poller.running
            first = {("localhost.test.build.10gen.cc", port) for port in (27017, 27018)}
            assert set(client.topology.servers) == first
            closing = client.pools[("localhost.test.build.10gen.cc", 27017)]
            server.zone = {**zone, (dns.name.from_text(f"_mongodb._tcp.{host}"),
                                    dns.rdatatype.SRV): [
                f"0 0 {port} localhost.test.build.10gen.cc." for port in (27018, 27019)]}
            poller.rescan()
            assert set(client.topology.servers) == {
                ("localhost.test.build.10gen.cc", port) for port in (27018, 27019)}
            assert closing.stats().state == "closed"
        assert not poller.running  # stopped with the client


def test_srv_polling_stops_once_the_topology_is_a_replica_set() -> None:
    events = AllEvents()
    seed = ("h", 1)
    topology = mock_topology([seed], events)
    poller = SrvPoller("cluster.example.com", heartbeat_frequency=10.0,
                       current_hosts=lambda: list(topology.servers),
                       on_hosts=topology.srv_hosts_changed)
    try:
        topology.poll_srv(poller)
        assert poller.running and topology.srv_poller is poller
        primary = ServerDescription(seed, Hello({
            "ok": 1, "isWritablePrimary": True, "setName": "rs", "hosts": ["h:1"],
            "minWireVersion": 0, "maxWireVersion": 21}))
        topology.check_succeeded(topology.servers[seed], primary)
        assert topology.description.topology_type_name == "ReplicaSetWithPrimary"
        assert not poller.running and topology.srv_poller is None
    finally:
        topology.close()
