"""SRV polling: a mongodb+srv:// name's servers, looked up again and again.

Rules of this module: when to look the SRV records up again, which of the hosts
they name to keep, add or drop (Polling SRV Records for mongos Discovery), and
reporting a changed host list to the owner through one callback; the lookups are
:mod:`greenpool.client.config.dns`'s (in gevent's threadpool, off the hub), the domain rule
is :mod:`greenpool.client.config.uri`'s. What the topology does with the new hosts, and
when polling applies (a Sharded or Unknown topology reached through a mongodb+srv://
name, never a load-balanced one: the owner starts and stops the poller) are the
topology's business.

A rescan looks up ``_{srvServiceName}._tcp.{host}``:

* records that point outside the host's domain are dropped (and logged), as is a
  record for a host already seen;
* when no record is left, or the lookup fails, nothing changes: the hosts stay,
  the failure is logged, and the next rescan comes after heartbeatFrequencyMS;
* otherwise the hosts the records no longer name go, the ones they still name stay
  untouched, and new ones join: all of them, or with srvMaxHosts as many as fit,
  chosen at random; the owner hears of the new list only when it differs. The next
  rescan comes after the records' time to live, but never sooner than 60 seconds
  (:data:`MIN_RESCAN_INTERVAL`; tests give a smaller ``min_interval``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Sequence
from typing import Final

import gevent

from greenpool.address import Address, format_address
from greenpool.client.config import dns
from greenpool.client.config.settings import ClientSettings
from greenpool.client.config.srvhosts import SrvHostRefused, SrvHostRule
from greenpool.errors import ConfigurationError
from greenpool.pool.waitqueue import Alarm, spawn_background

__all__ = ["MIN_RESCAN_INTERVAL", "SrvPoller", "rescan_interval", "rescanned_hosts"]

_LOG = logging.getLogger("greenpool")
#: The shortest time between two rescans that succeeded, whatever the records' TTL.
MIN_RESCAN_INTERVAL: Final = 60.0


class SrvPoller:
    """One greenlet that rescans the SRV records of ``host`` and reports a
    changed host list through ``on_hosts``.

    :param host: the mongodb+srv:// connection string's host.
    :param service_name: srvServiceName.
    :param srv_max_hosts: srvMaxHosts (0: no limit).
    :param heartbeat_frequency: heartbeatFrequencyMS, in seconds: how soon to
        try again after a rescan that found nothing.
    :param current_hosts: the topology's hosts now, which a rescan starts from.
    :param on_hosts: called (in the poller's greenlet) with the new host list,
        whenever a rescan changes it.
    :param timeout: each lookup's time limit in seconds (None: dnspython's own).
    :param min_interval: the shortest time between two rescans that succeeded.
    :param rng: the source of srvMaxHosts' random choice.

    Call :meth:`start` once the initial seedlist is in use (the first rescan
    comes ``min_interval`` later, a minute by default, as the initial lookup's
    time to live is not kept) and :meth:`stop` when polling no longer applies. Its sleeps never
    keep ``Hub.join()`` waiting; a lookup in flight ends within ``timeout``.

    >>> poller = SrvPoller("cluster0.example.com", heartbeat_frequency=10.0,
    ...                    current_hosts=lambda: [], on_hosts=print)
    >>> poller.name
    '_mongodb._tcp.cluster0.example.com'
    """

    def __init__(self, host: str, *, service_name: str = "mongodb", srv_max_hosts: int = 0,
                 rule: SrvHostRule | None = None,
                 heartbeat_frequency: float,
                 current_hosts: Callable[[], Collection[Address]],
                 on_hosts: Callable[[list[Address]], None],
                 timeout: float | None = None,
                 min_interval: float = MIN_RESCAN_INTERVAL,
                 rng: random.Random | None = None) -> None:
        self.host = host
        self.name = f"_{service_name}._tcp.{host}"
        self._rule = rule if rule is not None else SrvHostRule(host)
        self._srv_max_hosts = srv_max_hosts
        self._heartbeat_frequency = heartbeat_frequency
        self._current_hosts = current_hosts
        self._on_hosts = on_hosts
        self._timeout = timeout
        self._min_interval = min_interval
        self._rng = rng
        #: Seconds until the next rescan, as the last one decided (the first
        #: comes min_interval after the start).
        self.interval = min_interval
        self._alarm = Alarm()
        self._greenlet: gevent.Greenlet | None = None
        self._failing = False
        self._refused: set[Address] = set()

    @classmethod
    def for_settings(cls, settings: ClientSettings, *,
                     current_hosts: Callable[[], Collection[Address]],
                     on_hosts: Callable[[list[Address]], None],
                     min_interval: float = MIN_RESCAN_INTERVAL) -> SrvPoller:
        """The poller of a mongodb+srv:// connection string's settings: its
        host, srvServiceName, srvMaxHosts and heartbeatFrequencyMS, with
        connectTimeoutMS as each lookup's time limit (as for the initial one).

        :raises ValueError: the settings come from a mongodb:// connection string.
        """
        if settings.srv_host is None:
            raise ValueError("SRV polling needs the settings of a mongodb+srv:// "
                             "connection string")
        return cls(settings.srv_host, service_name=settings.srv_service_name,
                   srv_max_hosts=settings.srv_max_hosts, rule=settings.srv_host_rule,
                   heartbeat_frequency=settings.heartbeat_frequency,
                   current_hosts=current_hosts, on_hosts=on_hosts,
                   timeout=settings.connect_timeout, min_interval=min_interval)

    def start(self) -> None:
        """Start rescanning (idempotent)."""
        if self._greenlet is None:
            self._greenlet = spawn_background(self._run)

    def stop(self) -> None:
        """Stop rescanning; a lookup in flight is dropped. Idempotent, and
        callable from ``on_hosts`` itself."""
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None and greenlet is not gevent.getcurrent():
            greenlet.kill(block=False)

    @property
    def running(self) -> bool:
        """Started, and not stopped since."""
        return self._greenlet is not None

    def _run(self) -> None:
        while self._greenlet is gevent.getcurrent():
            self._alarm.sleep(self.interval)
            try:
                self.rescan()
            except Exception:
                # Not a failed lookup (that is reported as one): a bug, or the
                # owner's callback failing; polling goes on all the same.
                _LOG.exception("greenpool: the SRV poller of %s raised; it keeps polling",
                               self.host)
                self.interval = self._heartbeat_frequency

    def rescan(self) -> None:
        """One rescan now, in the calling greenlet; sets :attr:`interval`."""
        found = self._lookup()
        if not found:
            self.interval = self._heartbeat_frequency
            return
        records, ttl = found
        self.interval = rescan_interval(ttl, self._min_interval)
        current = list(self._current_hosts())
        hosts = rescanned_hosts(current, records, self._srv_max_hosts, rng=self._rng)
        if set(hosts) != set(current):
            self._on_hosts(hosts)

    def _lookup(self) -> tuple[list[Address], int] | None:
        """The hosts the records name in the host's domain, and their time to
        live; None when there are none, logged."""
        try:
            records, ttl = dns.srv_lookup(self.name, timeout=self._timeout)
        except ConfigurationError as error:
            self._failed(f"{error}")
            return None
        verified: list[Address] = []
        for target, port in records:
            address = (target.lower(), port)
            try:
                self._rule.check(target)
            except SrvHostRefused as refused:
                # A warning the first time, a detail at each rescan after that.
                level = logging.DEBUG if address in self._refused else logging.WARNING
                self._refused.add(address)
                _LOG.log(level, "greenpool: %s; that host (%s) is left out", refused,
                         format_address(address))
                continue
            if address not in verified:
                verified.append(address)
        if not verified:
            self._failed(f"none of the SRV records of {self.name!r} names a host its rule "
                         "lets in")
            return None
        if self._failing:
            _LOG.info("greenpool: the SRV records of %s are found again", self.name)
        self._failing = False
        return verified, ttl

    def _failed(self, reason: str) -> None:
        # The first failure of a run is a warning; its repeats (one each
        # heartbeat while DNS is down) are details.
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        _LOG.log(level, "greenpool: SRV polling keeps the hosts it has: %s", reason)


def rescan_interval(ttl: float, min_interval: float = MIN_RESCAN_INTERVAL) -> float:
    """Seconds until the next rescan after one that found hosts: the records'
    time to live, but no less than ``min_interval``.

    >>> rescan_interval(300), rescan_interval(5)
    (300, 60.0)
    """
    return max(ttl, min_interval)


def rescanned_hosts(current: Sequence[Address], found: Sequence[Address], srv_max_hosts: int,
                    *, rng: random.Random | None = None) -> list[Address]:
    """The hosts after a rescan that found ``found``: those of ``current`` it
    still names, in their order, then the new ones; with ``srv_max_hosts`` (0:
    no limit), only as many new ones as fit, chosen at random as the initial
    seedlist's are.

    >>> rescanned_hosts([("a", 1), ("b", 1)], [("b", 1), ("c", 1)], 0)
    [('b', 1), ('c', 1)]
    """
    kept = [host for host in current if host in found]
    new = [host for host in found if host not in current]
    if srv_max_hosts > 0:
        room = max(srv_max_hosts - len(kept), 0)
        if room < len(new):
            new = (rng or random).sample(new, room)
    return kept + new
