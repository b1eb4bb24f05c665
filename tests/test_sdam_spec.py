"""The SDAM spec's JSON tests, each file by name: ``rs/``, ``sharded/``, ``single/``,
``errors/`` and ``monitoring/``.

``rs/``, ``sharded/`` and ``single/``: each phase's hello replies go through
:func:`greenpool.client.topology.discovery.update`, the pure rules, and the description that
comes out must be the phase's outcome. The initial description comes from the file's
connection string, as a Client builds it.

``errors/`` and ``monitoring/`` drive a :class:`~greenpool.client.topology.topology.Topology`
as the Client builds it, with pools of mock connections and no monitors: a reply is
what a monitor's check reports, an application error goes through the topology's
SDAM rules on the server it names (the pools' generations are checked), and the SDAM
events the topology publishes must be the phase's, in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pymongo import monitoring as _m
from pymongo.errors import AutoReconnect, NetworkTimeout, PyMongoError
from pymongo.server_description import ServerDescription
from pymongo.topology_description import TopologyDescription

from greenpool import Pool, PoolOptions
from greenpool.address import Address
from greenpool.client.config.uri import parse_uri
from greenpool.client.topology import discovery
from greenpool.client.topology.sdam import Phase
from greenpool.client.topology.topology import Topology
from greenpool.wire.connector import mark_establishment_error
from greenpool.wire.replies import check_reply
from tests import sdam_runner
from tests.events import AllEvents
from tests.mock import MockConnector
from tests.spec_files import MISSING_MARK

RS = sdam_runner.load("rs")
SHARDED = sdam_runner.load("sharded")
SINGLE = sdam_runner.load("single")
ERRORS = sdam_runner.load("errors")
MONITORING = sdam_runner.load("monitoring")


@pytest.mark.skipif(not RS, reason=f"SDAM {MISSING_MARK} in {sdam_runner.SDAM_DIR}")
def test_spec_tests_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert ((len(RS), len(SHARDED), len(SINGLE), len(ERRORS), len(MONITORING))
            == (77, 9, 19, 72, 8))


def run(test: dict[str, Any]) -> None:
    settings = parse_uri(test["uri"])
    description = discovery.initial(
        settings.hosts, direct=settings.direct_connection, replica_set=settings.replica_set,
        load_balanced=settings.load_balanced)
    for phase in test["phases"]:
        for source, reply in phase.get("responses", []):
            server = sdam_runner.reply_description(source, reply)
            description = discovery.update(description, server,
                                           seed_count=len(settings.hosts)).description
        sdam_runner.check_outcome(description, phase["outcome"])


@pytest.mark.parametrize(("name", "test"), RS, ids=[name for name, _ in RS])
def test_rs(name: str, test: dict[str, Any]) -> None:
    run(test)


@pytest.mark.parametrize(("name", "test"), SHARDED, ids=[name for name, _ in SHARDED])
def test_sharded(name: str, test: dict[str, Any]) -> None:
    run(test)


@pytest.mark.parametrize(("name", "test"), SINGLE, ids=[name for name, _ in SINGLE])
def test_single(name: str, test: dict[str, Any]) -> None:
    run(test)


# -- errors/ and monitoring/: the Topology ------------------------------------------------


def open_topology(uri: str, listeners: list[object] | None = None) -> Topology:
    settings = parse_uri(uri)

    def make_pool(address: Address) -> Pool[Any]:
        return Pool(address, PoolOptions(), connector=MockConnector())

    topology = Topology(settings.hosts, make_pool, load_balanced=settings.load_balanced,
                        direct=settings.direct_connection, replica_set=settings.replica_set,
                        listeners=listeners or [])
    topology.open(None)  # no monitors: the file's replies are the checks
    return topology


def feed(topology: Topology, phase: Mapping[str, Any]) -> None:
    """The phase's replies as monitor checks, then its application errors."""
    for source, reply in phase.get("responses", []):
        server = topology.servers.get(sdam_runner.address(source))
        if server is None:
            continue  # removed meanwhile: its monitor would have stopped
        if reply:
            topology.check_succeeded(server, sdam_runner.reply_description(source, reply))
        else:
            topology.check_failed(server, AutoReconnect(f"{source}: network error"))
    for error in phase.get("applicationErrors", []):
        server = topology.servers[sdam_runner.address(error["address"])]
        generation = server.pool.stats().generation
        raised = application_error(error)
        if raised is None:
            continue  # the reply succeeded (writeErrors are the operation's, not SDAM's)
        topology.server_error(
            server, raised,
            Phase.OPERATION if error["when"] == "afterHandshakeCompletes" else Phase.CONNECT,
            stale=error.get("generation", generation) < generation,
            max_wire_version=error["maxWireVersion"])


def application_error(error: Mapping[str, Any]) -> PyMongoError | None:
    """The error an operation would have got: a command's, from its reply as the
    link reads it (None if the reply refuses nothing); a network error; a
    network timeout. Before the handshake completes it is an error of the new
    connection's hello, marked as the connector marks those."""
    failure: PyMongoError | None = None
    if error["type"] == "network":
        failure = AutoReconnect(f"{error['address']}: connection reset")
    elif error["type"] == "timeout":
        failure = NetworkTimeout(f"{error['address']}: timed out")
    else:
        try:
            check_reply(dict(error["response"]))
        except PyMongoError as refused:
            failure = refused
    if failure is not None and error["when"] == "beforeHandshakeCompletes":
        mark_establishment_error(failure, completed=False, in_hello=True)
    return failure


@pytest.mark.parametrize(("name", "test"), ERRORS, ids=[name for name, _ in ERRORS])
def test_errors(name: str, test: dict[str, Any]) -> None:
    topology = open_topology(test["uri"])
    try:
        for phase in test["phases"]:
            feed(topology, phase)
            generations = {address: server.pool.stats().generation
                           for address, server in topology.servers.items()}
            sdam_runner.check_outcome(topology.description, phase["outcome"], generations)
    finally:
        topology.close()


_EVENTS = {
    "topology_opening_event": _m.TopologyOpenedEvent,
    "topology_description_changed_event": _m.TopologyDescriptionChangedEvent,
    "server_opening_event": _m.ServerOpeningEvent,
    "server_description_changed_event": _m.ServerDescriptionChangedEvent,
    "server_closed_event": _m.ServerClosedEvent,
    "topology_closed_event": _m.TopologyClosedEvent,
}


@pytest.mark.parametrize(("name", "test"), MONITORING, ids=[name for name, _ in MONITORING])
def test_monitoring(name: str, test: dict[str, Any]) -> None:
    events = AllEvents()
    topology = open_topology(test["uri"], [events])
    try:
        for phase in test["phases"]:
            feed(topology, phase)
            expected = phase["outcome"]["events"]
            assert [type(e).__name__ for e in events.events] == [
                _EVENTS[next(iter(e))].__name__ for e in expected]
            for event, wanted in zip(events.events, expected, strict=True):
                check_event(event, next(iter(wanted.values())))
            events.clear()
    finally:
        topology.close()


def check_event(event: Any, wanted: Mapping[str, Any]) -> None:
    if "address" in wanted:
        assert event.server_address == sdam_runner.address(wanted["address"])
    if "previousDescription" in wanted:
        check_description(event.previous_description, wanted["previousDescription"])
        check_description(event.new_description, wanted["newDescription"])


def check_description(actual: Any, wanted: Mapping[str, Any]) -> None:
    if isinstance(actual, TopologyDescription):
        assert actual.topology_type_name == wanted["topologyType"]
        if "setName" in wanted:
            assert actual.replica_set_name == wanted["setName"]
        servers = actual.server_descriptions()
        assert sorted(servers) == sorted(sdam_runner.address(s["address"])
                                         for s in wanted["servers"])
        for server in wanted["servers"]:
            check_description(servers[sdam_runner.address(server["address"])], server)
        return
    assert isinstance(actual, ServerDescription)
    assert actual.address == sdam_runner.address(wanted["address"])
    assert actual.server_type_name == sdam_runner.TYPE_ALIASES.get(wanted["type"],
                                                                   wanted["type"])
    listed = {sdam_runner.address(host)
              for field in ("hosts", "passives", "arbiters") for host in wanted[field]}
    assert actual.all_hosts == listed
    primary = wanted.get("primary")
    assert actual.primary == (sdam_runner.address(primary) if primary else None)
    assert actual.replica_set_name == wanted.get("setName")
