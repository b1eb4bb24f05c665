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

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import gevent
from bson.objectid import ObjectId
from pymongo import monitoring as _m
from pymongo.errors import ConnectionFailure, ServerSelectionTimeoutError
from pymongo.hello import Hello
from pymongo.server_description import ServerDescription
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool._compiled import mypyc_attr
from greenpool.address import Address, format_address
from greenpool.client.readpref import PRIMARY_ALONE
from greenpool.client.sdam import (
    ErrorContext,
    Phase,
    Verdict,
    check_failed,
    is_stale_description,
    judge,
)
from greenpool.client.topologylog import log_event
from greenpool.errors import ProtocolError
from greenpool.pool.connection import Connection
from greenpool.pool.pool import Pool
from greenpool.pool.waitqueue import Alarm, WaitQueue, WaitTimedOut
from greenpool.wire.connector import handshake_completed

__all__ = ["Checker", "Monitor", "Topology"]

_LOG = logging.getLogger("greenpool")
# SDAM's minHeartbeatFrequencyMS: requested checks come at most this often.
MIN_HEARTBEAT_FREQUENCY = 0.5


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


class Checker(Protocol):
    """One monitoring connection: each ``check()`` is a hello round trip."""

    def check(self) -> tuple[dict[str, Any], float]:
        """The hello reply and the round-trip time in seconds; raises on failure."""

    def close(self) -> None:
        """Close the monitoring connection now (interrupting a check)."""


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
    def description(self) -> TopologyDescription:
        return self._description

    @property
    def server(self) -> ServerDescription:
        return self._server

    # -- opening and closing --------------------------------------------------------

    def open(self, make_checker: Callable[[], Checker] | None) -> None:
        """Emit the opening events; start the monitor, or in load-balanced
        mode describe the balancer and make the pool ready at once."""
        self._emit("opened", _m.TopologyOpenedEvent(self.topology_id))
        kind = TOPOLOGY_TYPE.LoadBalanced if self.load_balanced else TOPOLOGY_TYPE.Single
        self._change_topology(self._describe(kind, {self.address: self._server}))
        self._emit("opened", _m.ServerOpeningEvent(self.address, self.topology_id))
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
            self.monitor = Monitor(self, make_checker)
            self.monitor.start()

    def close(self) -> None:
        """Stop the monitor and emit the closing events."""
        if self._closed:
            return
        self._closed = True
        if self.monitor is not None:
            self.monitor.stop()
        self._emit("closed", _m.ServerClosedEvent(self.address, self.topology_id))
        self._change_topology(self._describe(TOPOLOGY_TYPE.Unknown, {}))
        self._emit("closed", _m.TopologyClosedEvent(self.topology_id))
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
            self._emit("description_changed", _m.ServerDescriptionChangedEvent(
                old, new, self.address, self.topology_id))
            kind = self._description.topology_type
            self._change_topology(self._describe(kind, {self.address: new}))

    def _change_topology(self, new: TopologyDescription) -> None:
        old, self._description = self._description, new
        self._emit("description_changed", _m.TopologyDescriptionChangedEvent(
            old, new, self.topology_id))

    def _emit(self, method: str, event: object, *, driver_connection_id: int | None = None,
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


# Not a native class when compiled: mypyc's native classes cannot be weakly referenced,
# and the fork hook below holds the monitors weakly.
@mypyc_attr(native_class=False)
class Monitor:
    """SDAM's server monitor, as one greenlet with its own connection.

    Each check is a hello on the monitoring connection (opened, with the
    handshake as the first check, when there is none). Between checks it
    sleeps heartbeatFrequencyMS, or less when a check is requested: at once,
    but never sooner than minHeartbeatFrequencyMS (500 ms) after the previous
    check ended; a request that arrives while a check is in flight is
    ignored, as the spec says (selection asks again when it completes). After
    a network error on a server that was known it checks again at once, as
    the spec's retry-once rule says. Its sleeps never keep ``Hub.join()``
    waiting.
    """

    def __init__(self, topology: Topology, make_checker: Callable[[], Checker]) -> None:
        self._topology = topology
        self._make_checker = make_checker
        self._checker: Checker | None = None
        self._alarm = Alarm()
        self._greenlet: gevent.Greenlet | None = None
        self._last_check = 0.0
        self._pid = os.getpid()
        # Bumped whenever the check in flight no longer counts: cancelled,
        # the process forked, the monitor stopped.
        self._epoch = 0
        self._stopped = False
        # For the heartbeat log messages: the monitoring connections opened
        # so far (the current one's driverConnectionId), and the server's id
        # for the current one once a reply told it.
        self._connections = 0
        self._server_connection_id: int | None = None
        _monitors.add(self)

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        self._stopped = True  # also when called from the monitor's own greenlet
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None and greenlet is not gevent.getcurrent():
            greenlet.kill(block=False)
        self.cancel_check()

    def request_check(self) -> None:
        self._alarm.ring()

    def cancel_check(self) -> None:
        """Close the monitoring connection; a check in flight is dropped,
        not reported as a failure (it was cancelled, not the server's doing)."""
        self._epoch += 1
        checker, self._checker = self._checker, None
        if checker is not None:
            checker.close()

    def _forget_parent_checker(self) -> None:
        """Right after a fork, in the child: drop the monitoring connection
        inherited from the parent without I/O on it (closing the inherited
        descriptor sends nothing while the parent holds it). A check in
        flight at the fork wakes with an error that :meth:`_check_once`
        ignores; the next check opens the child's own connection."""
        self._pid = os.getpid()
        self._epoch += 1
        checker, self._checker = self._checker, None
        if checker is not None:
            with contextlib.suppress(Exception):
                checker.close()

    def _run(self) -> None:
        frequency = self._topology._settings.heartbeat_frequency
        while not self._stopped:
            try:
                self._cycle(frequency)
            except Exception:
                # Never reached by a failing check (that is reported as a
                # failed check); a bug must not end monitoring while the
                # client is open, or every selection would time out forever.
                _LOG.exception("greenpool: the monitor of %s raised; it keeps checking",
                               format_address(self._topology.address))
                with contextlib.suppress(Exception):
                    self._alarm.sleep(frequency)

    def _cycle(self, frequency: float) -> None:
        was_known = self._topology.server.is_server_type_known
        failed = self._check_once()
        if isinstance(failed, ConnectionFailure) and was_known and not self._stopped:
            self._check_once()  # a network error on a known server: retry at once (SDAM)
        self._alarm.sleep(frequency)
        # Requested checks may come early, but not sooner than
        # minHeartbeatFrequencyMS after the previous one ended.
        while (early := MIN_HEARTBEAT_FREQUENCY - (time.monotonic() - self._last_check)) > 0:
            self._alarm.sleep(early)

    def _check_once(self) -> BaseException | None:
        """One check; whatever fails in it (connecting, the hello, parsing the
        reply, applying it) is a failed check, reported with that error."""
        topology = self._topology
        if self._pid != os.getpid():
            # Forked without Python's at-fork hooks (uWSGI forks its workers
            # so): the monitoring connection is the parent's.
            self._forget_parent_checker()
        # Requests made until now are answered by this check; those made
        # while it is in flight are ignored (SDAM's "requesting an immediate
        # check"): whoever still needs one asks again when it completes.
        self._alarm.forget()
        if self._checker is None:
            self._connections += 1  # this check opens a new monitoring connection
            self._server_connection_id = None
        ids = {"driver_connection_id": self._connections,
               "server_connection_id": self._server_connection_id}
        started = time.monotonic()
        epoch = self._epoch
        checker = self._checker
        try:
            topology._emit("started", _m.ServerHeartbeatStartedEvent(topology.address, False),
                           **ids)
            if checker is None:
                checker = self._checker = self._make_checker()
            reply, round_trip = checker.check()
            if self._epoch != epoch:
                # Cancelled while connecting, or forked: this reply may be another
                # process's, and this checker is no longer the monitor's.
                if checker is not self._checker:
                    with contextlib.suppress(Exception):
                        checker.close()
                return None
            # Parsed here, so that a reply PyMongo cannot parse (``me: 5``, a
            # host "db1:27017x") fails this check instead of the monitor.
            try:
                hello = Hello(reply)
                description = ServerDescription(topology.address, hello, round_trip)
            except Exception as exc:
                raise ProtocolError(
                    f"{format_address(topology.address)}: PyMongo cannot parse the hello "
                    f"reply: {exc!r}") from exc
            server_id = reply.get("connectionId")
            if isinstance(server_id, int) and not isinstance(server_id, bool):
                self._server_connection_id = ids["server_connection_id"] = server_id
            topology._emit("succeeded", _m.ServerHeartbeatSucceededEvent(
                round_trip, hello, topology.address, False), **ids)
            topology.check_succeeded(description)
        except Exception as error:
            if self._epoch != epoch:
                return None  # cancelled, forked or stopped meanwhile: not the server's doing
            self.cancel_check()
            topology._emit("failed", _m.ServerHeartbeatFailedEvent(
                time.monotonic() - started, error, topology.address, False), **ids)
            topology.check_failed(error)
            return error
        finally:
            # minHeartbeatFrequencyMS counts from the end of a check.
            self._last_check = time.monotonic()
        return None


# Fork safety: a forked child must never share its parent's monitoring
# connection (both would send hellos and read each other's replies).
_monitors: weakref.WeakSet[Monitor] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for monitor in list(_monitors):
        monitor._forget_parent_checker()


os.register_at_fork(after_in_child=_after_fork_in_child)
