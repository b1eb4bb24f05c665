"""Topology descriptions and read preferences from the Server Selection and Max
Staleness spec tests' JSON, as PyMongo's classes (what greenpool's selection reads).

A server of the JSON (``address``, ``type``, ``avg_rtt_ms``, ``tags``,
``lastUpdateTime``, ``lastWrite``, ``maxWireVersion``) becomes the
:class:`~pymongo.server_description.ServerDescription` a monitor would have built
from the hello reply such a server sends: the reply is written here, field by field,
and PyMongo parses it as it parses any hello.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bson import json_util
from bson.objectid import ObjectId
from pymongo.hello import Hello
from pymongo.read_preferences import _ServerMode
from pymongo.server_description import ServerDescription
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool.address import Address, parse_address
from greenpool.client.config import readpref
from greenpool.wire.handshake import MAX_WIRE_VERSION
from tests.cmap_runner import SPEC_DIR

SELECTION_DIR = SPEC_DIR / "server-selection" / "tests"
STALENESS_DIR = SPEC_DIR / "max-staleness" / "tests"
MISSING = (f"spec tests not found in {SPEC_DIR} "
           "(set GREENPOOL_SPEC_TESTS to the spec-tests 'source' directory)")
#: heartbeatFrequencyMS when a test gives none (the SDAM default), in seconds.
DEFAULT_HEARTBEAT = 10.0
#: The spec tests' localThresholdMS (the default, 15 ms), in seconds.
LOCAL_THRESHOLD = 0.015

_EPOCH = datetime.datetime(1970, 1, 1)
# The hello fields that make a server of each type (SDAM's server type rules).
_HELLO_BY_TYPE: dict[str, dict[str, Any]] = {
    "Standalone": {},
    "Mongos": {"msg": "isdbgrid"},
    "RSPrimary": {"setName": "rs", "isWritablePrimary": True},
    "RSSecondary": {"setName": "rs", "secondary": True},
    "RSArbiter": {"setName": "rs", "arbiterOnly": True},
    "RSOther": {"setName": "rs", "hidden": True},
    "RSGhost": {"isreplicaset": True},
    "LoadBalancer": {"serviceId": ObjectId()},
}


def spec_files(directory: Path) -> list[tuple[str, dict[str, Any]]]:
    """(path below ``directory``, test) for each JSON file under it, sorted."""
    return [(str(path.relative_to(directory).with_suffix("")), load(path))
            for path in sorted(directory.rglob("*.json"))]


def load(path: Path) -> dict[str, Any]:
    test: dict[str, Any] = json_util.loads(path.read_text())
    return test


def server_description(server: dict[str, Any]) -> ServerDescription:
    """The description a monitor would hold of the JSON's ``server``."""
    address = parse_address(server["address"])
    kind = server["type"]
    if kind in ("Unknown", "PossiblePrimary"):
        return ServerDescription(address)  # not available: no reply to describe
    reply: dict[str, Any] = {"ok": 1, **_HELLO_BY_TYPE[kind], "minWireVersion": 0,
                             "maxWireVersion": server.get("maxWireVersion", MAX_WIRE_VERSION)}
    if "tags" in server:
        reply["tags"] = server["tags"]
    if "lastWrite" in server:
        written = int(server["lastWrite"]["lastWriteDate"])
        reply["lastWrite"] = {"lastWriteDate": _EPOCH + datetime.timedelta(milliseconds=written)}
    description = ServerDescription(address, Hello(reply), server["avg_rtt_ms"] / 1000)
    if "lastUpdateTime" in server:
        # What the monitor's clock read when the reply came.
        description._last_update_time = server["lastUpdateTime"] / 1000
    return description


def topology_description(topology: dict[str, Any]) -> TopologyDescription:
    servers = {description.address: description
               for description in map(server_description, topology["servers"])}
    return TopologyDescription(getattr(TOPOLOGY_TYPE, topology["type"]), servers,
                               None, None, None, None)


def read_preference(document: dict[str, Any]) -> _ServerMode:
    """The JSON's read preference (mode in the spec's capitalised form; primary
    when it names none)."""
    written = document.get("mode", "Primary")
    mode = written[0].lower() + written[1:]
    return readpref.make(mode, document.get("tag_sets"),
                         document.get("maxStalenessSeconds", -1))


def addresses(servers: Iterable[dict[str, Any] | ServerDescription]) -> set[Address]:
    """The addresses of JSON servers or descriptions, to compare selections."""
    return {server.address if isinstance(server, ServerDescription)
            else parse_address(server["address"]) for server in servers}
