"""Server selection: which servers of a topology suit an operation, as pure functions.

Rules of this module: the Server Selection spec's rules over a topology description,
with no I/O, no waiting and no pools; :class:`~greenpool.client.topology.Topology`
waits for a suitable server and checks a connection out of it.

:func:`select_servers` gives the suitable servers inside the latency window
(localThresholdMS); :func:`pick` chooses one of them by the "two random choices"
rule (the one with fewer operations in progress of two picked at random).

This is the minimal version: for replica sets it knows the modes (the primary,
the secondaries, either, both), and ignores tag sets and maxStalenessSeconds.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from pymongo.read_preferences import _ServerMode
from pymongo.server_description import ServerDescription
from pymongo.server_type import SERVER_TYPE
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool.address import Address

__all__ = ["pick", "select_servers"]


def select_servers(description: TopologyDescription, preference: _ServerMode, *,
                   local_threshold: float, heartbeat_frequency: float,
                   is_write: bool = False) -> list[ServerDescription]:
    """The servers suitable for an operation with ``preference`` (a write if
    ``is_write``), within ``local_threshold`` seconds of the fastest of them."""
    kind = description.topology_type
    servers = list(description.server_descriptions().values())
    if kind in (TOPOLOGY_TYPE.Single, TOPOLOGY_TYPE.LoadBalanced):
        return [s for s in servers if s.is_server_type_known]
    if kind == TOPOLOGY_TYPE.Sharded:
        return _in_window([s for s in servers if s.server_type == SERVER_TYPE.Mongos],
                          local_threshold)
    if kind == TOPOLOGY_TYPE.Unknown:
        return []
    primaries = [s for s in servers if s.server_type == SERVER_TYPE.RSPrimary]
    mode = "primary" if is_write else preference.mongos_mode
    if mode == "primary":
        return primaries
    secondaries = _in_window([s for s in servers if s.server_type == SERVER_TYPE.RSSecondary],
                             local_threshold)
    if mode == "secondary":
        return secondaries
    if mode == "secondaryPreferred":
        return secondaries or primaries
    if mode == "primaryPreferred":
        return primaries or secondaries
    return _in_window(primaries + [s for s in servers
                                   if s.server_type == SERVER_TYPE.RSSecondary],
                      local_threshold)


def pick(candidates: list[ServerDescription],
         operation_count: Callable[[Address], int]) -> ServerDescription:
    """One of ``candidates`` (not empty): of two chosen at random, the one with
    fewer operations in progress."""
    if len(candidates) == 1:
        return candidates[0]
    first, second = random.sample(candidates, 2)
    return first if operation_count(first.address) <= operation_count(second.address) else second


def _in_window(servers: list[ServerDescription], local_threshold: float
               ) -> list[ServerDescription]:
    if not servers:
        return servers
    times = [s.round_trip_time or 0.0 for s in servers]
    fastest = min(times)
    return [s for s, rtt in zip(servers, times, strict=True) if rtt - fastest <= local_threshold]
