"""DNS lookups: the SRV and TXT records a ``mongodb+srv://`` connection string names.

What lives here: every DNS query greenpool makes itself, through dnspython's
resolver (so the system's resolver configuration, or a ``dns.resolver.default_resolver``
the program set, applies), each bounded by a time limit and, when given, a
deadline, each failure a :class:`~greenpool.ConfigurationError` naming the name
looked up.

Cooperative without monkey-patching: dnspython's resolver waits on blocking
sockets, so each query runs in gevent's threadpool
(:func:`~greenpool.wire.offload.offload`; the hub's threadpool, where gevent's
own resolver runs ``getaddrinfo``) while the calling greenlet waits for it, at
most the time limit; other greenlets run meanwhile. The same path runs under
monkey-patching, so patched programs behave the same. A query whose caller
gave up (its time ran out, or it was killed) finishes in its thread within the
same limit, its answer dropped. The query calls ``dns.resolver.resolve`` in that
thread, so a test that replaces that function still answers it.

What must not: what the records mean (the seedlist rules, which TXT options are
allowed) is the connection string's business (:mod:`greenpool.client.config.uri`);
host-name resolution for connecting is the socket's (:mod:`greenpool.wire.sockets`).
"""

from __future__ import annotations

import time
from typing import Any

import dns.exception
import dns.resolver
import gevent

from greenpool.errors import ConfigurationError
from greenpool.wire.offload import offload

__all__ = ["srv_lookup", "srv_records", "txt_records"]


def srv_records(
    name: str, *, timeout: float | None, deadline: float | None = None
) -> list[tuple[str, int]]:
    """The (target, port) of each SRV record of ``name``, targets without the final dot.

    The lookup takes at most ``timeout`` seconds (None: dnspython's own
    limit), and ends by ``deadline`` (a :func:`time.monotonic` time) when one
    is given. Raises :class:`~greenpool.ConfigurationError` when there are
    none, when the name does not exist, or when the lookup fails or runs out
    of time.
    """
    return srv_lookup(name, timeout=timeout, deadline=deadline)[0]


def srv_lookup(
    name: str, *, timeout: float | None, deadline: float | None = None
) -> tuple[list[tuple[str, int]], int]:
    """:func:`srv_records`, and how long the answer may be kept: the records'
    time to live in seconds (the lowest, when they differ)."""
    records, ttl = _resolve(name, "SRV", timeout, deadline, missing_ok=False)
    return [(record.target.to_text(omit_final_dot=True), int(record.port))
            for record in records], ttl


def txt_records(name: str, *, timeout: float | None, deadline: float | None = None) -> list[str]:
    """The text of each TXT record of ``name`` (its strings joined); none when
    the name has no TXT record or does not exist. ``timeout`` and ``deadline``
    bound the lookup as for :func:`srv_records`; a failed or timed-out lookup
    raises :class:`~greenpool.ConfigurationError`."""
    records, _ = _resolve(name, "TXT", timeout, deadline, missing_ok=True)
    return [b"".join(record.strings).decode("utf-8", "replace") for record in records]


def _resolve(
    name: str, rdtype: str, timeout: float | None, deadline: float | None, *, missing_ok: bool
) -> tuple[list[Any], int]:
    """The records of ``rdtype`` for ``name``, and their time to live."""
    limit, by_deadline = _limit(timeout, deadline)
    try:
        return _in_threadpool(name, rdtype, limit)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        if missing_ok:
            return [], 0
        raise ConfigurationError(f"no {rdtype} records for {name!r}: the DNS name "
                                 "does not exist or has none") from None
    except (dns.exception.Timeout, _OutOfTime):
        after = f" after {max(limit, 0):g} s" if limit is not None else ""
        cause = " (the time left before its deadline)" if by_deadline else ""
        raise ConfigurationError(
            f"the DNS lookup of the {rdtype} records of {name!r} timed out{after}{cause}"
        ) from None
    except dns.exception.DNSException as error:
        raise ConfigurationError(
            f"the DNS lookup of the {rdtype} records of {name!r} failed: "
            f"{type(error).__name__}") from None


def _limit(timeout: float | None, deadline: float | None) -> tuple[float | None, bool]:
    """The lookup's time limit in seconds (None: dnspython's own), and whether
    the deadline set it."""
    if deadline is None:
        return timeout, False
    left = deadline - time.monotonic()
    if timeout is None or left < timeout:
        return left, True
    return timeout, False


def _in_threadpool(name: str, rdtype: str, limit: float | None) -> tuple[list[Any], int]:
    """``dns.resolver.resolve`` in the hub's threadpool, waited for at most
    ``limit`` seconds (the wait for a free thread included)."""
    if limit is not None and limit <= 0:
        raise _OutOfTime
    timer = gevent.Timeout(limit)
    try:
        with timer:
            return offload(_query, name, rdtype, limit)
    except gevent.Timeout as expired:
        if expired is not timer:
            raise  # an enclosing timeout's, not ours
        raise _OutOfTime from None


class _OutOfTime(Exception):
    """The caller's time limit ran out before dnspython's did."""


def _query(name: str, rdtype: str, lifetime: float | None) -> tuple[list[Any], int]:
    # Looked up at call time, in the worker thread: a test's stand-in answers too.
    answer = dns.resolver.resolve(name, rdtype, lifetime=lifetime)
    return list(answer), int(answer.rrset.ttl) if answer.rrset is not None else 0
