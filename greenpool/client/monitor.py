"""SDAM's server monitor: one greenlet per server, with its own connection.

Rules of this module: when to check a server and how one check runs (connecting, the
hello, parsing its reply), reported to the monitor's owner through the narrow
:class:`MonitorOwner` interface; what a check's outcome does to the topology and the
pool is the owner's business (:mod:`greenpool.client.topology`), what an error means is
:mod:`greenpool.client.sdam`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import gevent
from pymongo import monitoring as _m
from pymongo.errors import ConnectionFailure
from pymongo.hello import Hello
from pymongo.server_description import ServerDescription

from greenpool._compiled import mypyc_attr
from greenpool.address import Address, format_address
from greenpool.errors import ProtocolError
from greenpool.pool.waitqueue import Alarm

__all__ = ["MIN_HEARTBEAT_FREQUENCY", "Checker", "Monitor", "MonitorOwner"]

_LOG = logging.getLogger("greenpool")
# SDAM's minHeartbeatFrequencyMS: requested checks come at most this often.
MIN_HEARTBEAT_FREQUENCY = 0.5


class Checker(Protocol):
    """One monitoring connection: each ``check()`` is a hello round trip."""

    def check(self) -> tuple[dict[str, Any], float]:
        """The hello reply and the round-trip time in seconds; raises on failure."""

    def close(self) -> None:
        """Close the monitoring connection now (interrupting a check)."""



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

    def __init__(self, owner: MonitorOwner, make_checker: Callable[[], Checker]) -> None:
        self._owner = owner
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
        owner = self._owner
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
            owner.publish("started", _m.ServerHeartbeatStartedEvent(owner.address, False),
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
                description = ServerDescription(owner.address, hello, round_trip)
            except Exception as exc:
                raise ProtocolError(
                    f"{format_address(owner.address)}: PyMongo cannot parse the hello "
                    f"reply: {exc!r}") from exc
            server_id = reply.get("connectionId")
            if isinstance(server_id, int) and not isinstance(server_id, bool):
                self._server_connection_id = ids["server_connection_id"] = server_id
            owner.publish("succeeded", _m.ServerHeartbeatSucceededEvent(
                round_trip, hello, owner.address, False), **ids)
            owner.check_succeeded(description)
        except Exception as error:
            if self._epoch != epoch:
                return None  # cancelled, forked or stopped meanwhile: not the server's doing
            self.cancel_check()
            owner.publish("failed", _m.ServerHeartbeatFailedEvent(
                time.monotonic() - started, error, owner.address, False), **ids)
            owner.check_failed(error)
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
