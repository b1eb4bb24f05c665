"""SDAM's server monitor: one greenlet per server, with its own connection.

Rules of this module: when to check a server and how one check runs (connecting, the
hello, parsing its reply), reported to the monitor's owner through the narrow
:class:`MonitorOwner` interface; what a check's outcome does to the topology and the
pool is the owner's business (:mod:`greenpool.client.topology.topology`), what an error means is
:mod:`greenpool.client.topology.sdam`'s. The commands on the wire are the checker's
(:mod:`greenpool.client.topology.checker`), the round-trip times
:mod:`greenpool.client.topology.roundtrips`'.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import gevent
from pymongo import monitoring as _m
from pymongo.errors import ConnectionFailure, NotPrimaryError
from pymongo.hello import Hello
from pymongo.server_description import ServerDescription

from greenpool._compiled import mypyc_attr
from greenpool.address import Address, format_address
from greenpool.client.topology.checker import Checker
from greenpool.client.topology.roundtrips import RoundTrips, RttMonitor
from greenpool.client.topology.sdam import is_stale_description
from greenpool.errors import ProtocolError
from greenpool.pool.waitqueue import Alarm, spawn_background
from greenpool.wire.handshake import faas_platforms

__all__ = ["MIN_HEARTBEAT_FREQUENCY", "MONITORING_MODES", "Checker", "Monitor", "MonitorOwner",
           "streaming_enabled"]

_LOG = logging.getLogger("greenpool")
# SDAM's minHeartbeatFrequencyMS: requested checks come at most this often.
MIN_HEARTBEAT_FREQUENCY = 0.5
#: serverMonitoringMode's values.
MONITORING_MODES = ("auto", "stream", "poll")


def streaming_enabled(mode: str) -> bool:
    """Whether serverMonitoringMode ``mode`` lets a monitor stream: "stream"
    does, "poll" does not, "auto" does except on a function platform (AWS
    Lambda, Azure Functions, Google Cloud Functions, Vercel), where a process
    frozen between calls would find a backlog of stale replies."""
    if mode not in MONITORING_MODES:
        raise ValueError(f"serverMonitoringMode must be one of {', '.join(MONITORING_MODES)}, "
                         f"not {mode!r}")
    return mode == "stream" or (mode == "auto" and not faas_platforms())


class MonitorOwner(Protocol):
    """What a monitor needs of the server it checks: where it is, how often to
    check, what is known of it, and where to report."""

    @property
    def address(self) -> Address: ...

    @property
    def heartbeat_frequency(self) -> float:
        """heartbeatFrequencyMS, in seconds."""

    @property
    def server(self) -> ServerDescription:
        """The server's current description."""

    def publish(self, method: str, event: object, *, driver_connection_id: int | None = None,
                server_connection_id: int | None = None) -> None:
        """Deliver a heartbeat event to the listeners and the log."""

    def check_succeeded(self, description: ServerDescription) -> None:
        """A check succeeded; ``description`` is its reply, parsed."""

    def check_failed(self, error: Exception) -> None:
        """A check failed with ``error``."""


# Not a native class when compiled: mypyc's native classes cannot be weakly referenced,
# and the fork hook below holds the monitors weakly.
@mypyc_attr(native_class=False)
class Monitor:
    """SDAM's server monitor, as one greenlet with its own connection.

    The first check on a connection is its handshake. After it, a server
    that reports a ``topologyVersion`` is monitored with the streaming
    protocol (unless serverMonitoringMode ``mode`` rules it out, see
    :func:`streaming_enabled`): an awaitable hello with exhaustAllowed,
    whose replies the server streams as its state changes, or every
    heartbeatFrequencyMS (maxAwaitTimeMS) when nothing does. Each reply is a
    check, reported at once; a reply without moreToCome is followed at once
    by another awaitable hello. A server that answers sooner than
    minHeartbeatFrequencyMS with nothing new (it does not await) is read at
    most that often. While it streams, an :class:`RttMonitor` measures the
    round trip on a connection of its own.

    Otherwise (polling) each check is a hello, and between checks it sleeps
    heartbeatFrequencyMS, or less when a check is requested: at once, but
    never sooner than minHeartbeatFrequencyMS (500 ms) after the previous
    check ended; a request that arrives while a check is in flight is
    ignored, as the spec says (selection asks again when it completes; a
    streaming monitor always has one in flight). A failed or cancelled
    check closes the connection: the next opens another, after the same
    sleep, except after a network error on a server that was known, which
    is checked again at once (the spec's retry-once rule).

    ``round_trips`` receives the round-trip samples (the handshake, each
    polled hello, the RTT monitor's); the descriptions carry its average
    and minimum. Its sleeps and its streamed waits never keep
    ``Hub.join()`` waiting.
    """

    def __init__(self, owner: MonitorOwner, make_checker: Callable[[], Checker], *,
                 mode: str = "auto", round_trips: RoundTrips | None = None) -> None:
        self._owner = owner
        self._make_checker = make_checker
        self._streaming = streaming_enabled(mode)
        self.round_trips = round_trips if round_trips is not None else RoundTrips()
        self._rtt = RttMonitor(owner.address, make_checker, self.round_trips,
                               owner.heartbeat_frequency)
        self._checker: Checker | None = None
        # The last reply's topologyVersion: the streaming protocol sends it back.
        self._topology_version: Mapping[str, Any] | None = None
        # The last check was awaited, yet came back sooner than
        # minHeartbeatFrequencyMS with nothing new.
        self._hurried = False
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

    @property
    def streaming(self) -> bool:
        """The next check reads a streamed reply, or sends an awaitable hello."""
        checker = self._checker
        return checker is not None and (
            checker.more_to_come or (self._streaming and self._topology_version is not None))

    def start(self) -> None:
        self._greenlet = spawn_background(self._run)

    def stop(self) -> None:
        self._stopped = True  # also when called from the monitor's own greenlet
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None and greenlet is not gevent.getcurrent():
            greenlet.kill(block=False)
        self._rtt.stop()
        self.cancel_check()

    def request_check(self) -> None:
        self._alarm.ring()

    def cancel_check(self) -> None:
        """Close the monitoring connection; a check in flight (a streamed
        wait included) ends at once and is dropped, not reported as a
        failure (it was cancelled, not the server's doing)."""
        self._epoch += 1
        checker, self._checker = self._checker, None
        if checker is not None:
            checker.close()

    def _forget_parent_checker(self) -> None:
        """Right after a fork, in the child: drop the monitoring connections
        inherited from the parent without I/O on them (closing the inherited
        descriptor sends nothing while the parent holds it). A check in
        flight at the fork wakes with an error that :meth:`_check_once`
        ignores; the next check, which comes at once, opens the child's own
        connection."""
        self._pid = os.getpid()
        self._epoch += 1
        checker, self._checker = self._checker, None
        if checker is not None:
            with contextlib.suppress(Exception):
                checker.close()
        self._rtt.forget_parent_connection()
        self._alarm.ring()

    def _run(self) -> None:
        frequency = self._owner.heartbeat_frequency
        while not self._stopped:
            try:
                self._cycle(frequency)
            except Exception:
                # Never reached by a failing check (that is reported as a
                # failed check); a bug must not end monitoring while the
                # client is open, or every selection would time out forever.
                _LOG.exception("greenpool: the monitor of %s raised; it keeps checking",
                               format_address(self._owner.address))
                with contextlib.suppress(Exception):
                    self._alarm.sleep(frequency)

    def _cycle(self, frequency: float) -> None:
        was_known = self._owner.server.is_server_type_known
        failed = self._check_once(frequency)
        if _is_network_error(failed) and was_known and not self._stopped:
            self._check_once(frequency)  # a network error on a known server: retry at once (SDAM)
        if self.streaming and not self._stopped:
            # The streaming protocol: no sleep, the next reply is awaited now;
            # unless the server answered at once with nothing new, which a
            # server that awaits does not do: paced, it cannot make the
            # monitor spin.
            self._rtt.start()
            if self._hurried:
                self._keep_min_frequency()
            return
        self._alarm.sleep(frequency)
        # Requested checks may come early, but not sooner than
        # minHeartbeatFrequencyMS after the previous one ended.
        self._keep_min_frequency()

    def _keep_min_frequency(self) -> None:
        """Sleep until minHeartbeatFrequencyMS after the previous check ended
        (a requested check does not cut this short)."""
        while (early := MIN_HEARTBEAT_FREQUENCY - (time.monotonic() - self._last_check)) > 0:
            self._alarm.sleep(early)

    def _check_once(self, frequency: float) -> BaseException | None:
        """One check; whatever fails in it (connecting, the hello, parsing the
        reply, applying it) is a failed check, reported with that error."""
        owner = self._owner
        if self._pid != os.getpid():
            # Forked without Python's at-fork hooks (uWSGI forks its workers
            # so): the monitoring connection is the parent's.
            self._forget_parent_checker()
        # Requests made until now are answered by this check; those made
        # while it is in flight are ignored (SDAM's "requesting an immediate
        # check"): whoever still needs one asks again when it completes.
        self._alarm.forget()
        awaited = self.streaming
        if self._checker is None:
            self._connections += 1  # this check opens a new monitoring connection
            self._server_connection_id = None
        ids = {"driver_connection_id": self._connections,
               "server_connection_id": self._server_connection_id}
        started = time.monotonic()
        epoch = self._epoch
        checker = self._checker
        known = self._topology_version
        self._hurried = False
        try:
            owner.publish("started", _m.ServerHeartbeatStartedEvent(owner.address, awaited),
                          **ids)
            if checker is None:
                checker = self._checker = self._make_checker()
            reply, round_trip = self._exchange(checker, awaited, frequency)
            if self._epoch != epoch or self._pid != os.getpid():
                # Cancelled while connecting, or forked: this reply may be another
                # process's, and this checker is no longer the monitor's.
                if checker is not self._checker:
                    with contextlib.suppress(Exception):
                        checker.close()
                return None
            hello, description = self._describe(reply, awaited)
            self._hurried = awaited and round_trip < MIN_HEARTBEAT_FREQUENCY and (
                _nothing_new(known, description.topology_version))
            server_id = reply.get("connectionId")
            if isinstance(server_id, int) and not isinstance(server_id, bool):
                self._server_connection_id = ids["server_connection_id"] = server_id
            owner.publish("succeeded", _m.ServerHeartbeatSucceededEvent(
                round_trip, hello, owner.address, awaited), **ids)
            owner.check_succeeded(description)
        except Exception as error:
            if self._epoch != epoch or self._pid != os.getpid():
                return None  # cancelled, forked or stopped meanwhile: not the server's doing
            self.cancel_check()
            self._topology_version = None
            self.round_trips.reset()
            owner.publish("failed", _m.ServerHeartbeatFailedEvent(
                time.monotonic() - started, error, owner.address, awaited), **ids)
            owner.check_failed(error)
            return error
        finally:
            # minHeartbeatFrequencyMS counts from the end of a check.
            self._last_check = time.monotonic()
        return None

    def _exchange(self, checker: Checker, awaited: bool,
                  frequency: float) -> tuple[dict[str, Any], float]:
        """The check's reply and its duration. An awaited reply's duration is
        mostly the server's wait: the round-trip times are not fed by it."""
        if not awaited:
            reply, round_trip = checker.check()
            self.round_trips.add(round_trip)
            return reply, round_trip
        started = time.monotonic()
        # Without a topologyVersion the server is still streaming: the version
        # only goes out with a new awaitable hello.
        reply = checker.await_reply(self._topology_version or {}, frequency)
        return reply, time.monotonic() - started

    def _describe(self, reply: dict[str, Any],
                  awaited: bool) -> tuple[Hello[dict[str, Any]], ServerDescription]:
        """The reply parsed, and as a description carrying the round-trip
        times; parsed here, so that a reply PyMongo cannot parse (``me: 5``,
        a host "db1:27017x") fails this check instead of the monitor."""
        address = self._owner.address
        try:
            hello = Hello(reply, awaitable=awaited)
            description = ServerDescription(address, hello, self.round_trips.average,
                                            min_round_trip_time=self.round_trips.minimum)
            self._topology_version = description.topology_version
        except Exception as exc:
            raise ProtocolError(
                f"{format_address(address)}: PyMongo cannot parse the hello "
                f"reply: {exc!r}") from exc
        return hello, description


def _nothing_new(known: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    return new == known or is_stale_description(known, new)


def _is_network_error(error: BaseException | None) -> bool:
    # PyMongo's NotPrimaryError is an AutoReconnect, but it is the server's
    # answer (a command error), not the network's.
    return isinstance(error, ConnectionFailure) and not isinstance(error, NotPrimaryError)


# Fork safety: a forked child must never share its parent's monitoring
# connection (both would send hellos and read each other's replies).
_monitors: weakref.WeakSet[Monitor] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for monitor in list(_monitors):
        monitor._forget_parent_checker()


os.register_at_fork(after_in_child=_after_fork_in_child)
