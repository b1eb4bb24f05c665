"""Connection strings: ``mongodb://`` and ``mongodb+srv://`` URIs, read top to bottom.

:func:`parse_uri` turns a connection string into :class:`ClientSettings`:

>>> settings = parse_uri("mongodb://app:s3cret@db.example.com/shop?maxPoolSize=20&appName=shop")
>>> settings.hosts, settings.pool.max_pool_size, settings.app_name
((('db.example.com', 27017),), 20, 'shop')
>>> settings.credentials.password
Secret('***')

A connection string is read in this module's order:

1. its parts: scheme, user information, hosts, database, options (:func:`_split`);
2. the user information, the hosts and the database;
3. each option through the option table (:data:`_OPTIONS`), which converts the
   value and says what it accepts. Option names are case-insensitive. A bad
   value of a known option, and an unknown option, are warned about and
   ignored, as the URI Options spec says; a bad credential, TLS file, read or
   write concern option raises, since going on without it would connect, read
   or write differently; then the same options given as keyword arguments
   (``greenpool.Client(uri, maxPoolSize=20, w="majority")``, as PyMongo's
   MongoClient takes them), which win over the connection string's, through
   the same table: there a bad value raises, a value of the wrong type
   raises :class:`~greenpool.OptionTypeError` (also a ``TypeError``, as
   PyMongo's), and so does an unknown name;
4. for ``mongodb+srv://``, the SRV and TXT records (looked up through
   :mod:`greenpool.client.config.dns`) and the seedlist rules;
5. the rules across options (:func:`_check_combinations`);
6. the settings (:func:`_settings`).

Then, at the bottom, redaction: :func:`redact_uri` and :func:`uri_secrets`.

Every message is greenpool's own: it names the option as the user wrote it,
the value (``maxIdleTimeMS='soon'``), and what is accepted; no message shows
a password or another secret. Errors are :class:`~greenpool.ConfigurationError`
(an :class:`InvalidURIError` when the string is not a well-formed connection
string); warnings are :class:`UserWarning`, pointing at the caller.

What lives here: parsing, validation with its messages, and redaction. What
must not: the settings types (:mod:`greenpool.client.config.settings`; importable
from here too, since a parse returns them), DNS queries themselves
(:mod:`greenpool.client.config.dns`), loading TLS files into a context
(:mod:`greenpool.client.config.tlscontext`), and anything that connects.
"""

from __future__ import annotations

import difflib
import errno
import math
import os
import random
import re
import stat
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, NoReturn
from urllib.parse import unquote, unquote_plus

from pymongo import errors as _pymongo_errors

from greenpool.address import DEFAULT_PORT, Address, format_address, parse_address
from greenpool.client.config import dns
from greenpool.client.config.settings import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_ADAPTIVE_RETRIES,
    ClientSettings,
    Credentials,
    Secret,
)
from greenpool.client.config.srvhosts import (
    SrvHostRefused,
    SrvHostRule,
    checked_suffix,
    in_srv_domain,
    srv_domain,
)
from greenpool.errors import ConfigurationError, OptionTypeError
from greenpool.pool.options import PoolOptions

__all__ = [
    "OPTION_NAMES", "ClientSettings", "Credentials", "InvalidURIError", "Secret",
    "client_settings",
    "in_srv_domain", "parse_uri", "redact_uri", "srv_domain", "uri_secrets",
]

_SCHEMES: Final = ("mongodb://", "mongodb+srv://")
# Characters a database name cannot hold.
_BAD_DATABASE_CHARACTERS: Final = frozenset('/\\. "$')
# Unknown options are warned about one by one up to this many, then in one
# summary warning: a connection string with thousands of them (a generated
# or hostile one) costs neither a warning nor a near-miss search for each.
_UNKNOWN_OPTION_WARNINGS: Final = 20
# The only options a TXT record may set (Initial DNS Seedlist Discovery).
_TXT_OPTIONS: Final = frozenset({"authsource", "replicaset", "loadbalanced"})


class InvalidURIError(ConfigurationError, _pymongo_errors.InvalidURI):
    """A connection string that is not a valid URI; the message says why.

    It is also PyMongo's ``InvalidURI``, for code written against PyMongo.
    """


def parse_uri(uri: str, keywords: Mapping[str, Any] | None = None) -> ClientSettings:
    """Parse and validate a ``mongodb://`` or ``mongodb+srv://`` connection string,
    and ``keywords``: connection string options as keyword arguments (Python
    values: ``maxPoolSize=20``, ``retryWrites=False``, ``readPreferenceTags=[{"dc":
    "ny"}]``; None means not given), which win over the string's.

    For ``mongodb+srv://`` the SRV and TXT records are looked up first (with
    connectTimeoutMS as the DNS time limit), then the whole result is
    validated. A bad value of a known option, and an unknown option, are
    ignored with a warning naming the option and the value; everything else
    that is wrong raises :class:`~greenpool.ConfigurationError` (an
    :class:`InvalidURIError` when the string itself is malformed). Neither
    ever shows the password.

    >>> parse_uri("mongodb://a,b/?loadBalanced=true")
    Traceback (most recent call last):
    ...
    greenpool.ConfigurationError: loadBalanced=true allows one host, and the connection \
string names 2: a:27017,b:27017
    """
    if not isinstance(uri, str):
        raise ConfigurationError(f"a connection string must be a str, not {type(uri).__name__}")
    return _read(_Reader(uri, keywords or {}))


def client_settings(uri: str | None, keywords: Mapping[str, Any], *,
                    hosts: Sequence[str] = (), port: int = DEFAULT_PORT,
                    username: str | None = None, password: str | None = None,
                    srv_host_validator: Callable[[str], bool] | None = None,
                    ) -> ClientSettings:
    """The settings of a Client given as PyMongo's MongoClient takes them:
    ``uri`` (None: the client was given none), ``hosts`` given beside it
    (``"a"``, ``"a:27018,b"``, ``"[::1]:27019"``), ``port`` for every host
    written without one (the URI's too, as PyMongo's), ``username`` and
    ``password`` (None: not given) winning over the URI's user information,
    the connection string options of ``keywords`` as :func:`parse_uri`
    takes them, and ``srv_host_validator`` (a mongodb+srv:// host's rule,
    :class:`~greenpool.client.config.srvhosts.SrvHostRule`)."""
    return _read(_Reader(uri, keywords, hosts=hosts, port=port, username=username,
                         password=password, srv_host_validator=srv_host_validator))


def _read(reader: _Reader) -> ClientSettings:
    try:
        return reader.read()
    finally:
        for message in reader.warnings:
            # At the user's call: parse_uri's caller, or the Client's.
            warnings.warn(message, UserWarning, stacklevel=3)


# --- 1. the parts --------------------------------------------------------------------


@dataclass(frozen=True)
class _Parts:
    """A connection string cut into its parts, still percent-encoded."""

    srv: bool
    userinfo: str | None  # None: no '@'
    hosts: str
    database: str
    query: str


def _split(uri: str) -> _Parts:
    scheme = next((s for s in _SCHEMES if uri.startswith(s)), None)
    if scheme is None:
        head = uri.partition("://")[0] if "://" in uri else None
        named = f", not {head + '://'!r}" if head is not None and len(head) <= 20 else ""
        raise InvalidURIError(
            f"a connection string must start with mongodb:// or mongodb+srv://{named}")
    rest = uri[len(scheme):]
    end = _userinfo_end(rest)
    userinfo, rest = (rest[:end], rest[end + 1:]) if end != -1 else (None, rest)
    cut = _hosts_end(rest)
    hosts, path = rest[:cut], rest[cut:]
    if path.startswith("/"):
        path = path[1:]
    database, _, query = path.partition("?")
    if "/" in database:
        raise InvalidURIError(
            "a connection string may hold one '/' after the hosts, before the database; "
            "percent-encode '/' in a Unix domain socket path (%2F) or a password")
    return _Parts(scheme == "mongodb+srv://", userinfo, hosts, database, query)


def _userinfo_end(rest: str) -> int:
    """Where the user information of ``rest`` (the string after ``://``) ends:
    the last '@' before the hosts end; -1 when there is none.

    A password with an unescaped '/' or '?' ends the hosts inside it
    ("ann:pa/ss@h"): when what precedes that '/' or '?' is not a host list
    ("ann:pa" has no port after its colon), the first '@' after it ends the user
    information instead, so that the password is still found and hidden. An
    '@' inside an option value ("?appName=a@b") is never taken for it.
    """
    end = _hosts_end(rest)
    at = rest.rfind("@", 0, end)
    if at != -1 or end == len(rest) or all(map(_HOST.fullmatch, rest[:end].split(","))):
        return at
    return rest.find("@", end)


# One item of a host list, as written: a name or [IPv6 literal], maybe a port.
_HOST: Final = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(:\d*)?")


def _hosts_end(text: str) -> int:
    """Where a host list ends: at the first '/' (then comes the database) or
    '?' (the options, when the database is left out with its '/')."""
    return min((i for i in (text.find("/"), text.find("?")) if i != -1), default=len(text))


# --- 2. user information, hosts, database -------------------------------------------


def _userinfo(userinfo: str | None) -> tuple[str | None, str | None]:
    """The user name and password, decoded. Messages never quote them."""
    if userinfo is None:
        return None, None
    user, colon, password = userinfo.partition(":")
    hint = ("percent-encode ':', '/', '?', '#', '@' and '%' in the user name and "
            "password (urllib.parse.quote_plus does)")
    if "@" in userinfo:
        raise InvalidURIError(f"the user name or password holds an unescaped '@': {hint}")
    if ":" in password:
        raise InvalidURIError(f"the password holds an unescaped ':': {hint}")
    if "/" in userinfo or "?" in userinfo or "#" in userinfo:
        raise InvalidURIError(
            f"the user name or password holds an unescaped '/', '?' or '#': {hint}")
    if not _escapes_valid(userinfo):
        raise InvalidURIError(
            f"the user name or password holds a '%' that starts no escape: {hint}")
    if not user:
        raise InvalidURIError("the connection string has user information ('...@') "
                              "but no user name")
    return unquote_plus(user), unquote_plus(password) if colon else None


def _escapes_valid(text: str) -> bool:
    return re.search(r"%(?![0-9A-Fa-f]{2})", text) is None


def _hosts(text: str, *, srv: bool, port: int = DEFAULT_PORT,
           where: str = "the connection string") -> tuple[Address, ...]:
    if not text:
        raise InvalidURIError(f"{where} names no host")
    items = text.split(",")
    if "" in items:
        raise InvalidURIError(f"the host list {text!r} has an empty host (an extra comma?)")
    hosts = tuple(_host(item, port) for item in items)
    if srv and len(hosts) != 1:
        raise InvalidURIError(
            f"a mongodb+srv:// connection string names one host, not {len(hosts)}: {text}")
    if srv and ":" in items[0].rpartition("]")[2]:
        raise InvalidURIError(
            f"a mongodb+srv:// host takes no port (the SRV records give it): {text}")
    return hosts


def _host(item: str, default_port: int = DEFAULT_PORT) -> Address:
    try:
        host, port = parse_address(unquote(item))
    except ValueError as error:
        raise InvalidURIError(
            f"{error}; a password's ':', '/' or '?' must be percent-encoded") from None
    if port is None:
        return (host, None)  # a Unix domain socket
    written = _HOST.fullmatch(item)
    if written is not None and written.group(2) is None:
        port = default_port  # no port written: the Client's port= argument, else 27017
    return (host.lower(), port)


def _database(text: str) -> str | None:
    name = unquote_plus(text)
    bad = sorted(_BAD_DATABASE_CHARACTERS.intersection(name))
    if bad:
        raise InvalidURIError(
            f"database name {name!r} holds {' and '.join(map(repr, bad))}, which a database "
            "name cannot")
    return name or None


# --- 3. the options ------------------------------------------------------------------


class _Rejected(Exception):
    """A value an option does not take: ``reason`` says what it takes.

    ``keep`` is what to use instead when part of the value is good (a list
    with one unknown item); without it the option is ignored. ``wrong_type``:
    the text is not of the option's kind at all (not a whole number, not a
    boolean), so a keyword argument that is not a str was of the wrong type.
    """

    def __init__(self, reason: str, keep: object = None, *, wrong_type: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.keep = keep
        self.wrong_type = wrong_type


Converter = Callable[[str], Any]


@dataclass(frozen=True)
class _Option:
    """One known option: its name as the spec spells it, and its converter."""

    name: str
    convert: Converter
    #: A bad value raises rather than being ignored: credentials and TLS
    #: files, without which the client would connect differently.
    strict: bool = False
    #: Every occurrence counts (readPreferenceTags), not only the last.
    repeats: bool = False


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise _Rejected("expected true or false", wrong_type=True)
    return text == "true"


def _no_retargeting(text: str) -> bool:
    """enableOverloadRetargeting: false is what greenpool does (a retry after an
    overload error selects a server afresh, the one that refused it included)."""
    if _boolean(text):
        raise _Rejected("greenpool does not deprioritize the server that refused an "
                        "overloaded operation when it retries it; false is used", keep=False)
    return False


def _integer(minimum: int, maximum: int | None = None) -> Converter:
    def convert(text: str) -> int:
        bound = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        if not re.fullmatch(r"-?\d+", text):
            raise _Rejected(f"expected a whole number {bound}", wrong_type=True)
        value = int(text)
        if value < minimum or (maximum is not None and value > maximum):
            raise _Rejected(f"expected a whole number {bound}")
        return value
    return convert


def _milliseconds(minimum: float = 0, meaning_of_zero: str = "") -> Converter:
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < minimum:
            zero = f" ({meaning_of_zero})" if meaning_of_zero else ""
            raise _Rejected(f"expected a number of milliseconds >= {minimum:g}{zero}") from None
        return int(value) if value.is_integer() else value
    return convert


def _text(text: str) -> str:
    return text


def _host_suffix(text: str) -> str:
    """srvAllowedHostsSuffix: a domain that is not a public suffix."""
    try:
        return checked_suffix(text)
    except ValueError as error:
        raise _Rejected(str(error)) from None


def _nonempty(what: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if not text:
            raise _Rejected(f"expected {what}, not nothing")
        return text
    return convert


def _choice(*values: str) -> Converter:
    def convert(text: str) -> str:
        if text not in values:
            raise _Rejected(f"expected one of {', '.join(values)}")
        return text
    return convert


def _app_name(text: str) -> str:
    if len(text.encode()) > 128:
        raise _Rejected(f"expected at most 128 bytes of UTF-8, not {len(text.encode())}")
    return text


_COMPRESSORS: Final = ("snappy", "zlib", "zstd", "noop")


def _compressors(text: str) -> tuple[str, ...]:
    names = [name for name in text.split(",") if name]
    known = tuple(name for name in names if name in _COMPRESSORS)
    unknown = [name for name in names if name not in _COMPRESSORS]
    if unknown:
        reason = (f"{', '.join(map(repr, unknown))} "
                  f"{'is not a compressor' if len(unknown) == 1 else 'are not compressors'}"
                  f" (expected {', '.join(_COMPRESSORS)})")
        raise _Rejected(reason + ("; the others are used" if known else ""), keep=known or None)
    return known


def _tag_set(text: str) -> dict[str, str]:
    if not text:
        return {}  # an empty tag set: any server
    pairs = [item.partition(":") for item in text.split(",")]
    if any(not colon or not key for key, colon, _ in pairs):
        raise _Rejected("expected a tag set: name:value pairs separated by commas "
                        "(dc:ny,rack:1), or nothing for any server")
    return {key: value for key, _, value in pairs}


def _max_staleness(text: str) -> int:
    if not re.fullmatch(r"-?\d+", text) or (int(text) != -1 and int(text) <= 0):
        raise _Rejected("expected -1 (no maximum) or a positive whole number of seconds")
    return int(text)


def _write_concern(text: str) -> int | str:
    if re.fullmatch(r"-?\d+", text):
        if int(text) < 0:
            raise _Rejected("expected a number of servers >= 0, majority, or a tag set's name")
        return int(text)
    return _nonempty("a number of servers >= 0, majority, or a tag set's name")(text)


# authMechanismProperties any mechanism may take, and the ones whose values may be shown.
_MECHANISM_PROPERTIES: Final = frozenset({
    "SERVICE_NAME", "CANONICALIZE_HOST_NAME", "SERVICE_REALM", "SERVICE_HOST",
    "AWS_SESSION_TOKEN", "ENVIRONMENT", "TOKEN_RESOURCE",
})
_SHOWN_MECHANISM_PROPERTIES: Final = _MECHANISM_PROPERTIES - {"AWS_SESSION_TOKEN"}


def _mechanism_properties(text: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for item in text.split(","):
        key, colon, value = item.partition(":")
        if not colon or not key:
            raise _Rejected("expected NAME:value pairs separated by commas "
                            "(SERVICE_NAME:mongodb,CANONICALIZE_HOST_NAME:true)")
        if key not in _MECHANISM_PROPERTIES:
            raise _Rejected(f"{key!r} is not a property (expected "
                            f"{', '.join(sorted(_MECHANISM_PROPERTIES))})")
        properties[key] = {"true": True, "false": False}.get(value, value) \
            if key == "CANONICALIZE_HOST_NAME" else value
    return properties


_MECHANISMS: Final = ("DEFAULT", "SCRAM-SHA-1", "SCRAM-SHA-256", "MONGODB-X509", "GSSAPI",
                      "PLAIN", "MONGODB-AWS", "MONGODB-OIDC")


def _readable_file(text: str) -> str:
    """A path whose file can be read now: a missing, unreadable or directory
    path is rejected with the reason the operating system gave."""
    try:
        # Non-blocking, so that a FIFO's open does not wait for a writer.
        descriptor = os.open(text, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        reason = {errno.ENOENT: "no such file", errno.EACCES: "permission denied",
                  errno.EISDIR: "it is a directory"}.get(error.errno or 0, "")
        told = error.strerror or type(error).__name__
        raise _Rejected(f"cannot read the file: {reason} ({told})" if reason
                        else f"cannot read the file: {told}") from None
    try:
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            raise _Rejected("cannot read the file: it is a directory")
    finally:
        os.close(descriptor)
    return text


def _table(*options: _Option) -> dict[str, _Option]:
    return {option.name.lower(): option for option in options}


#: Every option greenpool knows, by lower-case name (names are case-insensitive).
_OPTIONS: Final = _table(
    # The pool (CMAP)
    _Option("maxPoolSize", _integer(0)),
    _Option("minPoolSize", _integer(0)),
    _Option("maxConnecting", _integer(1)),
    _Option("maxIdleTimeMS", _milliseconds(meaning_of_zero="0: never idle")),
    _Option("waitQueueTimeoutMS", _milliseconds(meaning_of_zero="0: no limit")),
    # Timeouts
    _Option("timeoutMS", _milliseconds(meaning_of_zero="0: no limit")),
    _Option("connectTimeoutMS", _milliseconds(meaning_of_zero="0: no limit")),
    _Option("socketTimeoutMS", _milliseconds(meaning_of_zero="0: no limit")),
    _Option("serverSelectionTimeoutMS", _milliseconds()),
    _Option("heartbeatFrequencyMS", _milliseconds(minimum=500)),
    _Option("localThresholdMS", _milliseconds()),
    # Topology
    _Option("directConnection", _boolean),
    _Option("loadBalanced", _boolean),
    _Option("replicaSet", _nonempty("a replica set name")),
    _Option("srvMaxHosts", _integer(0)),
    _Option("srvServiceName", _nonempty("a service name")),
    _Option("srvAllowedHostsSuffix", _host_suffix),
    _Option("serverMonitoringMode", _choice("auto", "stream", "poll")),
    # The client
    _Option("appName", _app_name),
    _Option("compressors", _compressors),
    _Option("zlibCompressionLevel", _integer(-1, 9)),
    _Option("retryReads", _boolean),
    _Option("retryWrites", _boolean),
    _Option("maxAdaptiveRetries", _integer(0)),
    _Option("enableOverloadRetargeting", _no_retargeting),
    _Option("readPreference", _choice("primary", "primaryPreferred", "secondary",
                                      "secondaryPreferred", "nearest")),
    _Option("readPreferenceTags", _tag_set, repeats=True),
    _Option("maxStalenessSeconds", _max_staleness),
    # A bad read or write concern raises: going on without it would read or
    # acknowledge writes other than as asked (the Read and Write Concern spec
    # calls such a connection string invalid).
    _Option("readConcernLevel", _nonempty("a read concern level"), strict=True),
    _Option("w", _write_concern, strict=True),
    _Option("wTimeoutMS", _integer(0), strict=True),
    _Option("journal", _boolean, strict=True),
    _Option("fsync", _boolean, strict=True),  # PyMongo's, not the spec's
    _Option("uuidRepresentation", _choice("unspecified", "standard", "pythonLegacy",
                                          "javaLegacy", "csharpLegacy")),
    # Authentication
    _Option("authMechanism", _choice(*_MECHANISMS), strict=True),
    _Option("authSource", _nonempty("a database name"), strict=True),
    _Option("authMechanismProperties", _mechanism_properties, strict=True),
    # TLS
    _Option("tls", _boolean),
    _Option("ssl", _boolean),
    _Option("tlsInsecure", _boolean),
    _Option("tlsAllowInvalidCertificates", _boolean),
    _Option("tlsAllowInvalidHostnames", _boolean),
    _Option("tlsDisableOCSPEndpointCheck", _boolean),
    _Option("tlsDisableCertificateRevocationCheck", _boolean),
    _Option("tlsCAFile", _readable_file, strict=True),
    _Option("tlsCertificateKeyFile", _readable_file, strict=True),
    _Option("tlsCertificateKeyFilePassword", _text),
    _Option("tlsCRLFile", _readable_file, strict=True),
    # PyMongo's, not the spec's
    _Option("connect", _boolean),
    _Option("waitQueueMultiple", _integer(0)),
)

#: Each option's name as written in docs, by lower-case name.
OPTION_NAMES: Final = {key: option.name for key, option in _OPTIONS.items()}


class _Reader:
    """One connection string being read; it gathers the warnings to give."""

    def __init__(self, uri: str | None, keywords: Mapping[str, Any], *,
                 hosts: Sequence[str] = (), port: int = DEFAULT_PORT,
                 username: str | None = None, password: str | None = None,
                 srv_host_validator: Callable[[str], bool] | None = None) -> None:
        self.uri = uri
        self.srv_host_validator = srv_host_validator
        self.keywords = keywords
        self.hosts = hosts
        self.port = port
        self.username = username
        self.password = password
        self.secrets = (uri_secrets(uri) if uri is not None else ()) + tuple(
            str(value) for name, value in keywords.items() if looks_secret(name) and value) + (
            (password,) if password else ())
        self.warnings: list[str] = []
        #: Options by lower-case name: (name as written, value as written, converted).
        self.options: dict[str, tuple[str, str, Any]] = {}

    def read(self) -> ClientSettings:
        try:
            return self._read()
        except ConfigurationError as error:
            failure = type(error)(self.redact(str(error)))
        # Raised here, outside the handler, so that the unredacted error does
        # not ride along as __context__.
        raise failure

    def _read(self) -> ClientSettings:
        parts = _split(self.uri) if self.uri is not None else _Parts(False, None, "", "", "")
        username, password = _userinfo(parts.userinfo)
        if self.username is not None:
            username = self.username
        if self.password is not None:
            password = self.password
        hosts = _hosts(parts.hosts, srv=parts.srv, port=self.port) if self.uri else ()
        hosts = self._with_given_hosts(hosts, srv=parts.srv)
        database = _database(parts.database)
        self._read_options(parts.query, source=None)
        self._read_keywords()
        rule = None
        if parts.srv:
            rule = self._srv_host_rule(str(hosts[0][0]))
            hosts = self._seedlist(rule)
        elif self.srv_host_validator is not None:
            raise ConfigurationError("srv_host_validator is only for mongodb+srv:// "
                                     "connection strings")
        _check_combinations(self.options, hosts, srv=parts.srv)
        return _settings(self.options, hosts, database, username, password, rule)

    def _srv_host_rule(self, host: str) -> SrvHostRule:
        try:
            return SrvHostRule(host, suffix=self._value("srvallowedhostssuffix", None),
                               validator=self.srv_host_validator)
        except ValueError as error:
            raise ConfigurationError(str(error)) from None

    def _with_given_hosts(self, hosts: tuple[Address, ...], *, srv: bool) -> tuple[Address, ...]:
        """The connection string's hosts and those the Client was given beside
        it, each once."""
        given = tuple(address for text in self.hosts
                      for address in _hosts(text, srv=False, port=self.port, where=repr(text)))
        if srv and given:
            raise ConfigurationError(
                f"a mongodb+srv:// connection string takes no other host beside it "
                f"({', '.join(map(format_address, given))}): its SRV records name the hosts")
        merged = tuple(dict.fromkeys(hosts + given))
        if not merged:
            raise ConfigurationError("the client was given no host")
        return merged

    def warn(self, message: str) -> None:
        self.warnings.append(self.redact(message))

    def redact(self, text: str) -> str:
        return _hide(text, self.secrets)

    def _read_options(self, query: str, *, source: str | None) -> None:
        """Each ``name=value`` of ``query`` (the URI's, or a TXT record's when
        ``source`` names it) through the option table. Of an option given more
        than once the last counts, but for readPreferenceTags, which lists."""
        given: dict[str, list[tuple[str, str]]] = {}
        for name, value in _items(query, source):
            given.setdefault(name.lower(), []).append((name, value))
        unknown = []
        for key, occurrences in given.items():
            option = _OPTIONS.get(key)
            if source is not None and key not in _TXT_OPTIONS:
                raise ConfigurationError(
                    f"{source} sets {occurrences[0][0]}, but only authSource, replicaSet and "
                    "loadBalanced may come from DNS")
            if option is None:
                unknown.append(occurrences[-1])
            elif key in self.options:
                continue  # a TXT record's option the URI gives too: the URI's wins
            elif option.repeats:
                for name, value in occurrences:
                    self._add(option, name, value, source)
            else:
                name, value = occurrences[-1]
                if len(occurrences) > 1:
                    self.warn(f"connection string option {option.name} is given "
                              f"{len(occurrences)} times; the last, {name}={_shown(name, value)}, "
                              "is used")
                self._add(option, name, value, source)
        self._warn_unknown(unknown)

    def _add(self, option: _Option, name: str, value: str, source: str | None) -> None:
        shown = _shown(name, value)
        try:
            converted = option.convert(value)
        except _Rejected as rejected:
            where = f" (from {source})" if source else ""
            if option.strict:
                raise ConfigurationError(
                    f"connection string option {name}={shown}{where}: {rejected.reason}"
                ) from None
            if rejected.keep is None:
                self.warn(f"connection string option {name}={shown}{where} is ignored: "
                          f"{rejected.reason}")
                return
            self.warn(f"connection string option {name}={shown}{where}: {rejected.reason}")
            converted = rejected.keep
        key = option.name.lower()
        if option.repeats:
            converted = (*self._value(key, ()), converted)
        self.options[key] = (name, value, converted)

    def _read_keywords(self) -> None:
        """The options given as keyword arguments, each replacing the
        connection string's: a bad value raises (it is code, not
        configuration), an unknown name is a TypeError naming it."""
        for name, value in self.keywords.items():
            option = _OPTIONS.get(name.lower()) if isinstance(name, str) else None
            if option is None:
                near = difflib.get_close_matches(str(name).lower(), list(_OPTIONS), n=3,
                                                 cutoff=0.6)
                hint = (f"; did you mean {' or '.join(_OPTIONS[n].name for n in near)}?"
                        if near else "")
                raise OptionTypeError(
                    f"greenpool.Client got an unexpected keyword argument {name!r}: "
                    f"not an option of PyMongo's MongoClient nor of greenpool's{hint}")
            if value is None:
                continue
            shown = _shown(name, str(value)) if isinstance(value, str) else (
                "'***'" if looks_secret(name) else repr(value))
            texts = _keyword_texts(option, value)
            if texts is None:
                raise OptionTypeError(
                    f"keyword argument {name}={shown}: expected a str, a number or a bool"
                    + (", or a list of them" if option.repeats else ""))
            converted: Any = ()
            for text in texts:
                try:
                    item = option.convert(text)
                except _Rejected as rejected:
                    error = (OptionTypeError if rejected.wrong_type and not isinstance(value, str)
                             else ConfigurationError)
                    raise error(f"keyword argument {name}={shown}: {rejected.reason}") from None
                if not _same_kind(value, item):
                    raise OptionTypeError(
                        f"keyword argument {name}={shown}: {option.name} takes no "
                        f"{type(value).__name__}")
                converted = (*converted, item) if option.repeats else item
            self.options[option.name.lower()] = (name, ",".join(texts), converted)

    def _warn_unknown(self, unknown: list[tuple[str, str]]) -> None:
        for index, (name, value) in enumerate(unknown):
            if index == _UNKNOWN_OPTION_WARNINGS:
                self.warn(f"{len(unknown) - index} more unknown options in the connection "
                          "string are ignored too")
                return
            if not name:
                self.warn(f"connection string option ={_shown(name, value)} has no name "
                          "and is ignored")
                continue
            near = difflib.get_close_matches(name.lower(), list(_OPTIONS), n=3, cutoff=0.6)
            hint = (f"; did you mean {' or '.join(_OPTIONS[n].name for n in near)}?"
                    if near else "")
            self.warn(f"connection string option {name}={_shown(name, value)} is not an "
                      f"option greenpool knows, and is ignored{hint}")

    def _seedlist(self, rule: SrvHostRule) -> tuple[Address, ...]:
        """The hosts of a mongodb+srv:// connection string, from DNS; a TXT
        record's options join the URI's (which win). connectTimeoutMS bounds
        both lookups together."""
        service = self._value("srvservicename", "mongodb")
        connect_ms = self._value("connecttimeoutms", DEFAULT_CONNECT_TIMEOUT * 1000)
        timeout = connect_ms / 1000 if connect_ms else None
        deadline = None if timeout is None else time.monotonic() + timeout
        host = rule.host
        name = f"_{service}._tcp.{host}"
        records = dns.srv_records(name, timeout=timeout, deadline=deadline)
        targets = tuple((target.lower(), port) for target, port in records)
        for target, _ in targets:
            try:
                rule.check(target)
            except SrvHostRefused as refused:
                raise ConfigurationError(str(refused)) from None
        texts = dns.txt_records(host, timeout=timeout, deadline=deadline)
        if len(texts) > 1:
            raise ConfigurationError(
                f"{host} has {len(texts)} TXT records; a mongodb+srv:// host may have one")
        if texts:
            self._read_options(texts[0], source=f"the TXT record of {host}")
        limit = self._value("srvmaxhosts", 0)
        if 0 < limit < len(targets):
            targets = tuple(random.sample(targets, limit))
        return targets

    def _value(self, key: str, default: Any) -> Any:
        return self.options[key][2] if key in self.options else default


def _keyword_texts(option: _Option, value: object) -> list[str] | None:
    """A keyword argument's value as the connection string would write it
    (one text per occurrence); None for a value of no such form."""
    if option.repeats and isinstance(value, list | tuple):
        texts = [_keyword_text(item) for item in value]
        return None if None in texts else [t for t in texts if t is not None]
    text = _keyword_text(value)
    return None if text is None else [text]


def _keyword_text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, Mapping):  # a tag set, authMechanismProperties
        items = [(key, _keyword_text(item)) for key, item in value.items()]
        if any(text is None for _, text in items):
            return None
        return ",".join(f"{key}:{text}" for key, text in items)
    if isinstance(value, list | tuple):  # compressors
        texts = [_keyword_text(item) for item in value]
        return None if None in texts else ",".join(t for t in texts if t is not None)
    return None


def _same_kind(given: object, converted: object) -> bool:
    """Whether a keyword's value means what its conversion made of it: a bool
    a bool, a number a number (``w=True`` is not a tag set named "true")."""
    if isinstance(given, bool):
        return isinstance(converted, bool)
    if isinstance(given, int | float):
        return isinstance(converted, int | float) and not isinstance(converted, bool)
    return True


def _items(query: str, source: str | None) -> list[tuple[str, str]]:
    """The ``name=value`` items of ``query``, decoded, in order."""
    if not query:
        return []
    where = source or "the connection string"
    if "&" in query and ";" in query:
        raise InvalidURIError(f"{where} separates its options with both '&' and ';': use one")
    items = []
    for item in query.split("&" if "&" in query else ";"):
        name, equals, value = item.partition("=")
        if not item:
            raise InvalidURIError(
                f"{where} has an empty option (two separators in a row, or one at the end)")
        if not equals:
            raise InvalidURIError(f"{_named_option(name, source)} has no value: "
                                  f"write {unquote_plus(name)}=<value>")
        if "=" in value:
            raise InvalidURIError(f"{_named_option(name, source)} has more than one '=': "
                                  "percent-encode '=' in a value as %3D")
        items.append((unquote_plus(name), unquote_plus(value)))
    return items


def _named_option(name: str, source: str | None) -> str:
    return f"option {unquote_plus(name)!r} in {source or 'the connection string'}"


def _shown(name: str, value: str) -> str:
    """``value`` as a message may quote it: secrets as ``'***'``."""
    if looks_secret(name):
        return "'***'"
    if name.lower() == "authmechanismproperties":
        return repr(",".join(_hide_property(item) for item in value.split(",")))
    return repr(value)


# --- 5. the rules across options ------------------------------------------------------


def _check_combinations(
    options: Mapping[str, tuple[str, str, Any]], hosts: tuple[Address, ...], *, srv: bool
) -> None:
    def given(key: str) -> bool:
        return key in options

    def value(key: str, default: Any = None) -> Any:
        return options[key][2] if key in options else default

    def written(key: str) -> str:
        name, text, _ = options[key]
        return f"{name}={text}"

    def fail(message: str) -> NoReturn:
        raise ConfigurationError(message + (_SRV_HINT if srv else ""))

    if given("tls") and given("ssl") and value("tls") != value("ssl"):
        fail(f"{written('tls')} and {written('ssl')} conflict (ssl is another name for tls)")
    tls = value("tls", value("ssl"))
    implying = [options[key][0] for key in _TLS_IMPLYING if value(key)]
    if tls is False and implying:
        fail(f"tls=false conflicts with {', '.join(implying)}: set tls=true or remove them")
    for first, second in _TLS_CONFLICTS:
        if given(first) and given(second):
            fail(f"{written(first)} and {written(second)} cannot both be given: "
                 f"{options[first][0]} decides what {options[second][0]} would")
    many = len(hosts) > 1
    listed = ",".join(format_address(h) for h in hosts)
    where = "its SRV records give" if srv else "the connection string names"
    if value("directconnection") and (many or srv):
        fail(f"{written('directconnection')} connects to one host, and "
             + (f"{where} {len(hosts)}: {listed}" if not srv
                else "a mongodb+srv:// connection string gets its hosts from DNS"))
    if value("loadbalanced"):
        if value("srvmaxhosts", 0) > 0:
            fail(f"{written('srvmaxhosts')} cannot be given with loadBalanced=true "
                 "(srvMaxHosts=0 can)")
        if many:
            fail(f"loadBalanced=true allows one host, and {where} {len(hosts)}: {listed}")
        for key in ("replicaset", "directconnection"):
            if given(key) and (key == "replicaset" or value(key)):
                fail(f"{written(key)} cannot be given with loadBalanced=true")
    for key in ("srvservicename", "srvmaxhosts", "srvallowedhostssuffix"):
        if given(key) and not srv:
            fail(f"{written(key)} is only for mongodb+srv:// connection strings")
    if value("srvmaxhosts", 0) > 0 and given("replicaset"):
        fail(f"{written('srvmaxhosts')} cannot be given with {written('replicaset')} "
             "(srvMaxHosts=0 can)")
    if value("w") == 0 and value("journal"):
        fail(f"{written('w')} and {written('journal')} conflict: an unacknowledged write "
             "(w=0) cannot wait for the journal")
    if value("w") == 0 and value("fsync"):
        fail(f"{written('w')} and {written('fsync')} conflict: an unacknowledged write "
             "(w=0) cannot wait for the disk")
    if given("journal") and given("fsync"):
        fail(f"{written('journal')} and {written('fsync')}: give one of them, not both")
    mode = value("readpreference", "primary")
    tags = [t for t in value("readpreferencetags", ()) if t]
    if mode == "primary" and (tags or value("maxstalenessseconds", -1) != -1):
        extra = "readPreferenceTags" if tags else written("maxstalenessseconds")
        fail(f"readPreference=primary takes no {extra}: a primary is chosen by its role "
             "alone; use primaryPreferred or another mode to pass them")


_SRV_HINT: Final = (
    " (for mongodb+srv:// the hosts come from DNS SRV records, and authSource,"
    " replicaSet and loadBalanced may come from a TXT record)"
)
# Options that turn TLS on when tls is not given, as PyMongo's client does.
_TLS_IMPLYING: Final = ("tlscafile", "tlscertificatekeyfile", "tlscertificatekeyfilepassword",
                        "tlscrlfile")
# Pairs the URI Options spec forbids together: the first sets what the second would.
_TLS_CONFLICTS: Final = (
    ("tlsinsecure", "tlsallowinvalidcertificates"),
    ("tlsinsecure", "tlsallowinvalidhostnames"),
    ("tlsinsecure", "tlsdisableocspendpointcheck"),
    ("tlsinsecure", "tlsdisablecertificaterevocationcheck"),
    ("tlsallowinvalidcertificates", "tlsdisableocspendpointcheck"),
    ("tlsallowinvalidcertificates", "tlsdisablecertificaterevocationcheck"),
    ("tlsdisablecertificaterevocationcheck", "tlsdisableocspendpointcheck"),
)


# --- 6. the settings ------------------------------------------------------------------

# Mechanisms whose users live outside MongoDB: their authSource is "$external".
_EXTERNAL_MECHANISMS: Final = frozenset({"GSSAPI", "MONGODB-X509", "MONGODB-AWS",
                                         "MONGODB-OIDC"})
_PASSWORD_MECHANISMS: Final = frozenset({"SCRAM-SHA-1", "SCRAM-SHA-256", "PLAIN"})
_POOL_OPTIONS: Final = ("maxpoolsize", "minpoolsize", "maxconnecting", "maxidletimems",
                        "waitqueuetimeoutms", "loadbalanced")


def _settings(
    options: Mapping[str, tuple[str, str, Any]], hosts: tuple[Address, ...],
    database: str | None, username: str | None, password: str | None,
    srv_rule: SrvHostRule | None,
) -> ClientSettings:
    values = {key: converted for key, (_, _, converted) in options.items()}
    take = values.pop
    take("srvallowedhostssuffix", None)  # in srv_rule
    insecure = take("tlsinsecure", False)
    tls = take("tls", take("ssl", None))
    if tls is None:
        tls = srv_rule is not None or any(values.get(key) for key in _TLS_IMPLYING)
    return ClientSettings(
        hosts=hosts,
        pool=PoolOptions({_OPTIONS[key].name: take(key) for key in _POOL_OPTIONS if key in values}),
        credentials=_credentials(values, username, password, database),
        database=database,
        app_name=take("appname", None),
        compressors=take("compressors", ()),
        zlib_compression_level=take("zlibcompressionlevel", -1),
        connect_timeout=_seconds(take("connecttimeoutms", DEFAULT_CONNECT_TIMEOUT * 1000)),
        socket_timeout=_seconds(take("sockettimeoutms", 0)),
        timeout=_ms_to_seconds(take("timeoutms", None)),
        tls=tls,
        tls_ca_file=take("tlscafile", None),
        tls_certificate_key_file=take("tlscertificatekeyfile", None),
        tls_certificate_key_file_password=_secret(take("tlscertificatekeyfilepassword", None)),
        tls_crl_file=take("tlscrlfile", None),
        tls_allow_invalid_certificates=take("tlsallowinvalidcertificates", insecure),
        tls_allow_invalid_hostnames=take("tlsallowinvalidhostnames", insecure),
        tls_insecure=insecure,
        heartbeat_frequency=take("heartbeatfrequencyms", 10_000) / 1000,
        server_monitoring_mode=take("servermonitoringmode", "auto"),
        server_selection_timeout=take("serverselectiontimeoutms", 30_000) / 1000,
        local_threshold=take("localthresholdms", 15) / 1000,
        direct_connection=take("directconnection", False),
        replica_set=take("replicaset", None),
        srv_host=None if srv_rule is None else srv_rule.host,
        srv_host_rule=srv_rule,
        srv_max_hosts=take("srvmaxhosts", 0),
        srv_service_name=take("srvservicename", "mongodb"),
        retry_reads=take("retryreads", True),
        retry_writes=take("retrywrites", True),
        max_adaptive_retries=take("maxadaptiveretries", DEFAULT_MAX_ADAPTIVE_RETRIES),
        read_preference=take("readpreference", "primary"),
        read_preference_tags=tuple(map(MappingProxyType, take("readpreferencetags", ()))),
        max_staleness_seconds=take("maxstalenessseconds", -1),
        extra=MappingProxyType({key: _conceal(key, value) for key, value in values.items()}),
    )


def _seconds(milliseconds: float) -> float | None:
    """Milliseconds as seconds; 0 means no limit (None)."""
    return milliseconds / 1000 if milliseconds else None


def _ms_to_seconds(milliseconds: float | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1000


def _credentials(values: dict[str, Any], username: str | None, password: str | None,
                 database: str | None) -> Credentials | None:
    mechanism: str | None = values.get("authmechanism")
    if username is None and mechanism is None:
        return None  # authSource or authMechanismProperties alone stay in extra
    values.pop("authmechanism", None)
    if mechanism == "DEFAULT":
        mechanism = None  # the same as naming none: negotiate
    if not username and (mechanism is None or mechanism in _PASSWORD_MECHANISMS):
        raise ConfigurationError(
            f"authMechanism={mechanism or 'DEFAULT'} needs a user name in the connection string")
    if password and mechanism in ("MONGODB-X509", "MONGODB-OIDC"):
        raise ConfigurationError(f"authMechanism={mechanism} takes no password")
    source = values.pop("authsource", None) or _default_auth_source(mechanism, database)
    properties = values.pop("authmechanismproperties", None) or {}
    return Credentials(
        username=username,
        password=_secret(password or None),
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


# --- redaction ------------------------------------------------------------------------


def redact_uri(uri: str) -> str:
    """``uri`` as it may be shown: the password, and the values of every
    secret :func:`uri_secrets` finds, replaced by ``***``. Every place
    greenpool shows a connection string goes through this.

    >>> redact_uri("mongodb://ann:s3cret@db.example.com/?tlsCertificateKeyFilePassword=x&w=1")
    'mongodb://ann:***@db.example.com/?tlsCertificateKeyFilePassword=***&w=1'
    >>> redact_uri("mongodb://ann:Sup3r/x@db/?authMechanismProperties=AWS_SESSION_TOKEN:t0k")
    'mongodb://ann:***@db/?authMechanismProperties=AWS_SESSION_TOKEN:***'
    >>> redact_uri("mongodb://db:27017/?appName=shop@eu")
    'mongodb://db:27017/?appName=shop@eu'
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
    return _hide(f"{scheme}://{head}{question}{query}", uri_secrets(uri))


def uri_secrets(uri: str) -> tuple[str, ...]:
    """Every secret in the connection string ``uri``, longest first: the
    password (as written, decoded, and the pieces an unescaped ``/`` or ``?``
    would cut it into), the values of options that hold secrets
    (tlsCertificateKeyFilePassword, anything named like a password, secret
    or token) and of authMechanismProperties other than the ones shown
    (AWS_SESSION_TOKEN among them)."""
    rest = uri.partition("://")[2]
    at = _userinfo_end(rest)
    password = rest[:at].partition(":")[2] if at != -1 else ""
    candidates = {password, unquote_plus(password), *re.split("[/?#]", password)}
    for name, value in _raw_options(rest[at + 1:].partition("?")[2]):
        for text in (value, unquote_plus(value)):
            candidates.update(_secret_values(unquote_plus(name), text))
    # Longest first, so that a secret containing another is hidden whole.
    return tuple(sorted((s for s in candidates if s), key=len, reverse=True))


def _hide(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret in text:  # the common case, and much cheaper than the search
            # Whole words only: hiding "pass" inside "password" would tell
            # the reader what the password is.
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    return text


def _raw_options(query: str) -> Iterable[tuple[str, str]]:
    for item in re.split("[&;]", query):
        name, _, value = item.partition("=")
        if name:
            yield name, value


def _secret_values(name: str, value: str) -> Iterable[str]:
    if looks_secret(name):
        yield value
    elif name.lower() == "authmechanismproperties":
        for item in value.split(","):
            key, _, secret = item.partition(":")
            if secret_property(key):
                yield secret


def _redact_option(item: str) -> str:
    name, equals, value = item.partition("=")
    if not equals:
        return item
    if looks_secret(unquote_plus(name)):
        return f"{name}=***"
    if unquote_plus(name).lower() != "authmechanismproperties":
        return item
    return f"{name}={','.join(_hide_property(part) for part in value.split(','))}"


def _hide_property(item: str) -> str:
    key, colon, _ = item.partition(":")
    if not colon:
        return "***"  # malformed: it may be a secret cut short
    return f"{key}:***" if secret_property(key) else item


def secret_property(key: str) -> bool:
    """Whether the authMechanismProperties value under ``key`` is secret:
    all but the ones greenpool shows (AWS_SESSION_TOKEN is secret)."""
    return looks_secret(key) or unquote_plus(key).upper() not in _SHOWN_MECHANISM_PROPERTIES


def looks_secret(name: str) -> bool:
    """Whether an option named ``name`` holds a secret: by its name, so that a
    misspelt password option is hidden too."""
    lowered = name.lower()
    return any(word in lowered for word in ("pass", "pasw", "pwd", "secret", "token"))
