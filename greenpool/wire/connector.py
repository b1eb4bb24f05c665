"""Establishing a link: connect, handshake and authenticate within one deadline.

What lives here: :func:`connect`, which takes a :class:`~greenpool.wire.link.Link`
through its steps (:meth:`~greenpool.wire.link.Link.open`,
:meth:`~greenpool.wire.link.Link.handshake`,
:meth:`~greenpool.wire.link.Link.authenticate`) under one timer;
:func:`make_connector`, the pool connector that does so for each pending
connection; :func:`establishment_deadline`, the time that timer ends; and
:func:`handshake_completed`, which tells SDAM whether an establishment error
came after the hello (the Load Balancer spec's rule); and
:func:`mark_establishment_error`, what every establishment error carries: that
attribute, and the Client Backpressure labels on a network error of the hello
(a server shedding load drops new connections there: such an error clears no
pool and marks no server Unknown)::

    from greenpool import Pool
    from greenpool.wire.connector import make_connector
    from greenpool.wire.link import LinkOptions

    pool = Pool(("db.example.com", 27017), connector=make_connector(LinkOptions()))

What must not: the link's own round trips and the socket opening (those are
:mod:`greenpool.wire.link` and :mod:`greenpool.wire.sockets`); anything of the
client layer. Every exception :func:`connect` raises (not kills) carries the
attribute :data:`HANDSHAKE_COMPLETED`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent
from pymongo.errors import ConnectionFailure, NetworkTimeout, PyMongoError

from greenpool.address import Address, format_address, parse_address
from greenpool.errors import PoolClearedError, ProtocolError
from greenpool.pool.connection import Connection
from greenpool.wire.link import Link, LinkOptions
from greenpool.wire.sockets import EstablishmentTimedOut

__all__ = [
    "HANDSHAKE_COMPLETED",
    "OVERLOAD_LABELS",
    "connect",
    "establishment_deadline",
    "handshake_completed",
    "is_overloaded",
    "make_connector",
    "mark_establishment_error",
]

#: The attribute :func:`connect` sets on every exception it raises (not on kills).
HANDSHAKE_COMPLETED = "handshake_completed"
#: The labels of an error that may mean the server sheds load (Client Backpressure).
OVERLOAD_LABELS = ("SystemOverloadedError", "RetryableError")


def mark_establishment_error(error: Exception, *, completed: bool, in_hello: bool) -> None:
    """Record on ``error``, raised while establishing a link, whether the
    handshake had completed (:func:`handshake_completed`), and label a
    network error or timeout of the hello itself ``SystemOverloadedError``
    and ``RetryableError`` (CMAP's connection establishment, for the Client
    Backpressure spec). Not a refused hello, nor a reply that is not
    MongoDB's or breaks the protocol: those are the server's answer."""
    setattr(error, HANDSHAKE_COMPLETED, completed)
    if (in_hello and isinstance(error, ConnectionFailure)
            and not isinstance(error, PoolClearedError)
            and not isinstance(error.__cause__, ProtocolError)):
        for label in OVERLOAD_LABELS:
            if not error.has_error_label(label):
                error._add_error_label(label)


def is_overloaded(error: BaseException) -> bool:
    """Whether ``error`` says the server sheds load (the SystemOverloadedError label)."""
    return isinstance(error, PyMongoError) and error.has_error_label(OVERLOAD_LABELS[0])


def handshake_completed(error: BaseException) -> bool:
    """Whether an error from :func:`connect` (or a connector from
    :func:`make_connector`) came after the handshake completed.

    False for errors while resolving, connecting, in TLS, or in the hello
    itself (including a refused hello, an incompatible server, a missing
    ``serviceId``): the Load Balancer spec forbids SDAM error handling for
    those. True for errors after the hello reply was accepted (authentication):
    in load-balanced mode they clear only the connection's service
    (``conn.service_id`` is already set). False for any error that did not
    come from establishing a link.
    """
    return getattr(error, HANDSHAKE_COMPLETED, False) is True


def establishment_deadline(options: LinkOptions, deadline: float | None = None) -> float | None:
    """The :func:`time.monotonic` time by which a new link must be
    established (connected, through TLS, the hello and authentication), or
    None for no limit.

    ``deadline``, when given, wins: it is how an operation's own time limit
    (timeoutMS) bounds the connection it waits for. Otherwise it is
    ``options.connect_timeout`` (connectTimeoutMS) from now, so a server that
    accepts TCP and then never answers cannot hang a checkout, whatever
    socketTimeoutMS says.
    """
    if deadline is not None:
        return deadline
    if options.connect_timeout is None:
        return None
    return time.monotonic() + options.connect_timeout


def connect(
    address: Address | str,
    options: LinkOptions,
    *,
    connection: Connection[Any] | None = None,
    deadline: float | None = None,
    round_trip: float | None = None,
) -> Link:
    """Open a link, run the handshake and authenticate: an established link.

    The whole establishment is bounded by :func:`establishment_deadline`
    (connectTimeoutMS, or ``deadline``, a :func:`time.monotonic` time, when
    given); past it, :class:`pymongo.errors.NetworkTimeout` naming the
    address. Each step keeps its own limit too (connectTimeoutMS for
    connecting and TLS, socketTimeoutMS for each round trip, or
    ``round_trip`` seconds when given: an operation's timeoutMS replaces
    socketTimeoutMS, as the CSOT spec says).

    With ``connection`` (a pending pool connection) in load-balanced mode,
    the connection takes its serviceId and that service's generation from the
    hello reply before authentication, so an authentication failure is
    attributed to its service and judged by that generation.

    On any failure the socket is closed. Every exception raised (not kills)
    carries the attribute ``handshake_completed`` (read it with
    :func:`handshake_completed`).
    """
    completed = in_hello = False
    link: Link | None = None
    given = deadline is not None
    deadline = establishment_deadline(options, deadline)
    limit = None if deadline is None else deadline - time.monotonic()
    if given or options.connect_timeout is None:
        bound = "the operation's deadline"
    else:
        bound = f"connectTimeoutMS: {options.connect_timeout * 1000:g}"
    timed_out = EstablishmentTimedOut(f"connection establishment timed out ({bound})")
    try:
        if limit is not None and limit <= 0:
            raise timed_out
        # One timer for every step, whichever yields (DNS, TCP, TLS, the
        # hello, authentication, key derivation in the threadpool).
        with gevent.Timeout(limit, timed_out):
            link = Link.open(address, options, connection=connection)
            in_hello = True
            link.handshake(timeout=round_trip)
            completed, in_hello = True, False
            if connection is not None and options.load_balanced:
                connection.handshake_done(link.service_id)
            link.authenticate(timeout=round_trip)
    except Exception as error:
        if link is not None:
            link.close()
        if error is timed_out:
            # Between steps, where no link turned it into a network error.
            error = NetworkTimeout(f"{format_address(parse_address(address))}: {timed_out}")
            mark_establishment_error(error, completed=completed, in_hello=in_hello)
            raise error from timed_out
        mark_establishment_error(error, completed=completed, in_hello=in_hello)
        raise
    except BaseException:
        if link is not None:
            link.close()
        raise
    return link


def make_connector(options: LinkOptions) -> Callable[[Connection[Link]], Link]:
    """A pool connector that establishes a :class:`Link` for each pending connection.

    >>> pool = Pool(address, connector=make_connector(LinkOptions()))  # doctest: +SKIP

    Errors are :func:`connect`'s; the pool closes the connection and passes
    the error to its ``on_establish_error`` handler, where
    :func:`handshake_completed` tells SDAM what to do.
    """

    def connector(conn: Connection[Link]) -> Link:
        return connect(conn.address, options, connection=conn)

    return connector
