"""The MongoDB handshake without sockets: the hello a new connection sends, and
the checks its reply must pass.

A connection's first command is a hello that tells the server who the client
is (``client``: driver, operating system, platform, application name), which
compressors it speaks, and (with credentials) how it wants to authenticate::

    command = hello_command(app_name="billing", compressors=["zstd"], load_balanced=False)
    ... send it: OP_QUERY legacy hello, or OP_MSG hello when load-balanced ...
    check_hello_reply(reply, address, load_balanced=False)

Before the reply, a driver does not know which wire protocol the server
speaks, so the first hello goes as a legacy ``isMaster`` over OP_QUERY, which
every server answers. In load-balanced mode the Load Balancer specification
requires OP_MSG for every step of the handshake, so the command is ``hello``.
``helloOk: true`` asks the server to say whether it knows ``hello``, which a
monitor uses for the connection's later checks.
"""

from __future__ import annotations

import datetime
import functools
import math
import os
import platform
from collections.abc import Iterable, Mapping
from typing import Any

import bson
import gevent
from bson.objectid import ObjectId
from pymongo import common
from pymongo.errors import ConfigurationError as PyMongoConfigurationError

from greenpool._version import __version__
from greenpool.address import Address, format_address, parse_address
from greenpool.errors import ConfigurationError, ProtocolError

__all__ = [
    "LOAD_BALANCER_UNSUPPORTED",
    "MAX_APP_NAME_SIZE",
    "MAX_METADATA_SIZE",
    "MAX_WIRE_VERSION",
    "MIN_SERVER_VERSION",
    "MIN_WIRE_VERSION",
    "check_app_name",
    "check_hello_fields",
    "check_hello_reply",
    "client_metadata",
    "faas_platforms",
    "hello_command",
    "trim_metadata",
]

#: The handshake spec's limit on the encoded ``client`` document, in bytes.
MAX_METADATA_SIZE = 512
#: The handshake spec's limit on ``client.application.name``, in UTF-8 bytes.
MAX_APP_NAME_SIZE = 128
#: The wire versions greenpool speaks: the same range as the PyMongo it builds on.
MIN_WIRE_VERSION: int = common.MIN_SUPPORTED_WIRE_VERSION
MAX_WIRE_VERSION: int = common.MAX_SUPPORTED_WIRE_VERSION
#: The oldest MongoDB release that speaks MIN_WIRE_VERSION.
MIN_SERVER_VERSION: str = common.MIN_SUPPORTED_SERVER_VERSION

#: The Load Balancer spec's exact message for a hello reply without ``serviceId``.
LOAD_BALANCER_UNSUPPORTED = (
    "Driver attempted to initialize in load balancing mode, "
    "but the server does not support this mode."
)


def check_app_name(app_name: str | None) -> None:
    """Refuse an application name the server would refuse (over 128 UTF-8 bytes)."""
    if app_name is None:
        return
    if not isinstance(app_name, str):
        raise ConfigurationError(f"appName must be a string, not {type(app_name).__name__}")
    size = len(app_name.encode())
    if size > MAX_APP_NAME_SIZE:
        raise ConfigurationError(
            f"appName is {size} bytes in UTF-8; the limit is {MAX_APP_NAME_SIZE}"
        )


@functools.cache
def _os_fields() -> dict[str, str]:
    return {
        "type": platform.system() or "unknown",
        "name": _os_name(),
        "architecture": platform.machine() or "unknown",
        "version": platform.release() or "unknown",
    }


def _os_name() -> str:
    system = platform.system()
    if system == "Linux":
        try:
            release = platform.freedesktop_os_release()
        except OSError:  # no /etc/os-release (a minimal container)
            return system
        return release.get("PRETTY_NAME") or release.get("NAME") or system
    if system == "Darwin":
        return "macOS"
    return system or "unknown"


@functools.cache
def _platform() -> str:
    # The interpreter first: truncation cuts from the end of this string.
    return (
        f"{platform.python_implementation()} {platform.python_version()}; "
        f"gevent {gevent.__version__}"
    )


def client_metadata(app_name: str | None = None,
                    driver: tuple[str | None, str | None, str | None] | None = None,
                    ) -> dict[str, Any]:
    """The handshake's ``client`` document, within :data:`MAX_METADATA_SIZE`;
    a wrapping library's ``driver`` ``(name, version, platform)`` joins
    greenpool's with ``|``, as the handshake spec says.

    >>> sorted(client_metadata("billing"))
    ['application', 'driver', 'os', 'platform']
    """
    check_app_name(app_name)
    metadata: dict[str, Any] = {}
    if app_name is not None:
        metadata["application"] = {"name": app_name}
    metadata["driver"] = {"name": "greenpool", "version": __version__}
    metadata["os"] = dict(_os_fields())
    metadata["platform"] = _platform()
    if driver is not None:
        name, version, platform_text = driver
        for field, key, value in (("driver", "name", name), ("driver", "version", version)):
            if value:
                metadata[field][key] = f"{metadata[field][key]}|{value}"
        if platform_text:
            metadata["platform"] = f"{metadata['platform']}|{platform_text}"
    return trim_metadata(metadata)


def faas_platforms(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The function-as-a-service platforms the environment (``os.environ`` by
    default) says the process runs on, by the handshake spec's names and
    rules for ``client.env``: ``aws.lambda`` (``AWS_EXECUTION_ENV`` starting
    with ``AWS_Lambda_``, or ``AWS_LAMBDA_RUNTIME_API``), ``azure.func``
    (``FUNCTIONS_WORKER_RUNTIME``), ``gcp.func`` (``K_SERVICE`` or
    ``FUNCTION_NAME``) and ``vercel`` (``VERCEL``); a variable counts when
    it is not empty.

    >>> faas_platforms({"AWS_EXECUTION_ENV": "AWS_Lambda_python3.12"})
    ('aws.lambda',)
    """
    env = os.environ if environ is None else environ
    found = {
        "aws.lambda": (env.get("AWS_EXECUTION_ENV", "").startswith("AWS_Lambda_")
                       or bool(env.get("AWS_LAMBDA_RUNTIME_API"))),
        "azure.func": bool(env.get("FUNCTIONS_WORKER_RUNTIME")),
        "gcp.func": bool(env.get("K_SERVICE") or env.get("FUNCTION_NAME")),
        "vercel": bool(env.get("VERCEL")),
    }
    return tuple(name for name, present in found.items() if present)


def _size(document: Mapping[str, Any]) -> int:
    return len(bson.encode(document))


def trim_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Shrink a ``client`` document to :data:`MAX_METADATA_SIZE` the way the
    handshake spec orders it, stopping as soon as it fits:

    1. drop ``env``'s fields except ``env.name``;
    2. drop ``os``'s fields except ``os.type``;
    3. drop ``env``;
    4. truncate ``platform`` (whole UTF-8 characters only).

    ``driver`` and ``application`` are never trimmed (the application name is
    limited to 128 bytes instead). Returns a new document; ``metadata`` is
    not changed.
    """
    trimmed = dict(metadata)
    steps = (_env_name_only, _os_type_only, _without_env)
    for step in steps:
        if _size(trimmed) <= MAX_METADATA_SIZE:
            return trimmed
        trimmed = step(trimmed)
    overflow = _size(trimmed) - MAX_METADATA_SIZE
    if overflow > 0 and "platform" in trimmed:
        trimmed["platform"] = _cut_utf8(trimmed["platform"], overflow)
    return trimmed


def _env_name_only(metadata: dict[str, Any]) -> dict[str, Any]:
    env = metadata.get("env")
    if isinstance(env, Mapping):
        metadata["env"] = {key: env[key] for key in ("name",) if key in env}
    return metadata


def _os_type_only(metadata: dict[str, Any]) -> dict[str, Any]:
    os_fields = metadata.get("os")
    if isinstance(os_fields, Mapping):
        metadata["os"] = {key: os_fields[key] for key in ("type",) if key in os_fields}
    return metadata


def _without_env(metadata: dict[str, Any]) -> dict[str, Any]:
    metadata.pop("env", None)
    return metadata


def _cut_utf8(text: str, overflow: int) -> str:
    data = text.encode()
    return data[: max(len(data) - overflow, 0)].decode(errors="ignore")


def hello_command(
    *,
    app_name: str | None = None,
    compressors: Iterable[str] = (),
    load_balanced: bool = False,
    auth_fields: Mapping[str, Any] | None = None,
    driver: tuple[str | None, str | None, str | None] | None = None,
    server_api: Iterable[tuple[str, object]] = (),
) -> dict[str, Any]:
    """The initial handshake command for a new connection.

    ``isMaster`` (the legacy hello, for OP_QUERY) unless ``load_balanced``,
    which needs ``hello`` over OP_MSG and adds ``loadBalanced: true``;
    ``backpressure: true`` tells the server greenpool backs off from its
    overload errors (the Client Backpressure spec).
    ``compressors`` are the ones the client offers, in order of preference
    (``compression`` is left out when there are none);
    ``auth_fields`` come from :func:`greenpool.wire.auth.handshake_fields`
    (``saslSupportedMechs``, ``speculativeAuthenticate``). With ``server_api``
    (the Stable API's fields) it is ``hello`` with them, for OP_MSG.
    """
    api = dict(server_api)
    name = "hello" if load_balanced or api else "isMaster"
    command: dict[str, Any] = {name: 1, "helloOk": True}
    command.update(api)
    command["client"] = client_metadata(app_name, driver)
    # The Client Backpressure spec: greenpool backs off from overload errors.
    command["backpressure"] = True
    offered = list(compressors)
    if offered:
        command["compression"] = offered
    if load_balanced:
        command["loadBalanced"] = True
    if auth_fields:
        command.update(auth_fields)
    return command


def check_hello_reply(
    reply: Mapping[str, Any], address: Address, *, load_balanced: bool = False
) -> None:
    """Refuse a successful hello reply that greenpool cannot work with.

    Its fields must pass :func:`check_hello_fields`. In load-balanced mode
    a reply without ``serviceId`` raises
    :class:`pymongo.errors.ConfigurationError` with exactly the Load
    Balancer spec's message (:data:`LOAD_BALANCER_UNSUPPORTED`). A server
    whose wire-version range does not overlap greenpool's raises
    :class:`pymongo.errors.ConfigurationError` naming both ranges.
    """
    if load_balanced and "serviceId" not in reply:
        raise PyMongoConfigurationError(LOAD_BALANCER_UNSUPPORTED)
    check_hello_fields(reply)
    low, high = reply.get("minWireVersion", 0), reply.get("maxWireVersion", 0)
    if low > MAX_WIRE_VERSION or high < MIN_WIRE_VERSION:
        verdict = "too new" if low > MAX_WIRE_VERSION else "too old"
        raise PyMongoConfigurationError(
            f"Server at {format_address(address)} speaks wire versions {low} through {high}, "
            f"but greenpool {__version__} speaks {MIN_WIRE_VERSION} through {MAX_WIRE_VERSION} "
            f"(MongoDB {MIN_SERVER_VERSION} and newer): the server is {verdict}"
        )


# Hello fields greenpool or PyMongo's ServerDescription read, by the type
# they must have. Checked once, when the reply arrives: a value of the wrong
# type would otherwise raise a non-PyMongo error at every later use.
_INTEGER_FIELDS = (
    "connectionId", "minWireVersion", "maxWireVersion", "maxBsonObjectSize",
    "maxMessageSizeBytes", "maxWriteBatchSize", "logicalSessionTimeoutMinutes", "setVersion",
)
_POSITIVE_FIELDS = frozenset({"maxBsonObjectSize", "maxMessageSizeBytes", "maxWriteBatchSize"})
_STRING_FIELDS = ("setName", "msg")
_HOST_FIELDS = ("me", "primary")
_HOST_LIST_FIELDS = ("hosts", "passives", "arbiters")
_DOCUMENT_FIELDS = ("lastWrite", "topologyVersion", "tags", "speculativeAuthenticate")
_STRING_LIST_FIELDS = ("compression", "saslSupportedMechs")


def check_hello_fields(reply: Mapping[str, Any]) -> None:
    """Refuse a hello reply whose fields have types greenpool or PyMongo
    cannot use, raising :class:`~greenpool.errors.ProtocolError` naming the
    field and its value: integers (``connectionId``, the wire versions, the
    size limits...), strings (``setName``, ``msg``), ``"host:port"`` strings
    (``me``, ``primary``) and lists of them (``hosts``...), documents
    (``lastWrite``, ``topologyVersion``...), lists of strings
    (``compression``, ``saslSupportedMechs``) and an ObjectId ``serviceId``.
    Absent fields are fine.
    """
    for name in _INTEGER_FIELDS:
        if name in reply and not _is_integer(reply[name], positive=name in _POSITIVE_FIELDS):
            wanted = "a positive integer" if name in _POSITIVE_FIELDS else "an integer"
            _refuse(name, reply[name], wanted)
    for name in _STRING_FIELDS:
        if name in reply and not isinstance(reply[name], str):
            _refuse(name, reply[name], "a string")
    for name in _HOST_FIELDS:
        if name in reply and not _is_host_list([reply[name]]):
            _refuse(name, reply[name], 'a "host:port" string')
    for name in _HOST_LIST_FIELDS:
        if name in reply and not _is_host_list(reply[name]):
            _refuse(name, reply[name], 'a list of "host:port" strings')
    for name in _DOCUMENT_FIELDS:
        if name in reply and not isinstance(reply[name], Mapping):
            _refuse(name, reply[name], "a document")
    for name in _STRING_LIST_FIELDS:
        value = reply.get(name)
        if name in reply and not (
                isinstance(value, list) and all(isinstance(item, str) for item in value)):
            _refuse(name, value, "a list of strings")
    last_write = reply.get("lastWrite")
    if isinstance(last_write, Mapping) and "lastWriteDate" in last_write and not isinstance(
            last_write["lastWriteDate"], datetime.datetime):
        _refuse("lastWrite.lastWriteDate", last_write["lastWriteDate"], "a date")
    if "serviceId" in reply and not isinstance(reply["serviceId"], ObjectId):
        _refuse("serviceId", reply["serviceId"], "an ObjectId")


def _is_integer(value: object, *, positive: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    return value > 0 if positive else True


def _is_host_list(value: object) -> bool:
    if not isinstance(value, list):
        return False
    for item in value:
        if not isinstance(item, str):
            return False
        try:
            parse_address(item)
        except ValueError:
            return False
    return True


def _refuse(name: str, value: object, wanted: str) -> None:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise ProtocolError(f"invalid hello reply: {name} must be {wanted}, not {shown}")
