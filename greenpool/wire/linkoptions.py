"""How to open, handshake and authenticate a link: :class:`LinkOptions`.

What lives here: the options and their checks, which name the bad value.
What must not: the link itself (:mod:`greenpool.wire.link`, which re-exports
this class). It stays a module of its own, and pure Python in the compiled
build (greenpool/_compiled.py), so that a wrongly typed option gets
greenpool's message rather than the compiled code's type error.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from greenpool.errors import ConfigurationError
from greenpool.wire.auth import Credentials
from greenpool.wire.compression import Compressor, usable_compressors
from greenpool.wire.handshake import check_app_name
from greenpool.wire.sockets import STDLIB_SSL_CONTEXT

__all__ = ["LinkOptions", "check_timeout"]


def check_timeout(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{name} must be None (no timeout) or seconds > 0, not {value!r}")


@dataclass(frozen=True)
class LinkOptions:
    """How to open, handshake and authenticate a :class:`Link`.

    Timeouts are in seconds; None means no timeout.

    ``connect_timeout`` (connectTimeoutMS) bounds name resolution, each TCP
    connection attempt (one per resolved address) and the TLS handshake.
    ``socket_timeout`` (socketTimeoutMS) bounds each round trip, the
    handshake's and authentication's included.

    ``ssl_context`` enables TLS; a :mod:`gevent.ssl` or a standard library
    context. Certificate and hostname verification are the context's:
    ``tlsAllowInvalidCertificates`` is a context with ``verify_mode`` CERT_NONE,
    ``tlsAllowInvalidHostnames`` one with ``check_hostname`` False.
    ``server_hostname`` is the name sent for SNI and checked against the
    certificate; by default the address's host (nothing for a Unix socket).

    ``compressors`` are offered in order of preference; unknown ones and those
    whose package is missing are dropped here, with a warning.
    ``zlib_compression_level`` is -1 (zlib's default) to 9.

    ``credentials`` authenticate every link (SCRAM-SHA-256 or SCRAM-SHA-1).
    ``load_balanced`` is the Load Balancer spec's mode: the handshake goes over
    OP_MSG with ``loadBalanced: true`` and the server must answer with a
    ``serviceId``.

    ``driver`` is a wrapping library's ``(name, version, platform)`` (PyMongo's
    :class:`~pymongo.driver_info.DriverInfo` is one), added to the
    handshake's metadata after greenpool's. ``server_api`` holds the Stable
    API's fields (``(("apiVersion", "1"), ("apiStrict", True))``; empty: no
    API version declared): the handshake then goes over OP_MSG as ``hello``
    with them, as the Versioned API spec says.

    The repr never shows the password (:class:`~greenpool.wire.auth.Credentials`
    hides it).
    """

    connect_timeout: float | None = 20.0
    socket_timeout: float | None = None
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    app_name: str | None = None
    compressors: tuple[str, ...] = ()
    zlib_compression_level: int = -1
    credentials: Credentials | None = None
    load_balanced: bool = False
    driver: tuple[str | None, str | None, str | None] | None = None
    server_api: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        check_timeout("connect_timeout", self.connect_timeout)
        check_timeout("socket_timeout", self.socket_timeout)
        if self.ssl_context is not None and not isinstance(self.ssl_context, STDLIB_SSL_CONTEXT):
            raise ConfigurationError(
                f"ssl_context must be an ssl.SSLContext, not {type(self.ssl_context).__name__}"
            )
        if self.server_hostname is not None and not isinstance(self.server_hostname, str):
            raise ConfigurationError(f"server_hostname must be a str, not {self.server_hostname!r}")
        check_app_name(self.app_name)
        compressors: object = self.compressors  # a str is a common mistake
        if isinstance(compressors, str):
            raise ConfigurationError("compressors must be a sequence of names, not one string")
        object.__setattr__(self, "compressors", tuple(usable_compressors(self.compressors)))
        Compressor("zlib", self.zlib_compression_level)  # checks the level
        if self.credentials is not None and not isinstance(self.credentials, Credentials):
            raise ConfigurationError(
                f"credentials must be greenpool.wire.auth.Credentials, "
                f"not {type(self.credentials).__name__}"
            )
        if not isinstance(self.load_balanced, bool):
            raise ConfigurationError(f"load_balanced must be a bool, not {self.load_balanced!r}")
