"""The Client's topology: one server, or one load balancer, and its monitor.

Rules of this module: the topology's description, its monitor greenlet and the
application of :mod:`greenpool.client.sdam`'s verdicts; deciding what an error means
lives in sdam, not here, and running operations lives in the Client.

greenpool's :class:`~greenpool.Client` talks to a single endpoint, so its
topology is either ``Single`` (a directly connected server, checked by a
monitor greenlet) or ``LoadBalanced`` (no monitor, per the Load Balancer
spec). Descriptions and events are PyMongo's own classes, delivered to
PyMongo's ``TopologyListener``, ``ServerListener`` and
``ServerHeartbeatListener`` objects, so existing SDAM listeners work.

What the topology does with errors is decided by :mod:`greenpool.client.sdam`; this
module applies the verdicts: it marks the server Unknown, clears the pool
(with the error that caused it) and requests an immediate check.

Server selection follows the Server Selection spec's loop: while the server
is unknown, each round requests an immediate check and waits for the next
check to complete (whatever its outcome), until the server is known or the
timeout passes. The monitor runs requested checks at most every
minHeartbeatFrequencyMS (500 ms), so a server that comes back is used within
about half a second of answering, however long heartbeatFrequencyMS is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bson.objectid import ObjectId
from pymongo import monitoring as _m
from pymongo.errors import ServerSelectionTimeoutError
from pymongo.hello import Hello
from pymongo.server_description import ServerDescription
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool.address import Address, format_address
from greenpool.client.monitor import Checker, Monitor
from greenpool.client.readpref import PRIMARY_ALONE
from greenpool.client.roundtrips import RoundTrips
from greenpool.client.sdam import (
    ErrorContext,
    Phase,
    Verdict,
    check_failed,
    is_stale_description,
    judge,
)
from greenpool.client.topologylog import log_event
from greenpool.pool.connection import Connection
from greenpool.pool.pool import Pool
from greenpool.pool.waitqueue import WaitQueue, WaitTimedOut
from greenpool.wire.connector import handshake_completed

__all__ = ["Topology"]

_LOG = logging.getLogger("greenpool")


@dataclass
class _Settings:
    """What PyMongo's TopologyDescription reads from its settings object."""

    seeds: list[Address]
    heartbeat_frequency: float
    _topology_id: ObjectId = field(default_factory=ObjectId)
    _srv_max_hosts: int = 0
    local_threshold_ms: int = 15
    load_balanced: bool = False
    direct: bool = True
    replica_set_name: str | None = None


class Topology:
    """The one server the Client talks to, as SDAM describes it."""

    # What every command reads of the server, set with it (_set_server).
    #: The server once it is usable (its type is known), else None.
    known: ServerDescription | None
    #: A primary read needs no $readPreference (Server Selection spec).
    plain_primary_reads: bool
    session_timeout_minutes: int | None

    def __init__(self, address: Address, pool: Pool[Any], *, load_balanced: bool,
                 heartbeat_frequency: float, server_selection_timeout: float,
                 listeners: Iterable[object] = ()) -> None:
        self.address = address
        self.pool = pool
        self.load_balanced = load_balanced
        self.server_selection_timeout = server_selection_timeout
        self._listeners = list(listeners)
        self._settings = _Settings([address], heartbeat_frequency, load_balanced=load_balanced)
        self._set_server(ServerDescription(address))
        self._description = self._describe(TOPOLOGY_TYPE.Unknown, {})
        # Selections waiting for the next check to complete (Server Selection spec).
        self._checks: WaitQueue[bool] = WaitQueue()
        self.monitor: Monitor | None = None
        self._closed = False

    @property
    def topology_id(self) -> ObjectId:
        return self._settings._topology_id

    @property
    def heartbeat_frequency(self) -> float:
        """heartbeatFrequencyMS, in seconds (what the monitor reads)."""
        return self._settings.heartbeat_frequency

    @property
    def description(self) -> TopologyDescription:
        return self._description

    @property
    def server(self) -> ServerDescription:
        return self._server

    # -- opening and closing --------------------------------------------------------

    def open(self, make_checker: Callable[[], Checker] | None, *, monitoring_mode: str = "auto",
             round_trips: RoundTrips | None = None) -> None:
        """Emit the opening events; start the monitor (serverMonitoringMode
        ``monitoring_mode``, its round-trip times into ``round_trips``), or in
        load-balanced mode describe the balancer and make the pool ready at once."""
        self.publish("opened", _m.TopologyOpenedEvent(self.topology_id))
        kind = TOPOLOGY_TYPE.LoadBalanced if self.load_balanced else TOPOLOGY_TYPE.Single
        self._change_topology(self._describe(kind, {self.address: self._server}))
        self.publish("opened", _m.ServerOpeningEvent(self.address, self.topology_id))
        if self.load_balanced:
            # The Load Balancer spec: no monitor, and the server is described
            # as a LoadBalancer from the start, with every field but its
            # address and type unset (a serviceId is how PyMongo's Hello
            # tells the type; the description does not keep it).
            hello = Hello({"ok": 1, "serviceId": self.topology_id})
            self._change_server(ServerDescription(self.address, hello))
            self.pool.ready()
        else:
            assert make_checker is not None
            self.monitor = Monitor(self, make_checker, mode=monitoring_mode,
                                   round_trips=round_trips)
            self.monitor.start()

    def close(self) -> None:
        """Stop the monitor and emit the closing events."""
        if self._closed:
            return
        self._closed = True
        if self.monitor is not None:
            self.monitor.stop()
        self.publish("closed", _m.ServerClosedEvent(self.address, self.topology_id))
        self._change_topology(self._describe(TOPOLOGY_TYPE.Unknown, {}))
        self.publish("closed", _m.TopologyClosedEvent(self.topology_id))
        self._checks.fail_all(lambda: ServerSelectionTimeoutError("the client was closed"))

    # -- server selection -------------------------------------------------------------

    def select(self, timeout: float | None = None) -> ServerDescription:
        """The server's description once it is usable (known), waiting at most
        the server selection timeout (``timeout`` instead, if given)."""
        if self._closed:
            raise ServerSelectionTimeoutError(
                f"{format_address(self.address)}: the client was closed")
        server = self.known
        if server is not None:
            return server
        return self._wait_for_server(
            self.server_selection_timeout if timeout is None else timeout)

    def _wait_for_server(self, limit: float) -> ServerDescription:
        """The Server Selection spec's loop: request an immediate check, wait
        until a check completes, look again; a failed check wakes the waiters
        too, so each round asks for the next check (the monitor spaces them
        by minHeartbeatFrequencyMS)."""
        expires = time.monotonic() + limit
        while True:
            if self._closed:  # closed while this waiter was being woken
                raise ServerSelectionTimeoutError(
                    f"{format_address(self.address)}: the client was closed")
            if self.monitor is not None:
                self.monitor.request_check()
            try:
                self._checks.join().wait(expires - time.monotonic())
            except WaitTimedOut:
                raise ServerSelectionTimeoutError(
                    f"{format_address(self.address)}: no usable server within {limit:g} s; "
                    f"last error: {self._server.error!r}"
                ) from None
            if self._server.is_server_type_known:
                return self._server

    # -- what checks and errors tell us ---------------------------------------------------

    def check_succeeded(self, description: ServerDescription) -> None:
        """A monitor check succeeded (``description`` is its reply, parsed):
        describe the server, resume the pool."""
        if self._closed:
            return
        if not is_stale_description(self._server.topology_version,
                                    description.topology_version):
            self._change_server(description)
            self.pool.ready()
        self._checks.deliver_all(True)

    def check_failed(self, error: Exception) -> None:
        """A monitor check failed: Unknown, and the pool cleared (and
        in-use connections interrupted if the check timed out)."""
        if self._closed:
            return
        self._apply(check_failed(error), error, service_id=None)
        self._checks.deliver_all(False)

    def handle_error(self, error: Exception, phase: Phase,
                     conn: Connection[Any] | None = None) -> Verdict:
        """Apply SDAM's rules to an application error on ``conn``."""
        link = conn.transport if conn is not None else None
        context = ErrorContext(
            error, phase,
            stale=conn is not None and self.pool.is_stale(conn),
            load_balanced=self.load_balanced,
            # The connection's own wire version: after a first error the
            # description is Unknown, whose wire version (0) says nothing.
            max_wire_version=(link.max_wire_version
                              if link is not None and link.hello is not None else None),
            topology_version=self._server.topology_version,
        )
        verdict = judge(context)
        self._apply(verdict, error, service_id=conn.service_id if conn is not None else None)
        return verdict

    def handle_establish_error(self, error: Exception, conn: Connection[Any]) -> None:
        """The pool's ``on_establish_error`` handler: SDAM's rules for an
        error while establishing ``conn``. Errors up to and including the
        hello are the CONNECT phase (the Load Balancer spec ignores them);
        errors after it (authentication) are the AUTHENTICATE phase."""
        phase = Phase.AUTHENTICATE if handshake_completed(error) else Phase.CONNECT
        self.handle_error(error, phase, conn)

    def _apply(self, verdict: Verdict, error: Exception, service_id: ObjectId | None) -> None:
        if verdict.mark_unknown and not self.load_balanced:
            self._change_server(ServerDescription(self.address, error=error))
        if verdict.clear:
            if self.load_balanced:
                if service_id is not None:
                    self.pool.clear(service_id=service_id, error=error)
            else:
                self.pool.clear(interrupt_in_use_connections=verdict.interrupt, error=error)
        if verdict.request_check and self.monitor is not None:
            self.monitor.request_check()
        elif verdict.mark_unknown and self.monitor is not None:
            # SDAM: after a network error, cancel the check in progress and
            # close the monitoring connection; the next check reconnects.
            self.monitor.cancel_check()

    # -- descriptions and events ------------------------------------------------------------

    def _describe(
        self, kind: int, servers: dict[Address, ServerDescription]
    ) -> TopologyDescription:
        return TopologyDescription(kind, servers, None, None, None, self._settings)

    def _set_server(self, new: ServerDescription) -> None:
        """Describe the server as ``new``, and work out here, once per
        description, what every command would otherwise read of it through
        PyMongo's properties."""
        self._server = new
        self.known = new if new.is_server_type_known else None
        self.plain_primary_reads = (not self.load_balanced
                                    and new.server_type in PRIMARY_ALONE)
        self.session_timeout_minutes = new.logical_session_timeout_minutes

    def _change_server(self, new: ServerDescription) -> None:
        old = self._server
        self._set_server(new)
        if old != new:
            self.publish("description_changed", _m.ServerDescriptionChangedEvent(
                old, new, self.address, self.topology_id))
            kind = self._description.topology_type
            self._change_topology(self._describe(kind, {self.address: new}))

    def _change_topology(self, new: TopologyDescription) -> None:
        old, self._description = self._description, new
        self.publish("description_changed", _m.TopologyDescriptionChangedEvent(
            old, new, self.topology_id))

    def publish(self, method: str, event: object, *, driver_connection_id: int | None = None,
              server_connection_id: int | None = None) -> None:
        log_event(self.topology_id, event, driver_connection_id=driver_connection_id,
                  server_connection_id=server_connection_id)
        kind = _LISTENER_KINDS[type(event)]
        for listener in self._listeners:
            if isinstance(listener, kind):
                try:
                    getattr(listener, method)(event)
                except Exception:
                    _LOG.exception("greenpool: listener %r raised in %s", listener, method)


_LISTENER_KINDS: dict[type, type] = {
    _m.TopologyOpenedEvent: _m.TopologyListener,
    _m.TopologyDescriptionChangedEvent: _m.TopologyListener,
    _m.TopologyClosedEvent: _m.TopologyListener,
    _m.ServerOpeningEvent: _m.ServerListener,
    _m.ServerDescriptionChangedEvent: _m.ServerListener,
    _m.ServerClosedEvent: _m.ServerListener,
    _m.ServerHeartbeatStartedEvent: _m.ServerHeartbeatListener,
    _m.ServerHeartbeatSucceededEvent: _m.ServerHeartbeatListener,
    _m.ServerHeartbeatFailedEvent: _m.ServerHeartbeatListener,
}
