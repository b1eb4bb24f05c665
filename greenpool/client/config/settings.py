"""What a connection string configures, as typed settings.

What lives here: :class:`ClientSettings` (hosts, pool, credentials, TLS,
timeouts, read preference, and the options greenpool does not use, kept in
``extra``), :class:`Credentials`, and :class:`Secret`, the string that never
shows itself; with the two things settings make: a read preference and a TLS
context.

What must not: reading a connection string (:mod:`greenpool.client.config.uri`
builds these settings, and validates them), loading TLS files
(:mod:`greenpool.client.config.tlscontext`), and anything that connects.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from pymongo.read_preferences import _ServerMode

from greenpool.address import Address
from greenpool.client.config import readpref
from greenpool.client.config.srvhosts import SrvHostRule
from greenpool.client.config.tlscontext import tls_context
from greenpool.pool.options import PoolOptions

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_MAX_ADAPTIVE_RETRIES", "ClientSettings",
           "Credentials", "Secret"]

#: connectTimeoutMS when the connection string gives none (the URI spec's 20 s).
DEFAULT_CONNECT_TIMEOUT: Final = 20.0
#: maxAdaptiveRetries when the connection string gives none (the Client Backpressure
#: spec's MAX_RETRIES).
DEFAULT_MAX_ADAPTIVE_RETRIES: Final = 2


class Secret:
    """A secret string (a password, a key's passphrase) that never shows itself.

    ``repr()`` and ``str()`` give ``***``; :meth:`reveal` gives the value to
    the code that needs it (authentication, loading a key).

    >>> Secret("hunter2")
    Secret('***')
    >>> Secret("hunter2").reveal()
    'hunter2'
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        # No timing hint about how much of a secret matched.
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))


@dataclass(frozen=True)
class Credentials:
    """Whom to authenticate as.

    >>> Credentials("ann", Secret("pw"), mechanism="SCRAM-SHA-256")
    Credentials(username='ann', password=Secret('***'), source='admin', \
mechanism='SCRAM-SHA-256', mechanism_properties=mappingproxy({}))
    """

    #: None for mechanisms that need no user name (MONGODB-X509, MONGODB-AWS).
    username: str | None
    #: None when the connection string gives none (an empty one counts as none).
    password: Secret | None = None
    #: authSource: as given, else the URI's database, else "admin" ("$external"
    #: for the mechanisms whose users live outside MongoDB, and for PLAIN).
    source: str = "admin"
    #: authMechanism; None means negotiate (SCRAM-SHA-256 or SCRAM-SHA-1).
    mechanism: str | None = None
    #: authMechanismProperties; secret values (AWS_SESSION_TOKEN) are Secrets.
    mechanism_properties: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class ClientSettings:
    """What a connection string configures: hosts, pool, connections, client.

    Durations are in seconds, None meaning no limit. Build one with
    :func:`greenpool.client.config.uri.parse_uri`, which validates; the constructor
    does not.

    ``extra`` holds the options greenpool validates but does not use (``w``,
    ``journal``, ``readConcernLevel``, ``uuidRepresentation``...), keyed by
    lower-case option name since option names are case-insensitive: booleans
    as ``bool``, counts and milliseconds as numbers, the rest as strings. It
    is there so nothing in a connection string is silently lost.
    """

    hosts: tuple[Address, ...]
    #: maxPoolSize, minPoolSize, maxIdleTimeMS, maxConnecting,
    #: waitQueueTimeoutMS and loadBalanced.
    pool: PoolOptions = field(default_factory=PoolOptions)
    credentials: Credentials | None = None
    #: The database in the URI's path (the default for authSource).
    database: str | None = None
    app_name: str | None = None
    #: Compressors to offer, in order of preference (unknown names are left out).
    compressors: tuple[str, ...] = ()
    zlib_compression_level: int = -1
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT
    socket_timeout: float | None = None
    #: timeoutMS (CSOT) in seconds: None when not given, 0 for no limit.
    timeout: float | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_certificate_key_file: str | None = None
    tls_certificate_key_file_password: Secret | None = None
    tls_crl_file: str | None = None
    #: Also true under tlsInsecure=true.
    tls_allow_invalid_certificates: bool = False
    #: Also true under tlsInsecure=true.
    tls_allow_invalid_hostnames: bool = False
    tls_insecure: bool = False
    heartbeat_frequency: float = 10.0
    #: serverMonitoringMode: "auto" (the default), "stream" or "poll".
    server_monitoring_mode: str = "auto"
    server_selection_timeout: float = 30.0
    #: localThresholdMS: the latency window of server selection.
    local_threshold: float = 0.015
    direct_connection: bool = False
    replica_set: str | None = None
    #: The host of a mongodb+srv:// URI, whose SRV records gave ``hosts``.
    srv_host: str | None = None
    #: Which hosts the SRV records of ``srv_host`` may name (None: no SRV host).
    srv_host_rule: SrvHostRule | None = None
    srv_max_hosts: int = 0
    srv_service_name: str = "mongodb"
    retry_reads: bool = True
    retry_writes: bool = True
    #: maxAdaptiveRetries: the most retries of an operation the server said is
    #: overloaded (Client Backpressure).
    max_adaptive_retries: int = 2
    #: The readPreference mode, in the spec's camel case.
    read_preference: str = "primary"
    #: readPreferenceTags: the tag sets, in order (none means any server).
    read_preference_tags: tuple[Mapping[str, str], ...] = ()
    #: maxStalenessSeconds; -1 means no maximum.
    max_staleness_seconds: int = -1
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def load_balanced(self) -> bool:
        """loadBalanced, which lives in :attr:`pool` (the pool needs it too)."""
        return self.pool.load_balanced

    def read_preference_object(self) -> _ServerMode:
        """readPreference, readPreferenceTags and maxStalenessSeconds as one
        PyMongo read preference (what :meth:`greenpool.Client.find` uses by default).

        >>> ClientSettings(hosts=(("h", 27017),), read_preference="nearest",
        ...                read_preference_tags=({"dc": "ny"},)).read_preference_object().document
        {'mode': 'nearest', 'tags': [{'dc': 'ny'}]}
        """
        return readpref.make(self.read_preference,
                             [dict(t) for t in self.read_preference_tags] or None,
                             self.max_staleness_seconds)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A TLS context for this client's connections; None when TLS is off.

        It verifies the server's certificate (against ``tls_ca_file``, or the
        system's CAs) and its host name, unless tlsAllowInvalidHostnames or
        tlsAllowInvalidCertificates (or tlsInsecure) say otherwise; it presents
        ``tls_certificate_key_file`` (certificate and key in one PEM file) when
        given. A missing, unreadable or bad file raises
        :class:`~greenpool.ConfigurationError` naming the option and the path.

        >>> ClientSettings(hosts=(("h", 27017),), tls=True).ssl_context().check_hostname
        True
        """
        if not self.tls:
            return None
        password = self.tls_certificate_key_file_password
        return tls_context(
            ca_file=self.tls_ca_file,
            crl_file=self.tls_crl_file,
            certificate_key_file=self.tls_certificate_key_file,
            certificate_key_file_password=password.reveal() if password is not None else None,
            allow_invalid_hostnames=self.tls_allow_invalid_hostnames,
            allow_invalid_certificates=self.tls_allow_invalid_certificates,
        )
