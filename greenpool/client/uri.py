"""Connection strings: ``mongodb://`` and ``mongodb+srv://`` URIs.

:func:`parse_uri` turns a connection string into :class:`ClientSettings`:

>>> settings = parse_uri("mongodb://app:s3cret@db.example.com/shop?maxPoolSize=20&appName=shop")
>>> settings.hosts, settings.pool.max_pool_size, settings.app_name
((('db.example.com', 27017),), 20, 'shop')
>>> settings.credentials.password
Secret('***')

PyMongo's URI parser does the parsing and the validation: case-insensitive
option names, percent-decoding, conflicting options (the Load Balancer spec's
URI validation among them) and, for ``mongodb+srv://``, the SRV and TXT
lookups through dnspython (:mod:`greenpool.client.uriparser` runs it). This
module turns its result into typed settings, keeps secrets out of every
``repr()``, ``str()`` and message, and makes PyMongo's complaints greenpool's:
errors are :class:`~greenpool.ConfigurationError`, and a warning about an
ignored value names the option and the value as written.

What lives here: the public face (:func:`parse_uri`, :func:`redact_uri`,
:func:`uri_secrets`, :class:`InvalidURIError`), the settings types
(:class:`ClientSettings`, :class:`Credentials`, :class:`Secret`), and turning
PyMongo's validated options into them. What must not: running PyMongo's
parser and its warnings (:mod:`greenpool.client.uriparser`), finding and
hiding secrets in the string as written (:mod:`greenpool.client.uritext`),
loading TLS files (:mod:`greenpool.client.tlscontext`), and anything that
connects.
"""

from __future__ import annotations

import hmac
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from pymongo import errors as _pymongo_errors
from pymongo.read_preferences import _ServerMode

from greenpool.address import Address
from greenpool.client import readpref
from greenpool.client.tlscontext import tls_context
from greenpool.client.uriparser import (
    reemit,
    run_pymongo_parser,
    split_unknown_options,
    warn_unknown,
)
from greenpool.client.uritext import WrittenURI, hide_secrets, looks_secret, secret_property
from greenpool.errors import ConfigurationError
from greenpool.pool.options import PoolOptions

__all__ = [
    "ClientSettings", "Credentials", "InvalidURIError", "Secret", "parse_uri", "redact_uri",
    "uri_secrets",
]

#: connectTimeoutMS when the connection string gives none (the URI spec's 20 s).
DEFAULT_CONNECT_TIMEOUT: Final = 20.0

# Mechanisms whose users live outside MongoDB: their authSource is "$external".
_EXTERNAL_MECHANISMS = frozenset({"GSSAPI", "MONGODB-X509", "MONGODB-AWS", "MONGODB-OIDC"})
_PASSWORD_MECHANISMS = frozenset({"SCRAM-SHA-1", "SCRAM-SHA-256", "PLAIN"})

# Options that turn TLS on when tls is not given (as PyMongo's client does), by
# PyMongo's lower-case key, with the name a message shows.
_TLS_IMPLYING = {
    "tlscafile": "tlsCAFile",
    "tlscertificatekeyfile": "tlsCertificateKeyFile",
    "tlscertificatekeyfilepassword": "tlsCertificateKeyFilePassword",
    "tlscrlfile": "tlsCRLFile",
}

# Pool options as PyMongo gives them; PoolOptions takes spec names in any case.
_POOL_COUNTS = ("maxpoolsize", "minpoolsize", "maxconnecting", "loadbalanced")
_POOL_DURATIONS = ("maxidletimems", "waitqueuetimeoutms")  # seconds from PyMongo, ms for us

_SRV_HINT = (
    " (for mongodb+srv:// the hosts come from DNS SRV records, and authSource,"
    " replicaSet and loadBalanced may come from a TXT record)"
)


class InvalidURIError(ConfigurationError, _pymongo_errors.InvalidURI):
    """A connection string that is not a valid URI; the message says why.

    It is also PyMongo's ``InvalidURI``, for code written against PyMongo.
    """


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

    >>> parse_uri("mongodb://ann:pw@h/?authMechanism=SCRAM-SHA-256").credentials
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
    :func:`parse_uri`, which validates; the constructor does not.

    ``extra`` holds the options greenpool does not use (``w``,
    ``readConcernLevel``, ``localThresholdMS``, ``uuidRepresentation``...) as
    PyMongo validated them, keyed by lower-case option name since option names
    are case-insensitive; it is there so nothing in a connection string is
    silently lost.
    """

    hosts: tuple[Address, ...]
    #: maxPoolSize, minPoolSize, maxIdleTimeMS, maxConnecting,
    #: waitQueueTimeoutMS and loadBalanced.
    pool: PoolOptions = field(default_factory=PoolOptions)
    credentials: Credentials | None = None
    #: The database in the URI's path (the default for authSource).
    database: str | None = None
    app_name: str | None = None
    #: Compressors to offer, in order of preference (PyMongo drops unknown ones).
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
    server_selection_timeout: float = 30.0
    direct_connection: bool = False
    replica_set: str | None = None
    #: The host of a mongodb+srv:// URI, whose SRV records gave ``hosts``.
    srv_host: str | None = None
    srv_max_hosts: int = 0
    srv_service_name: str = "mongodb"
    retry_reads: bool = True
    retry_writes: bool = True
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

        >>> parse_uri("mongodb://h/?readPreference=nearest&readPreferenceTags=dc:ny"
        ...           ).read_preference_object().document
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

        >>> parse_uri("mongodb://h/?tls=true").ssl_context().check_hostname
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


def parse_uri(uri: str) -> ClientSettings:
    """Parse and validate a ``mongodb://`` or ``mongodb+srv://`` connection string.

    For ``mongodb+srv://`` the SRV and TXT records are looked up first (with
    connectTimeoutMS as the DNS time limit), then the whole result is
    validated. Invalid values of known options are ignored with a warning
    naming the option and the value, as the URI Options spec says (for an
    option from a TXT record, which is not in the string, PyMongo's words
    alone); everything
    else that is wrong raises :class:`~greenpool.ConfigurationError` (an
    :class:`InvalidURIError` when the URI itself is malformed). Neither ever
    shows the password.

    >>> parse_uri("mongodb://a,b/?loadBalanced=true")
    Traceback (most recent call last):
    ...
    greenpool.ConfigurationError: invalid connection string: Cannot specify multiple hosts \
with loadBalanced=true
    """
    if not isinstance(uri, str):
        raise ConfigurationError(f"a connection string must be a str, not {type(uri).__name__}")
    written = WrittenURI.of(uri)
    # PyMongo looks for near misses of each unknown option (a difflib search
    # over every option name, milliseconds each): greenpool takes them out
    # first and warns about them itself, so parsing stays linear.
    known_only, unknown = split_unknown_options(uri)
    outcome, caught = run_pymongo_parser(known_only)
    warn_unknown(unknown, written)
    reemit(caught, written)
    if isinstance(outcome, Exception):
        # Raised here, outside the handler, so that PyMongo's unredacted
        # exception does not ride along as __context__.
        raise _configuration_error(outcome, written, srv=uri.startswith("mongodb+srv://"))
    return _settings(outcome)


def _configuration_error(
    failure: Exception, written: WrittenURI, *, srv: bool
) -> ConfigurationError:
    if isinstance(failure, OSError) and failure.filename is not None:
        path = os.fsdecode(failure.filename)
        option = written.option_holding(path) or "a file option"
        reason = failure.strerror or failure
        return ConfigurationError(
            written.redact(f"cannot read {option}={path!r} from the connection string: {reason}")
        )
    message = written.redact(f"invalid connection string: {failure}")
    if srv:
        message += _SRV_HINT
    if isinstance(failure, _pymongo_errors.InvalidURI):
        return InvalidURIError(message)
    return ConfigurationError(message)


def _settings(parsed: Mapping[str, Any]) -> ClientSettings:
    # PyMongo before 4.14 keys options in lower case, later ones in camelCase.
    options = {name.lower(): value for name, value in parsed["options"].items()}
    tls = _tls(options)
    insecure = options.pop("tlsinsecure", False)
    return ClientSettings(
        hosts=tuple((host, port) for host, port in parsed["nodelist"]),
        pool=_pool_options(options),
        credentials=_credentials(parsed, options),
        database=parsed["database"] or None,
        app_name=options.pop("appname", None),
        compressors=tuple(options.pop("compressors", ())),
        zlib_compression_level=options.pop("zlibcompressionlevel", -1),
        connect_timeout=options.pop("connecttimeoutms", DEFAULT_CONNECT_TIMEOUT),
        socket_timeout=options.pop("sockettimeoutms", None),
        timeout=options.pop("timeoutms", None),
        tls=tls,
        tls_ca_file=options.pop("tlscafile", None),
        tls_certificate_key_file=options.pop("tlscertificatekeyfile", None),
        tls_certificate_key_file_password=_secret(options.pop("tlscertificatekeyfilepassword",
                                                              None)),
        tls_crl_file=options.pop("tlscrlfile", None),
        tls_allow_invalid_certificates=options.pop("tlsallowinvalidcertificates", insecure),
        tls_allow_invalid_hostnames=options.pop("tlsallowinvalidhostnames", insecure),
        tls_insecure=insecure,
        heartbeat_frequency=options.pop("heartbeatfrequencyms", 10.0),
        server_selection_timeout=options.pop("serverselectiontimeoutms", 30.0),
        direct_connection=options.pop("directconnection", False),
        replica_set=options.pop("replicaset", None),
        srv_host=parsed.get("fqdn"),
        srv_max_hosts=options.pop("srvmaxhosts", 0),
        srv_service_name=options.pop("srvservicename", "mongodb"),
        retry_reads=options.pop("retryreads", True),
        retry_writes=options.pop("retrywrites", True),
        **_read_preference(options),
        extra=MappingProxyType({name: _conceal(name, value) for name, value in options.items()}),
    )


def _read_preference(options: dict[str, Any]) -> dict[str, Any]:
    mode = options.pop("readpreference", "primary")
    tags = tuple(MappingProxyType(dict(t)) for t in options.pop("readpreferencetags", ()))
    staleness = options.pop("maxstalenessseconds", -1)
    # The spec's rules across the three options (primary takes no tags and no
    # maxStalenessSeconds): an error naming them, as PyMongo's client raises.
    try:
        readpref.make(mode, [dict(t) for t in tags] or None, staleness)
    except ConfigurationError as error:
        raise ConfigurationError(
            f"the connection string's readPreference, readPreferenceTags and "
            f"maxStalenessSeconds conflict: {error}") from None
    return {"read_preference": mode, "read_preference_tags": tags,
            "max_staleness_seconds": staleness}


def _tls(options: dict[str, Any]) -> bool:
    implying = [name for key, name in _TLS_IMPLYING.items() if options.get(key)]
    tls = options.pop("tls", None)
    if tls is None:
        return bool(implying)
    if not tls and implying:
        raise ConfigurationError(
            f"tls=false conflicts with {', '.join(implying)}: set tls=true or remove them"
        )
    return bool(tls)


def _pool_options(options: dict[str, Any]) -> PoolOptions:
    given = {key: options.pop(key) for key in _POOL_COUNTS if key in options}
    for key in _POOL_DURATIONS:
        seconds = options.pop(key, None)
        if seconds is not None:
            given[key] = _milliseconds(seconds)
    return PoolOptions(given)


def _milliseconds(seconds: float) -> float:
    # Rounded to the microsecond so that 50000 ms stays 50000, not 50000.000000001.
    milliseconds = round(seconds * 1000, 3)
    return int(milliseconds) if milliseconds.is_integer() else milliseconds


def _credentials(parsed: Mapping[str, Any], options: dict[str, Any]) -> Credentials | None:
    username: str | None = parsed["username"]
    mechanism: str | None = options.get("authmechanism")
    if username is None and mechanism is None:
        return None  # authSource or authMechanismProperties alone stay in extra
    options.pop("authmechanism", None)
    if mechanism == "DEFAULT":
        mechanism = None  # the same as not naming one: negotiate
    if not username and (mechanism is None or mechanism in _PASSWORD_MECHANISMS):
        raise ConfigurationError(
            f"authMechanism={mechanism or 'DEFAULT'} needs a user name in the connection string"
        )
    source = options.pop("authsource", None) or _default_auth_source(mechanism, parsed["database"])
    properties = options.pop("authmechanismproperties", None) or {}
    return Credentials(
        username=username,
        password=_secret(parsed["password"] or None),
        source=source,
        mechanism=mechanism,
        mechanism_properties=_conceal("authmechanismproperties", properties),
    )


def _default_auth_source(mechanism: str | None, database: str | None) -> str:
    if mechanism in _EXTERNAL_MECHANISMS:
        return "$external"
    if database:
        return database
    return "$external" if mechanism == "PLAIN" else "admin"


def _secret(value: str | None) -> Secret | None:
    return None if value is None else Secret(value)


def _conceal(name: str, value: Any) -> Any:
    """``value`` with what looks secret in it wrapped in a :class:`Secret`."""
    if name == "authmechanismproperties" and isinstance(value, Mapping):
        return MappingProxyType({
            key: Secret(item) if isinstance(item, str) and secret_property(key) else item
            for key, item in value.items()})
    if isinstance(value, str) and looks_secret(name):
        return Secret(value)
    return value


def uri_secrets(uri: str) -> tuple[str, ...]:
    """Every secret in the connection string ``uri``, longest first: the
    password (as written, decoded, and the pieces an unescaped ``/`` or ``?``
    would cut it into), the values of options that hold secrets
    (tlsCertificateKeyFilePassword, anything named like a password, secret
    or token) and of authMechanismProperties other than the ones PyMongo
    shows (AWS_SESSION_TOKEN among them)."""
    return WrittenURI.of(uri).secrets


def redact_uri(uri: str) -> str:
    """``uri`` as it may be shown: the password, and the values of every
    secret :func:`uri_secrets` finds, replaced by ``***``. Every place
    greenpool shows a connection string goes through this.

    >>> redact_uri("mongodb://ann:s3cret@db.example.com/?tlsCertificateKeyFilePassword=x&w=1")
    'mongodb://ann:***@db.example.com/?tlsCertificateKeyFilePassword=***&w=1'
    >>> redact_uri("mongodb://ann:Sup3r/x@db/?authMechanismProperties=AWS_SESSION_TOKEN:t0k")
    'mongodb://ann:***@db/?authMechanismProperties=AWS_SESSION_TOKEN:***'
    """
    return hide_secrets(uri)
