"""Server selection: which servers may run an operation, as pure rules.

Rules of this module: the Server Selection and Max Staleness specs' rules over a
topology description (PyMongo's :class:`~pymongo.topology_description.TopologyDescription`
and :class:`~pymongo.server_description.ServerDescription`, the classes SDAM's listeners
already see), as functions of their arguments: no I/O, no greenlets, no clock, no
waiting. Waiting for the topology to change until a server is suitable is the
topology's selection loop; counting each server's operations is the topology's too,
which hands the count to :func:`pick` as a function.

The steps, in the specs' order:

1. :func:`select_servers` refuses a topology with a server whose wire versions
   greenpool does not speak, and a maxStalenessSeconds a replica set cannot honour;
2. finds the *suitable* servers for the topology type, the operation (read or
   write) and the read preference (:func:`suitable_servers`): the mode picks the
   candidates, maxStalenessSeconds then the tag sets make them eligible; servers
   an operation deprioritized (a retry's first server) are left out unless nothing
   else is suitable;
3. keeps those inside the latency window (:func:`in_latency_window`);
4. :func:`pick` chooses one of them: of two taken at random, the one running
   fewer operations.

A read preference is PyMongo's own object (``pymongo.ReadPreference.SECONDARY``,
``pymongo.read_preferences.Nearest(tag_sets=..., max_staleness=...)``, or one
:mod:`greenpool.client.config.readpref` made): its mode, tag sets and maxStalenessSeconds
are read from it; the rules that apply them are this module's own, so that an
upstream change cannot move them.

Durations are seconds, as PyMongo's descriptions keep them (round-trip times,
lastUpdateTime, lastWriteDate). :func:`average_round_trip_time` is the spec's
moving average of a server's round-trip times, for the monitor that measures them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from pymongo.read_preferences import _ServerMode
from pymongo.server_description import ServerDescription
from pymongo.server_type import SERVER_TYPE
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool.address import Address, format_address
from greenpool.errors import ConfigurationError
from greenpool.wire.handshake import MAX_WIRE_VERSION, MIN_WIRE_VERSION

__all__ = [
    "IDLE_WRITE_PERIOD",
    "RTT_ALPHA",
    "SMALLEST_MAX_STALENESS",
    "average_round_trip_time",
    "check_max_staleness",
    "in_latency_window",
    "pick",
    "select_servers",
    "suitable_servers",
]

#: idleWritePeriodMS: how often an idle primary writes a no-op (Max Staleness), seconds.
IDLE_WRITE_PERIOD: Final = 10.0
#: smallestMaxStalenessSeconds: no maxStalenessSeconds may be smaller.
SMALLEST_MAX_STALENESS: Final = 90
#: The weight of a new sample in the round-trip time's moving average.
RTT_ALPHA: Final = 0.2

# Read preference modes, as PyMongo numbers them.
_PRIMARY, _PRIMARY_PREFERRED, _SECONDARY, _SECONDARY_PREFERRED, _NEAREST = range(5)
_REPLICA_SET = frozenset({TOPOLOGY_TYPE.ReplicaSetWithPrimary, TOPOLOGY_TYPE.ReplicaSetNoPrimary})


def select_servers(
    description: TopologyDescription,
    preference: _ServerMode,
    *,
    local_threshold: float,
    heartbeat_frequency: float,
    is_write: bool = False,
    deprioritized: Collection[Address] = (),
    custom: Callable[[list[ServerDescription]], list[ServerDescription]] | None = None,
) -> list[ServerDescription]:
    """The servers that may run the operation: suitable, and inside the latency window.

    ``preference`` is ignored for writes (only a writable server is suitable)
    and where the spec says so (Single, Sharded, LoadBalanced: every available
    server of the topology is suitable; the read preference travels to a mongos
    in the command instead). ``local_threshold`` is localThresholdMS and
    ``heartbeat_frequency`` heartbeatFrequencyMS, both in seconds.
    ``deprioritized`` holds the addresses an operation's earlier attempt used:
    they are chosen only when no other server is suitable. ``custom`` is
    PyMongo's ``server_selector``: it gets the suitable servers and returns
    those it allows, before the latency window, as PyMongo applies it.

    An empty list means no server is suitable now: the caller waits for the
    topology to change and asks again.

    :raises greenpool.ConfigurationError: a known server speaks no wire version
        greenpool does, or maxStalenessSeconds is too small for a replica set
        (:func:`check_max_staleness`); each message names the server or the value.
    """
    _check_wire_versions(description)
    suitable = suitable_servers(
        description, preference, heartbeat_frequency=heartbeat_frequency,
        is_write=is_write, deprioritized=deprioritized)
    if custom is not None and suitable:
        suitable = list(custom(suitable))
    return in_latency_window(suitable, local_threshold)


def suitable_servers(
    description: TopologyDescription,
    preference: _ServerMode,
    *,
    heartbeat_frequency: float,
    is_write: bool = False,
    deprioritized: Collection[Address] = (),
) -> list[ServerDescription]:
    """The suitable servers, before the latency window (see :func:`select_servers`)."""
    servers = list(description.server_descriptions().values())
    if description.topology_type in _REPLICA_SET and not is_write:
        check_max_staleness(preference.max_staleness, heartbeat_frequency)
    if deprioritized:
        preferred = [server for server in servers if server.address not in deprioritized]
        found = _suitable(description, preferred, preference, heartbeat_frequency, is_write)
        if found:
            return found
    return _suitable(description, servers, preference, heartbeat_frequency, is_write)


def check_max_staleness(max_staleness: int, heartbeat_frequency: float) -> None:
    """Refuse a maxStalenessSeconds a replica set cannot honour: a positive one
    must be at least 90 seconds and at least heartbeatFrequencyMS plus the 10 s
    idle write period, or every secondary could look too stale while the set idles.

    >>> check_max_staleness(-1, 10.0)  # no maximum
    >>> check_max_staleness(60, 10.0)
    Traceback (most recent call last):
    ...
    greenpool.ConfigurationError: maxStalenessSeconds=60 is too small: a replica set \
needs at least 90 seconds (the larger of 90 and heartbeatFrequencyMS 10 s plus the \
10 s idle write period)
    """
    if max_staleness == -1:
        return
    minimum = max(SMALLEST_MAX_STALENESS, heartbeat_frequency + IDLE_WRITE_PERIOD)
    if max_staleness <= 0 or max_staleness < minimum:
        raise ConfigurationError(
            f"maxStalenessSeconds={max_staleness} is too small: a replica set needs at "
            f"least {minimum:g} seconds (the larger of {SMALLEST_MAX_STALENESS} and "
            f"heartbeatFrequencyMS {heartbeat_frequency:g} s plus the "
            f"{IDLE_WRITE_PERIOD:g} s idle write period)")


def in_latency_window(
    servers: Sequence[ServerDescription], local_threshold: float
) -> list[ServerDescription]:
    """The servers whose average round-trip time is at most ``local_threshold``
    seconds (localThresholdMS) above the fastest one's."""
    if len(servers) <= 1:
        return list(servers)
    fastest = min(_round_trip(server) for server in servers)
    return [server for server in servers if _round_trip(server) <= fastest + local_threshold]


def pick(
    candidates: Sequence[ServerDescription],
    operation_count: Callable[[Address], int],
    *,
    rng: random.Random | None = None,
) -> ServerDescription:
    """One of ``candidates`` (servers in the latency window): of two chosen at
    random, the one whose ``operation_count`` (operations in progress on it) is
    lower; between equals, either. Spreads the load towards the less busy
    servers without herding every operation onto the least busy one.

    ``rng`` is the source of randomness (the ``random`` module's by default).

    :raises ValueError: ``candidates`` is empty.
    """
    if not candidates:
        raise ValueError("pick() needs at least one candidate server")
    if len(candidates) == 1:
        return candidates[0]
    first, second = (rng or random).sample(list(candidates), 2)
    if operation_count(second.address) < operation_count(first.address):
        return second
    return first


def average_round_trip_time(previous: float | None, sample: float) -> float:
    """A server's average round-trip time after a new ``sample`` (seconds): the
    sample itself when there is no average yet (the server was Unknown), else
    the exponentially weighted moving average with weight :data:`RTT_ALPHA`.

    >>> average_round_trip_time(None, 0.010)
    0.01
    >>> round(average_round_trip_time(0.010, 0.020), 6)
    0.012

    :raises ValueError: a negative or non-finite sample.
    """
    if not 0 <= sample < float("inf"):
        raise ValueError(f"a round-trip time must be a finite number >= 0, not {sample!r}")
    if previous is None:
        return sample
    return RTT_ALPHA * sample + (1 - RTT_ALPHA) * previous


# -- the suitable servers, by topology type ------------------------------------------


def _suitable(
    description: TopologyDescription,
    servers: list[ServerDescription],
    preference: _ServerMode,
    heartbeat_frequency: float,
    is_write: bool,
) -> list[ServerDescription]:
    topology_type = description.topology_type
    if topology_type == TOPOLOGY_TYPE.Unknown:
        return []
    if topology_type in (TOPOLOGY_TYPE.Single, TOPOLOGY_TYPE.LoadBalanced):
        # A direct connection's server takes everything, whatever its type.
        return [server for server in servers if server.is_server_type_known]
    if topology_type == TOPOLOGY_TYPE.Sharded:
        return [server for server in servers if server.server_type == SERVER_TYPE.Mongos]
    primaries = [server for server in servers if server.server_type == SERVER_TYPE.RSPrimary]
    if is_write:
        return primaries
    mode = preference.mode
    if mode == _PRIMARY or (mode == _PRIMARY_PREFERRED and primaries):
        return primaries
    secondaries = [server for server in servers if server.server_type == SERVER_TYPE.RSSecondary]
    candidates = primaries + secondaries if mode == _NEAREST else secondaries
    eligible = _matching_tags(
        _fresh(description, candidates, preference.max_staleness, heartbeat_frequency),
        preference.tag_sets)
    if not eligible and mode == _SECONDARY_PREFERRED:
        return primaries
    return eligible


def _fresh(
    description: TopologyDescription,
    candidates: list[ServerDescription],
    max_staleness: int,
    heartbeat_frequency: float,
) -> list[ServerDescription]:
    """The candidates no staler than ``max_staleness`` seconds (-1: all of them)."""
    if max_staleness == -1:
        return candidates
    staleness = _staleness_estimator(description, heartbeat_frequency)

    def fresh(server: ServerDescription) -> bool:
        if server.server_type != SERVER_TYPE.RSSecondary:
            return True  # a primary is never stale
        estimate = staleness(server)
        return estimate is not None and estimate <= max_staleness
    return [server for server in candidates if fresh(server)]


def _staleness_estimator(
    description: TopologyDescription, heartbeat_frequency: float
) -> Callable[[ServerDescription], float | None]:
    """How stale a secondary is estimated to be (Max Staleness), in seconds; None
    for a secondary whose hello gave no lastWriteDate, which cannot be estimated
    (and so is never fresh enough)."""
    servers = description.server_descriptions().values()
    primary_lag = next((server.last_update_time - server.last_write_date for server in servers
                        if server.server_type == SERVER_TYPE.RSPrimary
                        and server.last_write_date is not None), None)
    if primary_lag is not None:

        def against_primary(server: ServerDescription) -> float | None:
            if server.last_write_date is None or primary_lag is None:
                return None
            return (server.last_update_time - server.last_write_date
                    - primary_lag + heartbeat_frequency)
        return against_primary
    # No primary (or one that did not say when it last wrote): against the
    # secondary that wrote last.
    newest = max((server.last_write_date for server in servers
                  if server.server_type == SERVER_TYPE.RSSecondary
                  and server.last_write_date is not None), default=None)

    def against_newest(server: ServerDescription) -> float | None:
        if server.last_write_date is None or newest is None:
            return None
        return newest - server.last_write_date + heartbeat_frequency
    return against_newest


def _matching_tags(
    candidates: list[ServerDescription], tag_sets: Sequence[Mapping[str, Any]]
) -> list[ServerDescription]:
    """The candidates matching the first tag set any candidate matches; all of
    them for no tag sets (an empty tag set matches every server)."""
    if not tag_sets:
        return candidates
    for tag_set in tag_sets:
        matching = [server for server in candidates
                    if all(server.tags.get(key) == value for key, value in tag_set.items())]
        if matching:
            return matching
    return []


def _round_trip(server: ServerDescription) -> float:
    # Only a load balancer has none (nobody monitors it), and it is alone in
    # its topology.
    round_trip = server.round_trip_time
    return 0.0 if round_trip is None else round_trip


def _check_wire_versions(description: TopologyDescription) -> None:
    """Refuse a topology with a known server whose wire versions and greenpool's
    do not overlap (Server Selection: "the topology wire version is invalid")."""
    if description.topology_type == TOPOLOGY_TYPE.LoadBalanced:
        return  # the handshake of each connection checks the server behind it
    for server in description.server_descriptions().values():
        if not server.is_server_type_known:
            continue
        low, high = server.min_wire_version, server.max_wire_version
        if low > MAX_WIRE_VERSION or high < MIN_WIRE_VERSION:
            verdict = "too new" if low > MAX_WIRE_VERSION else "too old"
            raise ConfigurationError(
                f"{format_address(server.address)} speaks wire versions {low} through "
                f"{high}, but greenpool speaks {MIN_WIRE_VERSION} through {MAX_WIRE_VERSION}: "
                f"the server is {verdict} for this greenpool")
