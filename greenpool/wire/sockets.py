"""Opening a socket to a server: TCP, Unix domain, and TLS over either.

What lives here: :func:`open_socket`, which resolves a host and tries each
address in turn, sets TCP_NODELAY and capped keepalive, starts TLS with any
:class:`ssl.SSLContext` cooperatively, and turns the failures into PyMongo's
``AutoReconnect`` or ``NetworkTimeout`` naming the address; and
:class:`EstablishmentTimedOut`, the error of a whole establishment's deadline,
which stops the search through the resolved addresses.

Cooperative without monkey-patching: every call goes through
:mod:`gevent.socket` and :mod:`gevent.ssl`, never the standard library's
modules.

What must not: anything MongoDB. No message is sent here; the handshake,
commands and what a connected socket carries are :mod:`greenpool.wire.link`'s
and :mod:`greenpool.wire.connector`'s. It imports nothing of greenpool but
:mod:`greenpool.errors` and :mod:`greenpool.address`.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

import gevent
from gevent import socket as gsocket
from gevent import ssl as gssl
from gevent.monkey import get_original
from pymongo.errors import AutoReconnect, NetworkTimeout

from greenpool.address import Address, format_address
from greenpool.errors import ConfigurationError

__all__ = ["STDLIB_SSL_CONTEXT", "EstablishmentTimedOut", "open_socket"]

#: The standard library's context class, even under monkey-patching (which
#: replaces ssl.SSLContext with gevent's subclass): both kinds are accepted.
STDLIB_SSL_CONTEXT: type[ssl.SSLContext] = get_original("ssl", "SSLContext")

# TCP keepalive caps, in seconds. Operating systems default to two hours of
# idle time before the first probe, while firewalls and cloud load balancers
# drop flows that have been silent for a few minutes: a pool's idle
# connections would die unnoticed. Lower values already set are kept.
_KEEPALIVE_CAPS = (("TCP_KEEPIDLE", 120), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 9))


class EstablishmentTimedOut(TimeoutError):
    """The whole establishment (connect, TLS, hello, authentication) ran past its deadline."""


def open_socket(
    address: Address,
    connect_timeout: float | None,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str | None,
) -> Any:
    """A connected socket to ``address``: TCP, then TLS if ``ssl_context``
    (``server_hostname`` for SNI and the certificate, by default the host);
    or a Unix socket for ``(path, None)``. ``connect_timeout`` bounds name
    resolution, each connection attempt and the TLS handshake.

    Raises :class:`pymongo.errors.AutoReconnect` or
    :class:`pymongo.errors.NetworkTimeout` naming the address.
    """
    try:
        return _open(address, connect_timeout, ssl_context, server_hostname)
    except OSError as exc:
        raise _establishment_error(address, exc, connect_timeout) from exc


def _open(
    address: Address,
    connect_timeout: float | None,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str | None,
) -> Any:
    host, port = address
    if port is None:
        sock = _open_unix(host, connect_timeout)
    else:
        sock = _open_tcp(host, port, connect_timeout)
    if ssl_context is None:
        sock.settimeout(None)
        return sock
    hostname = server_hostname or (host if port is not None else None)
    if hostname is None and ssl_context.check_hostname:
        sock.close()
        raise ConfigurationError(
            f"TLS to the Unix socket {host!r} checks the certificate's hostname: "
            "set server_hostname, or use a context whose check_hostname is False"
        )
    return _start_tls(sock, ssl_context, hostname, connect_timeout)


def _open_unix(path: str, timeout: float | None) -> Any:
    sock = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def _open_tcp(host: str, port: int, timeout: float | None) -> Any:
    """Connect to the first address ``host`` resolves to that accepts."""
    with gevent.Timeout(timeout, TimeoutError(f"resolving {host!r} timed out")):
        candidates = gsocket.getaddrinfo(host, port, gsocket.AF_UNSPEC, gsocket.SOCK_STREAM)
    last_error: OSError | None = None
    for family, kind, proto, _, sockaddr in candidates:
        try:
            return _connect_tcp(family, kind, proto, sockaddr, timeout)
        except EstablishmentTimedOut:
            raise  # the whole establishment's time is up: no other address
        except OSError as exc:
            last_error = exc
    raise last_error or OSError(f"{host!r} resolved to no address")


def _connect_tcp(family: int, kind: int, proto: int, sockaddr: Any, timeout: float | None) -> Any:
    sock = gsocket.socket(family, kind, proto)
    try:
        sock.settimeout(timeout)
        # Requests are small and each waits for its reply: Nagle's algorithm
        # would only delay them.
        sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, 1)
        _set_keepalive(sock)
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


def _set_keepalive(sock: Any) -> None:
    sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_KEEPALIVE, 1)
    for name, cap in _KEEPALIVE_CAPS:
        option = getattr(gsocket, name, None)
        if option is None:
            continue  # not on this platform
        # Some platforms define the constant but refuse to read or set it.
        with contextlib.suppress(OSError):
            if sock.getsockopt(gsocket.IPPROTO_TCP, option) > cap:
                sock.setsockopt(gsocket.IPPROTO_TCP, option, cap)


def _start_tls(
    sock: Any, context: ssl.SSLContext, hostname: str | None, timeout: float | None
) -> Any:
    """TLS over ``sock`` with ``context``, cooperatively.

    gevent's SSLSocket drives any ``ssl.SSLContext`` (a gevent one's
    ``wrap_socket`` builds exactly this), so a standard library context,
    made before or without monkey-patching, still does its I/O through gevent.
    """
    try:
        tls = gssl.SSLSocket(
            sock=sock, server_hostname=hostname, do_handshake_on_connect=False, _context=context
        )
    except BaseException:
        sock.close()  # on failure gevent leaves the socket with us
        raise
    try:
        tls.settimeout(timeout)
        tls.do_handshake()
        tls.settimeout(None)
    except BaseException:
        tls.close()
        raise
    return tls


def _establishment_error(address: Address, exc: OSError, timeout: float | None) -> Exception:
    where = format_address(address)
    if isinstance(exc, EstablishmentTimedOut):
        return NetworkTimeout(f"{where}: {exc}")
    if isinstance(exc, TimeoutError):
        limit = "no limit" if timeout is None else f"connectTimeoutMS: {timeout * 1000:g}"
        return NetworkTimeout(f"{where}: {exc} ({limit})")
    if isinstance(exc, ssl.SSLError):
        return AutoReconnect(f"{where}: TLS handshake failed: {exc}")
    return AutoReconnect(f"{where}: {exc}")
