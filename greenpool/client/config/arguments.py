"""A Client's constructor arguments, taken as PyMongo's MongoClient takes them.

``Client(host=None, port=None, document_class=None, tz_aware=None, connect=None,
type_registry=None, **kwargs)``, as :class:`pymongo.MongoClient`:

* ``host``: a connection string, a host (``"db1"``, ``"db1:27018"``,
  ``"[::1]:27019"``, ``"db1,db2"``), or a list of them with at most one
  connection string (an item with a ``/`` is one); None: ``localhost``.
  ``port`` is every host's port where none is written (the connection
  string's hosts too); None: 27017;
* keyword arguments, by name in any case (as PyMongo's): the connection
  string's options (``maxPoolSize=20``, ``readPreference="secondary"``),
  which win over the string's; PyMongo's codec keywords; and PyMongo's
  keyword-only options, each acting as PyMongo's does (:data:`OBJECTS`), or
  refused with a message that says why (:data:`REFUSED`).

A value of the wrong type raises :class:`~greenpool.OptionTypeError` (a
``TypeError`` too, as PyMongo raises one); a bad value a
:class:`~greenpool.ConfigurationError` (a ``ValueError`` too); both name the
option and the value.

Rules. No I/O of its own (a ``mongodb+srv://`` string's DNS lookups are
:mod:`~greenpool.client.config.uri`'s); the Client acts on the result.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pymongo import monitoring as _m
from pymongo.driver_info import DriverInfo
from pymongo.read_preferences import _ServerMode
from pymongo.server_api import ServerApi

from greenpool.address import DEFAULT_PORT
from greenpool.client.config import codecs
from greenpool.client.config.settings import ClientSettings
from greenpool.client.config.tracing import OFF, TracingOptions, read_tracing
from greenpool.client.config.uri import OPTION_NAMES, client_settings
from greenpool.errors import ConfigurationError, OptionTypeError

__all__ = ["OBJECTS", "REFUSED", "ClientArguments", "api_fields", "read_arguments"]

#: PyMongo's keyword-only options that take an object (no connection string
#: option has them), by lower-case name.
OBJECTS: Final = ("event_listeners", "read_preference", "server_api", "driver",
                  "server_selector", "srv_host_validator", "username", "password", "tracing")

#: PyMongo's snake_case spellings of connection string options.
_SPELLINGS: Final = {
    "max_adaptive_retries": "maxAdaptiveRetries",
    "enable_overload_retargeting": "enableOverloadRetargeting",
}

#: PyMongo's options greenpool.Client cannot act on, by lower-case name, and why.
REFUSED: Final = {
    "auto_encryption_opts": (
        "client-side field level encryption is not in greenpool.Client; "
        "greenpool.pymongo.MongoClient (PyMongo's client on greenpool's pool) has it"),
    "authoidcallowedhosts": (
        "greenpool.Client authenticates with SCRAM-SHA-256 and SCRAM-SHA-1 only, not "
        "MONGODB-OIDC; "
        "greenpool.pymongo.MongoClient has OIDC"),
}

_LISTENER_TYPES: Final = (
    _m.CommandListener, _m.ConnectionPoolListener, _m.ServerListener,
    _m.ServerHeartbeatListener, _m.TopologyListener,
)
_CODEC_NAMES: Final = {name.lower(): name for name in codecs.KEYWORDS}


@dataclass(frozen=True)
class ClientArguments:
    """What a Client was given, checked: the settings (connection string and
    keyword options together) and the objects no connection string holds."""

    settings: ClientSettings
    codec_keywords: Mapping[str, Any]
    event_listeners: tuple[object, ...] = ()
    server_api: ServerApi | None = None
    driver: DriverInfo | None = None
    server_selector: Callable[[list[Any]], list[Any]] | None = None
    #: OpenTelemetry tracing, from ``tracing=`` and the environment.
    tracing: TracingOptions = OFF

    @property
    def connect(self) -> bool:
        """Whether to start monitoring at once (False: at the first operation)."""
        return bool(self.settings.extra.get("connect", True))


def read_arguments(host: object, port: object, keywords: Mapping[str, Any]) -> ClientArguments:
    """Check and sort a Client's arguments (the positional ones after ``port``
    arrive in ``keywords`` under their names, None when not given)."""
    uri, hosts = _hosts(host)
    if port is None:
        port = DEFAULT_PORT
    if isinstance(port, bool) or not isinstance(port, int):
        raise OptionTypeError(f"port must be an int, not {type(port).__name__}: {port!r}")
    if not 0 < port < 65536:
        raise ConfigurationError(f"port={port}: expected a port number from 1 to 65535")
    codec: dict[str, Any] = {}
    objects: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for name, value in keywords.items():
        key = name.lower()
        if key in REFUSED:
            if value is not None:
                raise ConfigurationError(f"{name}: {REFUSED[key]}")
        elif key in _CODEC_NAMES:
            if value is not None:
                codec[_CODEC_NAMES[key]] = value
        elif key in OBJECTS:
            objects[key] = _checked_object(key, value)
        elif key in _SPELLINGS:
            options[_SPELLINGS[key]] = value
        elif key in OPTION_NAMES:
            options[name] = value
        else:
            raise _unknown(name)
    preference = objects.pop("read_preference", None)
    if preference is not None:
        options.update(_preference_options(preference))
    objects["tracing"] = read_tracing(objects.pop("tracing", None), os.environ)
    settings = client_settings(uri, options, hosts=hosts, port=port,
                               username=objects.pop("username", None),
                               password=objects.pop("password", None),
                               srv_host_validator=objects.pop("srv_host_validator", None))
    return ClientArguments(settings, codec, **objects)


def _hosts(host: object) -> tuple[str | None, tuple[str, ...]]:
    """``host`` as (the one connection string, the other hosts)."""
    if host is None:
        host = "localhost"
    entities = [host] if isinstance(host, str) else host
    if not isinstance(entities, Sequence) or not all(isinstance(e, str) for e in entities):
        raise OptionTypeError(
            f"host must be a str or a list of str (connection strings or 'host:port'), "
            f"not {host!r}")
    uris = [entity for entity in entities if "/" in entity]
    if len(uris) > 1:
        raise ConfigurationError(
            f"host holds {len(uris)} connection strings; give one, with any other hosts "
            "beside it as 'host:port'")
    return (uris[0] if uris else None), tuple(e for e in entities if "/" not in e)


def _checked_object(key: str, value: Any) -> Any:
    """A keyword-only option's value, checked as PyMongo checks its type."""
    if key == "tracing":
        return value  # greenpool.client.config.tracing checks it, with the environment
    if key == "event_listeners":
        listeners = tuple(value or ())
        for listener in listeners:
            if not isinstance(listener, _LISTENER_TYPES):
                raise OptionTypeError(
                    f"event_listeners must be PyMongo listeners (CommandListener, "
                    f"ConnectionPoolListener, ServerListener, ServerHeartbeatListener, "
                    f"TopologyListener), not {listener!r}")
        return listeners
    wanted: dict[str, tuple[type, str]] = {
        "read_preference": (_ServerMode, "a PyMongo read preference such as "
                            "pymongo.ReadPreference.SECONDARY (a mode name goes in "
                            "readPreference=)"),
        "server_api": (ServerApi, "a pymongo.server_api.ServerApi"),
        "driver": (DriverInfo, "a pymongo.driver_info.DriverInfo"),
        "username": (str, "a str"),
        "password": (str, "a str"),
    }
    if value is None:
        return None
    if key in ("server_selector", "srv_host_validator"):
        if not callable(value):
            raise OptionTypeError(f"{key} must be callable, not {value!r}")
        return value
    kind, text = wanted[key]
    if not isinstance(value, kind):
        shown = "'***'" if key == "password" else repr(value)
        raise OptionTypeError(f"{key} must be {text}, not {type(value).__name__}: {shown}")
    return value


def _preference_options(preference: _ServerMode) -> dict[str, Any]:
    """A read preference object as the connection string options that say the same."""
    document = preference.document
    options: dict[str, Any] = {"readPreference": document["mode"]}
    tags = document.get("tags")
    if tags:
        options["readPreferenceTags"] = [dict(tag_set) for tag_set in tags]
    staleness = document.get("maxStalenessSeconds")
    if staleness is not None:
        options["maxStalenessSeconds"] = staleness
    return options


def api_fields(server_api: ServerApi) -> tuple[tuple[str, object], ...]:
    """The Stable API's fields for a command: ``apiVersion``, and
    ``apiStrict`` and ``apiDeprecationErrors`` where the user gave them (the
    Versioned API spec: even when equal to the server's default)."""
    fields: list[tuple[str, object]] = [("apiVersion", server_api.version)]
    if server_api.strict is not None:
        fields.append(("apiStrict", server_api.strict))
    if server_api.deprecation_errors is not None:
        fields.append(("apiDeprecationErrors", server_api.deprecation_errors))
    return tuple(fields)


def _unknown(name: str) -> OptionTypeError:
    known = [*OPTION_NAMES.values(), *codecs.KEYWORDS, *OBJECTS, *_SPELLINGS,
             "acquire_sites", "long_hold_threshold"]
    by_key = {option.lower(): option for option in known}
    near = difflib.get_close_matches(name.lower(), list(by_key), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(by_key[n] for n in near)}?" if near else ""
    return OptionTypeError(
        f"greenpool.Client got an unexpected keyword argument {name!r}: not an option of "
        f"PyMongo's MongoClient nor of greenpool's{hint}")
