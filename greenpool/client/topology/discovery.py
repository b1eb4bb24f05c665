"""Server discovery: how one check's outcome changes the topology, as pure functions.

Rules of this module: the Server Discovery and Monitoring spec's rules for updating a
topology description ("Updating the TopologyDescription": the TopologyType table,
updateRSFromPrimary and the other actions, setVersion and electionId, ``me``,
compatibility by wire version, logicalSessionTimeoutMinutes), written here and nowhere
else; no I/O, no pools, no monitors, no greenlets, no events.
:class:`~greenpool.client.topology.topology.Topology` applies an :class:`Update`: it opens the
servers added, closes those removed, checks at once those named, and publishes the events.

Descriptions are PyMongo's public classes, used as containers:
:class:`~pymongo.server_description.ServerDescription` (one server's last check, parsed
from its hello reply) and :class:`~pymongo.topology_description.TopologyDescription`
(type, set name, maxSetVersion, maxElectionId, servers). PyMongo's own update functions
are not used: the rules are the spec's, so a PyMongo release cannot move them.

Multi-threaded drivers need no PossiblePrimary type (the spec says it is synonymous with
Unknown), so a member named as primary by another stays Unknown until its own check.

Wherever a server is ruled out, the reason names it: a removed server's reason is in
:attr:`Update.removed`, and a server marked Unknown by a rule carries a
:class:`~greenpool.errors.DiscoveryError` saying why (another replica set, a stale
primary), which server selection's error shows.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson.objectid import ObjectId
from pymongo.server_description import ServerDescription
from pymongo.server_type import SERVER_TYPE
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool._version import __version__
from greenpool.address import Address, format_address
from greenpool.client.topology.sdam import is_stale_description
from greenpool.errors import DiscoveryError
from greenpool.wire.handshake import MAX_WIRE_VERSION, MIN_SERVER_VERSION, MIN_WIRE_VERSION

__all__ = [
    "DATA_BEARING",
    "SRV_POLLING",
    "Update",
    "closed",
    "compatibility_error",
    "equivalent",
    "initial",
    "is_stale",
    "session_timeout_minutes",
    "srv_update",
    "update",
]

#: The server types that hold data (the spec's "data-bearing server types").
DATA_BEARING = frozenset({SERVER_TYPE.Mongos, SERVER_TYPE.RSPrimary, SERVER_TYPE.RSSecondary,
                          SERVER_TYPE.Standalone})
_REPLICA_SET_MEMBERS = frozenset({SERVER_TYPE.RSSecondary, SERVER_TYPE.RSArbiter,
                                  SERVER_TYPE.RSOther})
_REPLICA_SETS = frozenset({TOPOLOGY_TYPE.ReplicaSetNoPrimary, TOPOLOGY_TYPE.ReplicaSetWithPrimary})
#: The topology types whose hosts an SRV record poll may change (SRV polling spec).
SRV_POLLING = frozenset({TOPOLOGY_TYPE.Unknown, TOPOLOGY_TYPE.Sharded})
# MongoDB 6.0 (wire version 17) and later order primaries by electionId first.
_ELECTION_ID_FIRST = 17
# What to say of each server type in a reason (PyMongo's names are the spec's).
_TYPE_NAMES = dict(enumerate(SERVER_TYPE._fields))


@dataclass(frozen=True)
class Update:
    """What one outcome does to a topology: its new description, and what the
    topology must do about its servers."""

    description: TopologyDescription
    #: Servers new to the description (open and monitor them), in the order added.
    added: tuple[Address, ...] = ()
    #: Servers taken out of the description (close them), each with why.
    removed: Mapping[Address, str] = field(default_factory=dict)
    #: Servers to check at once: a primary that a newer one replaced.
    check: tuple[Address, ...] = ()


@dataclass(frozen=True)
class _Settings:
    """What PyMongo's TopologyDescription reads of its settings (its staleness
    estimates, its latency window, its repr)."""

    heartbeat_frequency: float
    local_threshold_ms: float
    _topology_id: ObjectId
    _srv_max_hosts: int = 0


def initial(seeds: Iterable[Address], *, direct: bool, replica_set: str | None,
            load_balanced: bool, heartbeat_frequency: float = 10.0,
            local_threshold: float = 0.015,
            topology_id: ObjectId | None = None) -> TopologyDescription:
    """The description a client starts with ("Initial TopologyType"): every seed
    Unknown, in a topology that is LoadBalanced, Single (directConnection=true),
    ReplicaSetNoPrimary (a replicaSet name) or Unknown. The descriptions that
    follow carry the same heartbeatFrequencyMS, localThresholdMS (both in
    seconds here) and topology id."""
    if load_balanced:
        kind = TOPOLOGY_TYPE.LoadBalanced
    elif direct:
        kind = TOPOLOGY_TYPE.Single
    elif replica_set is not None:
        kind = TOPOLOGY_TYPE.ReplicaSetNoPrimary
    else:
        kind = TOPOLOGY_TYPE.Unknown
    servers = {address: ServerDescription(address) for address in seeds}
    settings = _Settings(heartbeat_frequency, local_threshold * 1000,
                         topology_id if topology_id is not None else ObjectId())
    return TopologyDescription(kind, servers, replica_set, None, None, settings)


def closed(description: TopologyDescription) -> TopologyDescription:
    """The description of a closed client: Unknown, without servers ("Client closing")."""
    return _rebuild(description, TOPOLOGY_TYPE.Unknown, {})


def is_stale(current: ServerDescription, new: ServerDescription) -> bool:
    """Whether ``new`` is older than ``current`` by their topologyVersions (both
    from the same server process, the new counter lower): such an outcome is
    ignored. A malformed topologyVersion (anything a server sends can be wrong)
    compares as newer, never raising."""
    return is_stale_description(current.topology_version, new.topology_version)


def update(description: TopologyDescription, server: ServerDescription, *,
           seed_count: int) -> Update:
    """The topology after one outcome for ``server.address`` (a check's reply or
    failure, or an application error that marked the server Unknown).

    ``seed_count``: how many hosts the client was given (a standalone found in
    an Unknown topology is a direct connection only if it was the one seed).
    An outcome for a server no longer in the description, or older than its
    description (topologyVersion), changes nothing.
    """
    address = server.address
    servers = description.server_descriptions()
    current = servers.get(address)
    if current is None or is_stale(current, server):
        return Update(description)
    kind = description.topology_type
    if kind == TOPOLOGY_TYPE.LoadBalanced:
        servers[address] = server  # a LoadBalancer from the start (Load Balancer spec)
        return Update(_rebuild(description, kind, servers))
    if server.server_type == SERVER_TYPE.LoadBalancer:
        server = _unknown(address, f"{format_address(address)} answered as a load balancer "
                                   "(its hello has a serviceId), but the connection string "
                                   "does not say loadBalanced=true")
    if kind == TOPOLOGY_TYPE.Single:
        servers[address] = _check_set_name(server, description.replica_set_name)
        return Update(_rebuild(description, kind, servers))
    return _Discovery(description, servers, server, seed_count).run()


def srv_update(description: TopologyDescription, hosts: Iterable[Address], *,
               srv_max_hosts: int = 0,
               sample: Callable[[list[Address], int], list[Address]] = random.sample
               ) -> Update:
    """The topology after an SRV poll found ``hosts`` (verified ones; the
    "Polling SRV Records for mongos Discovery" spec): in an Unknown or Sharded
    topology, servers no longer listed are removed, the others left alone, and
    new hosts added as Unknown (with srvMaxHosts, as many as make srvMaxHosts,
    chosen by ``sample`` as for the initial seed list). No hosts, or another
    topology type, change nothing."""
    found = set(hosts)
    kind = description.topology_type
    if not found or kind not in SRV_POLLING:
        return Update(description)
    servers = description.server_descriptions()
    removed = {address: f"{format_address(address)} left the topology: the SRV records no "
                        f"longer list it"
               for address in servers if address not in found}
    for address in removed:
        del servers[address]
    new = sorted(found.difference(servers), key=_sort_key)
    if srv_max_hosts and len(servers) + len(new) > srv_max_hosts:
        new = sorted(sample(new, max(0, srv_max_hosts - len(servers))), key=_sort_key)
    for address in new:
        servers[address] = ServerDescription(address)
    if not removed and not new:
        return Update(description)
    return Update(_rebuild(description, kind, servers), added=tuple(new), removed=removed)


def compatibility_error(description: TopologyDescription) -> str | None:
    """Why greenpool cannot talk to this topology: the first known server whose
    wire versions do not overlap greenpool's, in the spec's words; None if all do."""
    if description.topology_type == TOPOLOGY_TYPE.LoadBalanced:
        return None  # the handshake of each connection checks its service
    for server in description.server_descriptions().values():
        if not server.is_server_type_known:
            continue
        where = f"Server at {format_address(server.address)}"
        if server.min_wire_version > MAX_WIRE_VERSION:
            return (f"{where} requires wire version {server.min_wire_version}, but this "
                    f"version of greenpool ({__version__}) only supports up to "
                    f"{MAX_WIRE_VERSION}.")
        if server.max_wire_version < MIN_WIRE_VERSION:
            return (f"{where} reports wire version {server.max_wire_version}, but this "
                    f"version of greenpool ({__version__}) requires at least "
                    f"{MIN_WIRE_VERSION} (MongoDB {MIN_SERVER_VERSION}).")
    return None


def session_timeout_minutes(description: TopologyDescription) -> int | None:
    """The topology's logicalSessionTimeoutMinutes: the smallest among its
    data-bearing servers, None if any of them has none (or there is none).
    A load balancer has sessions that never expire here (Load Balancer spec)."""
    timeouts = [server.logical_session_timeout_minutes
                for server in description.server_descriptions().values()
                if server.server_type in DATA_BEARING]
    if not timeouts or None in timeouts:
        return None
    return min(minutes for minutes in timeouts if minutes is not None)


def equivalent(first: TopologyDescription, second: TopologyDescription) -> bool:
    """Whether two descriptions are equal for SDAM's events: the same type, set
    name, election tuple and servers (each equal by the spec's server equality)."""
    return (first.topology_type == second.topology_type
            and first.replica_set_name == second.replica_set_name
            and first.max_set_version == second.max_set_version
            and first.max_election_id == second.max_election_id
            and first.server_descriptions() == second.server_descriptions())


# -- the TopologyType table ----------------------------------------------------------------


class _Discovery:
    """One outcome applied to a topology of type Unknown, Sharded or a replica
    set: the state the spec's pseudocode updates, and its actions as methods."""

    def __init__(self, description: TopologyDescription,
                 servers: dict[Address, ServerDescription], server: ServerDescription,
                 seed_count: int) -> None:
        self.old = description
        self.kind = description.topology_type
        self.set_name = description.replica_set_name
        self.max_set_version = description.max_set_version
        self.max_election_id = description.max_election_id
        self.servers = servers
        self.server = server
        self.seed_count = seed_count
        self.added: list[Address] = []
        self.removed: dict[Address, str] = {}
        self.check: list[Address] = []
        servers[server.address] = server  # replace the server's previous description

    def run(self) -> Update:
        server_type = self.server.server_type
        if self.kind == TOPOLOGY_TYPE.Unknown:
            self._from_unknown(server_type)
        elif self.kind == TOPOLOGY_TYPE.Sharded:
            if server_type not in (SERVER_TYPE.Unknown, SERVER_TYPE.Mongos):
                self._remove(self.server.address, f"it is {_a(server_type)}, not a mongos of "
                                                  "this sharded cluster")
        elif server_type in (SERVER_TYPE.Standalone, SERVER_TYPE.Mongos):
            self._remove(self.server.address, f"it is {_a(server_type)}, not a member of "
                                              f"replica set {self.set_name!r}")
            self._check_if_has_primary()
        elif server_type == SERVER_TYPE.RSPrimary:
            self._update_rs_from_primary()
        elif server_type in _REPLICA_SET_MEMBERS:
            if self.kind == TOPOLOGY_TYPE.ReplicaSetWithPrimary:
                self._update_rs_with_primary_from_member()
            else:
                self._update_rs_without_primary()
        elif self.kind == TOPOLOGY_TYPE.ReplicaSetWithPrimary:
            self._check_if_has_primary()  # Unknown or RSGhost: was it the primary?
        return self._result()

    def _from_unknown(self, server_type: int) -> None:
        if server_type == SERVER_TYPE.Standalone:
            self._update_unknown_with_standalone()
        elif server_type == SERVER_TYPE.Mongos:
            self.kind = TOPOLOGY_TYPE.Sharded
        elif server_type == SERVER_TYPE.RSPrimary:
            self._update_rs_from_primary()
        elif server_type in _REPLICA_SET_MEMBERS:
            self.kind = TOPOLOGY_TYPE.ReplicaSetNoPrimary
            self._update_rs_without_primary()
        # Unknown or RSGhost: the topology stays Unknown.

    def _result(self) -> Update:
        return Update(
            TopologyDescription(self.kind, self.servers, self.set_name, self.max_set_version,
                                self.max_election_id, _settings(self.old)),
            added=tuple(self.added), removed=dict(self.removed), check=tuple(self.check))

    # -- the spec's actions -----------------------------------------------------------

    def _update_unknown_with_standalone(self) -> None:
        if self.seed_count == 1:
            self.kind = TOPOLOGY_TYPE.Single
        else:
            self._remove(self.server.address,
                         f"it is a standalone server, and the client was given "
                         f"{self.seed_count} hosts (a standalone is used only as the one host)")

    def _update_rs_without_primary(self) -> None:
        server = self.server
        if not self._check_set_name():
            return
        self._add_hosts(server)
        if server.me is not None and server.address != server.me:
            self._remove(server.address, _me_mismatch(server))

    def _update_rs_with_primary_from_member(self) -> None:
        server = self.server
        if not self._check_set_name():
            self._check_if_has_primary()
            return
        if server.me is not None and server.address != server.me:
            self._remove(server.address, _me_mismatch(server))
            self._check_if_has_primary()
            return
        if not self._has_primary():
            self.kind = TOPOLOGY_TYPE.ReplicaSetNoPrimary  # this member had been the primary

    def _update_rs_from_primary(self) -> None:
        server = self.server
        if not self._check_set_name():
            self._check_if_has_primary()
            return
        if not self._is_newest_primary():
            self._check_if_has_primary()
            return
        for address, other in list(self.servers.items()):
            if address != server.address and other.server_type == SERVER_TYPE.RSPrimary:
                # The old primary: Unknown, checked at once, its pool kept.
                self.servers[address] = _unknown(
                    address, f"primary marked stale due to discovery of newer primary "
                             f"{format_address(server.address)}")
                self.check.append(address)
        self._add_hosts(server)
        listed = server.all_hosts
        for address in list(self.servers):
            if address not in listed:
                self._remove(address, f"the primary {format_address(server.address)} does "
                                      f"not list it (hosts, passives, arbiters: "
                                      f"{_listing(listed)})")
        self._check_if_has_primary()

    def _is_newest_primary(self) -> bool:
        """The election tuple rules: record a primary's (electionId, setVersion)
        if it is the newest seen; if it is older, the primary is stale: Unknown."""
        server = self.server
        election_id, set_version = server.election_id, server.set_version
        max_election_id, max_set_version = self.max_election_id, self.max_set_version
        if server.max_wire_version >= _ELECTION_ID_FIRST:
            newest = (_order(election_id) > _order(max_election_id)
                      or (election_id == max_election_id
                          and _order(set_version) >= _order(max_set_version)))
            if not newest:
                self._stale_primary((election_id, set_version),
                                    (max_election_id, max_set_version))
                return False
            self.max_election_id, self.max_set_version = election_id, set_version
            return True
        # Before MongoDB 6.0: setVersion first, and only when both are present.
        if set_version is not None and election_id is not None:
            if (max_set_version is not None and max_election_id is not None
                    and (max_set_version > set_version
                         or (max_set_version == set_version
                             and max_election_id > election_id))):
                self._stale_primary((set_version, election_id),
                                    (max_set_version, max_election_id))
                return False
            self.max_election_id = election_id
        if set_version is not None and (max_set_version is None
                                        or set_version > max_set_version):
            self.max_set_version = set_version
        return True

    def _stale_primary(self, stale: tuple[Any, Any], newest: tuple[Any, Any]) -> None:
        address = self.server.address
        self.servers[address] = _unknown(
            address, f"{format_address(address)}: primary marked stale due to "
                     f"electionId/setVersion mismatch, {stale} is stale compared to {newest}")

    def _check_set_name(self) -> bool:
        """Record the set's name from the first member, or remove a member of
        another set; whether the server is still in the topology."""
        name = self.server.replica_set_name
        if self.set_name is None:
            self.set_name = name
            return True
        if self.set_name != name:
            self._remove(self.server.address,
                         f"it is a member of replica set {name!r}, not {self.set_name!r}")
            return False
        return True

    def _check_if_has_primary(self) -> None:
        self.kind = (TOPOLOGY_TYPE.ReplicaSetWithPrimary if self._has_primary()
                     else TOPOLOGY_TYPE.ReplicaSetNoPrimary)

    def _has_primary(self) -> bool:
        return any(server.server_type == SERVER_TYPE.RSPrimary
                   for server in self.servers.values())

    def _add_hosts(self, server: ServerDescription) -> None:
        for address in sorted(server.all_hosts, key=_sort_key):
            if address not in self.servers:
                self.servers[address] = ServerDescription(address)
                self.added.append(address)

    def _remove(self, address: Address, why: str) -> None:
        del self.servers[address]
        self.removed[address] = f"{format_address(address)} left the topology: {why}"


# -- helpers ---------------------------------------------------------------------------------


def _check_set_name(server: ServerDescription, set_name: str | None) -> ServerDescription:
    """A direct connection given replicaSet: a known server of another set (or of
    none) is Unknown ("Verifying setName with TopologyType Single")."""
    if set_name is None or not server.is_server_type_known:
        return server
    if server.replica_set_name != set_name:
        found = (f"a member of replica set {server.replica_set_name!r}"
                 if server.replica_set_name is not None else f"{_a(server.server_type)}")
        return _unknown(server.address, f"{format_address(server.address)} is {found}, but "
                                        f"the connection string says replicaSet={set_name!r}")
    return server


def _unknown(address: Address, why: str) -> ServerDescription:
    return ServerDescription(address, error=DiscoveryError(why))


def _rebuild(description: TopologyDescription, kind: int,
             servers: dict[Address, ServerDescription]) -> TopologyDescription:
    return TopologyDescription(kind, servers, description.replica_set_name,
                               description.max_set_version, description.max_election_id,
                               _settings(description))


def _settings(description: TopologyDescription) -> Any:
    # What TopologyDescription reads its heartbeat frequency and latency window
    # from, passed on unchanged from one description to the next.
    return description._topology_settings


def _order(value: int | ObjectId | None) -> tuple[int, Any]:
    """A key under which None sorts before any electionId or setVersion."""
    return (0, 0) if value is None else (1, value)


def _me_mismatch(server: ServerDescription) -> str:
    assert server.me is not None
    return (f"it calls itself {format_address(server.me)} ('me' in its hello), so the "
            "replica set knows it by that name")


def _a(server_type: int) -> str:
    name = _TYPE_NAMES.get(server_type, str(server_type))
    return f"an {name}" if name[0] in "AEIOU" else f"a {name}"


def _listing(addresses: Iterable[Address]) -> str:
    return ", ".join(format_address(a) for a in sorted(addresses, key=_sort_key)) or "none"


def _sort_key(address: Address) -> tuple[str, int]:
    return (address[0], address[1] or 0)
