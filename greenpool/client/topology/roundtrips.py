"""A server's round-trip times (:class:`RoundTrips`) and the greenlet that measures them
while its monitor streams (:class:`RttMonitor`).

Rules of this module: keeping a server's samples for the Server Selection spec's
average (:func:`~greenpool.client.topology.selection.average_round_trip_time`) and the Server
Monitoring spec's minimum (of the last ten samples, 0 until there are two); what is
sampled when is the monitor's (:mod:`greenpool.client.topology.monitor`). The RTT monitor
publishes no event and never changes the server's description: an error costs its
own connection and nothing else, as the spec says.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable

import gevent

from greenpool.address import Address, format_address
from greenpool.client.topology.checker import Checker
from greenpool.client.topology.selection import average_round_trip_time
from greenpool.pool.waitqueue import Alarm, spawn_background

__all__ = ["MinRoundTrip", "RoundTrips", "RttMonitor"]

_LOG = logging.getLogger("greenpool")


class MinRoundTrip:
    """The minimum of the last ten round-trip samples (SDAM's
    minRoundTripTime); 0 until there are two, as the spec says."""

    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: deque[float] = deque(maxlen=10)

    def add(self, seconds: float) -> None:
        self._samples.append(seconds)

    def reset(self) -> None:
        self._samples.clear()

    @property
    def value(self) -> float:
        return min(self._samples) if len(self._samples) >= 2 else 0.0


class RoundTrips:
    """A server's round-trip times, in seconds: :attr:`average` (SDAM's
    roundTripTime) and :attr:`minimum` (minRoundTripTime, which timeoutMS
    allows for). ``recent`` is the minimum's samples, given when another
    part of the client reads them too."""

    __slots__ = ("_average", "recent")

    def __init__(self, recent: MinRoundTrip | None = None) -> None:
        self._average: float | None = None
        self.recent = recent if recent is not None else MinRoundTrip()

    def add(self, seconds: float) -> None:
        self._average = average_round_trip_time(self._average, seconds)
        self.recent.add(seconds)

    def reset(self) -> None:
        """Forget every sample: the server became unavailable."""
        self._average = None
        self.recent.reset()

    @property
    def average(self) -> float | None:
        """The moving average; None before the first sample."""
        return self._average

    @property
    def minimum(self) -> float:
        """The least of the last ten samples; 0 until there are two."""
        return self.recent.value


class RttMonitor:
    """The Server Monitoring spec's RTT monitor: while the server monitor
    streams, a hello every heartbeatFrequencyMS on a connection of its own,
    each round trip added to ``round_trips``. The connection opens when it
    starts; its handshake is no sample (it includes TCP's and TLS's setup),
    so in the first heartbeatFrequencyMS the monitor's own handshake is the
    only one, as the CSOT spec's tests expect. An error closes the
    connection; the next round opens another. Its sleeps never keep
    ``Hub.join()`` waiting."""

    def __init__(self, address: Address, make_checker: Callable[[], Checker],
                 round_trips: RoundTrips, frequency: float) -> None:
        self._address = address
        self._make_checker = make_checker
        self._round_trips = round_trips
        self._frequency = frequency
        self._checker: Checker | None = None
        self._alarm = Alarm()
        self._greenlet: gevent.Greenlet | None = None
        self._stopped = False
        self._pid = os.getpid()

    def start(self) -> None:
        """Start measuring (once: later calls change nothing)."""
        if self._greenlet is None and not self._stopped:
            self._greenlet = spawn_background(self._run)

    def stop(self) -> None:
        self._stopped = True
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None and greenlet is not gevent.getcurrent():
            greenlet.kill(block=False)
        self._drop_checker()

    def forget_parent_connection(self) -> None:
        """In a forked child: drop the parent's connection without I/O on it."""
        self._pid = os.getpid()
        self._drop_checker()

    def _run(self) -> None:
        while not self._stopped:
            self._measure()
            self._alarm.sleep(self._frequency)

    def _measure(self) -> None:
        if self._pid != os.getpid():
            self.forget_parent_connection()  # forked without Python's at-fork hooks
        checker = self._checker
        opening = checker is None
        try:
            if checker is None:
                checker = self._checker = self._make_checker()
            _, seconds = checker.check()
        except Exception as error:
            # Not the server's state: the monitor finds that out itself.
            _LOG.debug("greenpool: RTT check of %s failed: %r",
                       format_address(self._address), error)
            self._drop_checker()
            return
        if checker is self._checker and not opening:  # not stopped or forked meanwhile
            self._round_trips.add(seconds)

    def _drop_checker(self) -> None:
        checker, self._checker = self._checker, None
        if checker is not None:
            with contextlib.suppress(Exception):
                checker.close()
