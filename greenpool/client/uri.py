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
lookups through dnspython. This module turns its result into typed settings,
keeps secrets out of every ``repr()``, ``str()`` and message, builds the TLS
context, and makes PyMongo's complaints greenpool's: errors are
:class:`~greenpool.ConfigurationError`, and a warning about an ignored value
names the option and the value as written.
"""

from __future__ import annotations

import difflib
import functools
import hmac
import os
import re
import ssl
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import unquote_plus

import gevent.lock
import pymongo
from pymongo import common as _pymongo_common
from pymongo import errors as _pymongo_errors
from pymongo.read_preferences import _ServerMode

try:  # PyMongo 4.12 and later
    from pymongo.synchronous.uri_parser import parse_uri as _pymongo_parse_uri
except ImportError:  # PyMongo 4.9 to 4.11
    from pymongo.uri_parser import parse_uri as _pymongo_parse_uri

from greenpool.address import Address
from greenpool.client import readpref
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

# authMechanismProperties whose values may be shown (PyMongo's repr shows
# these); every other one (AWS_SESSION_TOKEN, anything unknown) is hidden.
_SHOWN_MECHANISM_PROPERTIES = frozenset({
    "ALLOWED_HOSTS", "CANONICALIZE_HOST_NAME", "ENVIRONMENT", "SERVICE_HOST", "SERVICE_NAME",
    "SERVICE_REALM", "TOKEN_RESOURCE",
})

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

_PYMONGO_DIR = os.path.dirname(pymongo.__file__)

# The option names PyMongo knows, in lower case (its lookup is case-insensitive).
_KNOWN_OPTIONS: frozenset[str] = frozenset(_pymongo_common.URI_OPTIONS_VALIDATOR_MAP)
# In PyMongo's order, which decides between equally near misses.
_KNOWN_OPTIONS_IN_ORDER = tuple(_pymongo_common.URI_OPTIONS_VALIDATOR_MAP)
# Unknown options are warned about one by one up to this many, then in one
# summary warning: a connection string with thousands of them (a generated
# or hostile one) costs neither a warning nor a near-miss search for each.
_UNKNOWN_OPTION_WARNINGS = 20

# warnings.catch_warnings swaps process-wide state, and an SRV lookup yields to
# other greenlets in the middle of it: two parses interleaving would restore
# each other's filters. This keeps greenpool's own parses one at a time.
_PARSE_LOCK = gevent.lock.Semaphore()


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
        # PROTOCOL_TLS_CLIENT starts out verifying certificates and host names.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._load_trust(context)
        self._load_identity(context)
        if self.tls_allow_invalid_hostnames or self.tls_allow_invalid_certificates:
            context.check_hostname = False
        if self.tls_allow_invalid_certificates:
            context.verify_mode = ssl.CERT_NONE
        return context

    def _load_trust(self, context: ssl.SSLContext) -> None:
        ca_file, crl_file = self.tls_ca_file, self.tls_crl_file
        if ca_file:
            _load_tls_file("tlsCAFile", ca_file, lambda: context.load_verify_locations(ca_file))
        else:
            context.load_default_certs()
        if crl_file:
            _load_tls_file("tlsCRLFile", crl_file, lambda: context.load_verify_locations(crl_file))
            context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF

    def _load_identity(self, context: ssl.SSLContext) -> None:
        path = self.tls_certificate_key_file
        if not path:
            return
        secret = self.tls_certificate_key_file_password

        def password() -> str:
            # Without a callback OpenSSL would ask for the passphrase on the
            # terminal, which hangs a server process.
            if secret is None:
                raise ConfigurationError(
                    f"tlsCertificateKeyFile {path!r} holds an encrypted key: "
                    "give its passphrase as tlsCertificateKeyFilePassword"
                )
            return secret.reveal()

        _load_tls_file("tlsCertificateKeyFile", path,
                       lambda: context.load_cert_chain(path, password=password))


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
    written = _Written.of(uri)
    # PyMongo looks for near misses of each unknown option (a difflib search
    # over every option name, milliseconds each): greenpool takes them out
    # first and warns about them itself, so parsing stays linear.
    known_only, unknown = _split_unknown_options(uri)
    outcome, caught = _run_pymongo_parser(known_only)
    _warn_unknown(unknown, written)
    _reemit(caught, written)
    if isinstance(outcome, Exception):
        # Raised here, outside the handler, so that PyMongo's unredacted
        # exception does not ride along as __context__.
        raise _configuration_error(outcome, written, srv=uri.startswith("mongodb+srv://"))
    return _settings(outcome)


def _run_pymongo_parser(
    uri: str,
) -> tuple[dict[str, Any] | Exception, list[warnings.WarningMessage]]:
    with _PARSE_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return _pymongo_parse_uri(uri, validate=True, warn=True, normalize=True), caught
        except (_pymongo_errors.ConfigurationError, ValueError, TypeError, OSError) as exc:
            # OSError: PyMongo opens the TLS files a connection string names.
            return exc, caught


def _split_unknown_options(uri: str) -> tuple[str, list[tuple[str, str]]]:
    """``uri`` without the options PyMongo does not know, and those options
    (name and value as written). A connection string whose structure is in
    doubt (no '/' before the options, mixed separators, an item that is not
    one ``name=value``) keeps them, for PyMongo to judge."""
    scheme, sep, rest = uri.partition("://")
    host_part, slash, path_part = rest.partition("/")
    database, question, query = path_part.partition("?")
    if not (sep and slash and question) or ("&" in query and ";" in query):
        return uri, []
    delimiter = "&" if "&" in query else ";"
    kept, unknown = [], []
    for item in query.split(delimiter):
        name, equals, value = item.partition("=")
        # PyMongo looks names up as written, in lower case.
        if equals and "=" not in value and name.lower() not in _KNOWN_OPTIONS:
            unknown.append((name, value))
        else:
            kept.append(item)
    if not unknown:
        return uri, []
    options = f"?{delimiter.join(kept)}" if kept else ""
    return f"{scheme}://{host_part}/{database}{options}", unknown


def _warn_unknown(unknown: list[tuple[str, str]], written: _Written) -> None:
    """Warn about unknown options as PyMongo does (the last of repeated ones)."""
    last = {name.lower(): (name, value) for name, value in unknown}
    for index, (name, value) in enumerate(last.values()):
        if index == _UNKNOWN_OPTION_WARNINGS:
            warnings.warn(
                f"{len(last) - index} more unknown options in the connection string are "
                "ignored too", UserWarning, stacklevel=4)
            return
        text = f"Unknown option: {name.lower()}."  # as PyMongo names it
        suggestions = difflib.get_close_matches(name.lower(), _KNOWN_OPTIONS_IN_ORDER,
                                                cutoff=0.2)
        if suggestions:
            text += (f" Did you mean one of ({', '.join(suggestions)}) or maybe a camelCase "
                     "version of one? Refer to docstring.")
        shown = f"{unquote_plus(name)}={unquote_plus(value)!r}"
        warnings.warn(written.redact(f"{text} (connection string option {shown})"),
                      UserWarning, stacklevel=4)


def _reemit(caught: list[warnings.WarningMessage], written: _Written) -> None:
    seen: set[tuple[str, type[Warning]]] = set()
    for record in caught:
        if not record.filename.startswith(_PYMONGO_DIR) and record.filename != __file__:
            # Another greenlet's warning, caught while a DNS lookup yielded.
            warnings.warn_explicit(record.message, record.category, record.filename,
                                   record.lineno, source=record.source)
            continue
        # Some PyMongo versions validate the options twice, and a repeated
        # option is reported at each repetition: say each thing once.
        message = str(record.message)
        if (message, record.category) in seen:
            continue
        seen.add((message, record.category))
        warnings.warn(written.describe(message), record.category, stacklevel=3)


def _configuration_error(
    failure: Exception, written: _Written, *, srv: bool
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


def _looks_secret(name: str) -> bool:
    # By name, so that a misspelt password option is hidden too.
    lowered = name.lower()
    return any(word in lowered for word in ("pass", "pasw", "pwd", "secret", "token"))


def _conceal(name: str, value: Any) -> Any:
    """``value`` with what looks secret in it wrapped in a :class:`Secret`."""
    if name == "authmechanismproperties" and isinstance(value, Mapping):
        return MappingProxyType({
            key: Secret(item) if isinstance(item, str) and _secret_property(key) else item
            for key, item in value.items()})
    if isinstance(value, str) and _looks_secret(name):
        return Secret(value)
    return value


def _load_tls_file(option: str, path: str, load: Callable[[], object]) -> None:
    try:
        load()
    except ssl.SSLError as exc:
        what = ("a PEM file with a certificate and its private key, or the wrong "
                "tlsCertificateKeyFilePassword" if option == "tlsCertificateKeyFile"
                else "a PEM file of certificates")
        raise ConfigurationError(
            f"{option} {path!r} could not be loaded: not {what} ({exc.reason or exc})"
        ) from None
    except FileNotFoundError:
        raise ConfigurationError(f"{option} {path!r} does not exist") from None
    except OSError as exc:
        reason = exc.strerror or exc
        raise ConfigurationError(f"{option} {path!r} cannot be read: {reason}") from None


@dataclass(frozen=True)
class _Written:
    """The connection string as written, for messages only.

    PyMongo does the parsing; this finds the option a PyMongo message is
    about, and the secrets that no message may show.
    """

    options: tuple[tuple[str, str], ...]
    secrets: tuple[str, ...]

    @classmethod
    def of(cls, uri: str) -> _Written:
        raw = tuple(_raw_options(uri))
        decoded = tuple((unquote_plus(name), unquote_plus(value)) for name, value in raw)
        candidates = {*_password_pieces(uri), *_secret_values(raw), *_secret_values(decoded)}
        # Longest first, so that a secret containing another is hidden whole.
        secrets = sorted((s for s in candidates if s), key=len, reverse=True)
        return cls(decoded, tuple(secrets))

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self.secrets:
            if secret not in text:
                continue  # the common case, and much cheaper than the search
            # Whole words only: hiding "pass" inside "password" would tell
            # the reader what the password is.
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
        return text

    def describe(self, message: str) -> str:
        """A PyMongo message about the options, naming the option it is about once,
        quoted as written (``name='value'``)."""
        option = self._option_in(message)
        if option is not None:
            name, value = option
            # PyMongo names the option lower-cased ("maxpoolsize must be ..."): quote it
            # there, as written, rather than a second time at the end.
            quoted = f"{name}={value!r}"
            named = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", lambda _: quoted, message,
                           count=1, flags=re.IGNORECASE)
            if named == message:  # not named, or spelled out: say which option it is
                named = f"{message} (connection string option {quoted})"
            message = named
        return self.redact(message)

    @functools.cached_property
    def _known_options(self) -> dict[str, tuple[str, str]]:
        # The options PyMongo's messages can be about (it never sees the
        # unknown ones), by lower-case name; PyMongo keeps the last of
        # repeated options, so does this.
        return {name.lower(): (name, value) for name, value in self.options
                if name.lower() in _KNOWN_OPTIONS}

    def option_holding(self, value: str) -> str | None:
        """The name of the option whose value is ``value``."""
        return next((name for name, given in self.options if given == value), None)

    def _option_in(self, message: str) -> tuple[str, str] | None:
        # PyMongo's messages name the option ("maxidletimems must be ..."),
        # or spell it out ("Malformed auth mechanism properties"), or name
        # only the value ("bogus is not a valid read preference"). The
        # earliest mention wins, then the longest, then a name over a value.
        lowered = message.lower()
        squeezed = re.sub(r"[\s_]", "", lowered)
        hits: list[tuple[int, int, int, tuple[str, str]]] = []
        for key, (name, value) in self._known_options.items():
            hits.append((_find_word(lowered, key), -len(key), 0, (name, value)))
            if len(key) > 3:  # a short name ("w") would be found in any squeezed text
                hits.append((squeezed.find(key), -len(key), 0, (name, value)))
            hits.extend((_find_word(message, needle), -len(needle), 1, (name, value))
                        for needle in _value_needles(value))
        found = [hit for hit in hits if hit[0] >= 0]
        return min(found)[-1] if found else None


def _value_needles(value: str) -> set[str]:
    # A list ("zstd,snappy") or key:value pairs ("SERVICE_NAME:x") is quoted
    # by its parts.
    items = value.split(",")
    return {value, *items, *(item.partition(":")[0] for item in items)} - {""}


def _raw_options(uri: str) -> Iterable[tuple[str, str]]:
    for item in re.split("[&;]", uri.partition("?")[2]):
        name, _, value = item.partition("=")
        if name:
            yield name, value


def _password_pieces(uri: str) -> list[str]:
    # Everything between the user name and the last '@' may be password. An
    # unescaped '/' or '?' in it makes PyMongo cut the URI inside the password
    # and quote a piece of it in an error, so the pieces are secret too.
    userinfo, at, _ = uri.partition("://")[2].rpartition("@")
    password = userinfo.partition(":")[2] if at else ""
    return [password, unquote_plus(password), *re.split("[/?#]", password)]


def _secret_values(options: Iterable[tuple[str, str]]) -> Iterable[str]:
    for name, value in options:
        if _looks_secret(name):
            yield value
        elif name.lower() == "authmechanismproperties":
            for item in value.split(","):
                key, _, secret = item.partition(":")
                if _secret_property(key):
                    yield secret


def _secret_property(key: str) -> bool:
    return _looks_secret(key) or unquote_plus(key).upper() not in _SHOWN_MECHANISM_PROPERTIES


def uri_secrets(uri: str) -> tuple[str, ...]:
    """Every secret in the connection string ``uri``, longest first: the
    password (as written, decoded, and the pieces an unescaped ``/`` or ``?``
    would cut it into), the values of options that hold secrets
    (tlsCertificateKeyFilePassword, anything named like a password, secret
    or token) and of authMechanismProperties other than the ones PyMongo
    shows (AWS_SESSION_TOKEN among them)."""
    return _Written.of(uri).secrets


def redact_uri(uri: str) -> str:
    """``uri`` as it may be shown: the password, and the values of every
    secret :func:`uri_secrets` finds, replaced by ``***``. Every place
    greenpool shows a connection string goes through this.

    >>> redact_uri("mongodb://ann:s3cret@db.example.com/?tlsCertificateKeyFilePassword=x&w=1")
    'mongodb://ann:***@db.example.com/?tlsCertificateKeyFilePassword=***&w=1'
    >>> redact_uri("mongodb://ann:Sup3r/x@db/?authMechanismProperties=AWS_SESSION_TOKEN:t0k")
    'mongodb://ann:***@db/?authMechanismProperties=AWS_SESSION_TOKEN:***'
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return "<not a mongodb:// URI>"  # it could be anything, a password included
    at = _userinfo_end(rest)
    if at != -1:
        user, colon, _ = rest[:at].partition(":")
        if colon:
            rest = f"{user}:***{rest[at:]}"
    head, question, query = rest.partition("?")
    if question:
        query = "".join(_redact_option(item) for item in re.split("([&;])", query))
    # Then the secrets as words wherever they are, should the string be
    # malformed enough to hide one from the structure above.
    return _Written.of(uri).redact(f"{scheme}://{head}{question}{query}")


def _userinfo_end(rest: str) -> int:
    """Where the user information of ``rest`` (the URI after ``://``) ends: its last '@'."""
    authority_end = len(rest)
    for mark in "/?":
        index = rest.find(mark)
        if index != -1:
            authority_end = min(authority_end, index)
    at = rest.rfind("@", 0, authority_end)
    if at != -1:
        return at
    # An unescaped '/' or '?' in the password ends the authority inside it:
    # then the user information may reach as far as the last '@'.
    return rest.rfind("@")


def _redact_option(item: str) -> str:
    name, equals, value = item.partition("=")
    if not equals:
        return item
    if _looks_secret(unquote_plus(name)):
        return f"{name}=***"
    if unquote_plus(name).lower() != "authmechanismproperties":
        return item
    shown = []
    for part in value.split(","):
        key, colon, _ = part.partition(":")
        shown.append(f"{key}:***" if colon and _secret_property(key) else
                     part if colon else "***")
    return f"{name}={','.join(shown)}"


def _find_word(text: str, word: str) -> int:
    match = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) if word else None
    return match.start() if match else -1
