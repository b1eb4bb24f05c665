"""One server of a topology: its description, its pool, its monitor.

Rules of this module: what belongs to one address and nothing more. A :class:`Server`
is created when discovery adds its address to the topology and closed when discovery
removes it; it reports its monitor's checks to the topology, which alone decides what
they mean (:mod:`~greenpool.client.topology.discovery`,
:mod:`~greenpool.client.topology.sdam`). It holds no description of other servers and
never waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pymongo.server_description import ServerDescription

from greenpool.address import Address
from greenpool.client.topology.monitor import Checker, Monitor
from greenpool.client.topology.roundtrips import MinRoundTrip, RoundTrips
from greenpool.pool.pool import Pool

__all__ = ["Server", "ServerOwner"]


class ServerOwner(Protocol):
    """What a server reports to: its topology."""

    @property
    def heartbeat_frequency(self) -> float: ...

    def publish(self, method: str, event: object, *, driver_connection_id: int | None = None,
                server_connection_id: int | None = None) -> None: ...

    def check_succeeded(self, server: Server, description: ServerDescription) -> None: ...

    def check_failed(self, server: Server, error: Exception) -> None: ...


class Server:
    """One address of the topology, with its CMAP pool and its monitor.

    It is the monitor's owner (:class:`~greenpool.client.topology.monitor.MonitorOwner`):
    the monitor reads its address, heartbeat frequency and description, and
    reports each check here, which passes it on to the topology.
    """

    #: The server's description in the topology (the last check's, after
    #: discovery's rules; Unknown until then).
    description: ServerDescription
    #: A primary read to this server carries no $readPreference (Server
    #: Selection spec): set by the topology with each description.
    plain_primary_reads: bool

    def __init__(self, owner: ServerOwner, address: Address, pool: Pool[Any]) -> None:
        self.address = address
        self.pool = pool
        self.description = ServerDescription(address)
        self.plain_primary_reads = True
        self.monitor: Monitor | None = None
        #: The minimum round trip of the monitor's last checks (maxTimeMS allows for it).
        self.min_round_trip = MinRoundTrip()
        #: Its round-trip times (average and minimum), which its monitor measures
        #: and its descriptions carry.
        self.round_trips = RoundTrips(self.min_round_trip)
        self._owner = owner

    def start(self, make_checker: Callable[[Server], Checker] | None, *,
              mode: str = "auto") -> None:
        """Start monitoring (unless ``make_checker`` is None: no monitor), with
        serverMonitoringMode ``mode``: streamed where the server supports it
        and ``mode`` allows, polled otherwise (see
        :class:`~greenpool.client.topology.monitor.Monitor`)."""
        if make_checker is not None:
            self.monitor = Monitor(self, lambda: make_checker(self), mode=mode,
                                   round_trips=self.round_trips)
            self.monitor.start()

    def close(self) -> None:
        """Stop the monitor and close the pool."""
        if self.monitor is not None:
            self.monitor.stop()
        self.pool.close()

    def operation_count(self) -> int:
        """The operations in progress on this server, for selection's choice
        between two: its connections in use, being established, and waited for."""
        stats = self.pool.stats()
        return stats.in_use + stats.pending + stats.waiting

    # -- the monitor's owner -----------------------------------------------------------

    @property
    def heartbeat_frequency(self) -> float:
        return self._owner.heartbeat_frequency

    @property
    def server(self) -> ServerDescription:
        """The description (the name
        :class:`~greenpool.client.topology.monitor.MonitorOwner` reads)."""
        return self.description

    def publish(self, method: str, event: object, *, driver_connection_id: int | None = None,
                server_connection_id: int | None = None) -> None:
        self._owner.publish(method, event, driver_connection_id=driver_connection_id,
                            server_connection_id=server_connection_id)

    def check_succeeded(self, description: ServerDescription) -> None:
        self._owner.check_succeeded(self, description)

    def check_failed(self, error: Exception) -> None:
        self._owner.check_failed(self, error)

    def __repr__(self) -> str:
        return f"<Server {self.description!r}>"
