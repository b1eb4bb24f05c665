"""Reading the SDAM spec's JSON tests (``server-discovery-and-monitoring/tests``).

The files of ``rs/``, ``sharded/``, ``single/``, ``errors/`` and ``monitoring/`` are
phases of hello replies (and application errors) in, a topology description (or the
SDAM events) out. This module loads them and compares an outcome with a description;
tests/test_sdam_spec.py drives greenpool with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bson import json_util
from pymongo.hello import Hello
from pymongo.server_description import ServerDescription
from pymongo.server_type import SERVER_TYPE
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool.address import Address, parse_address
from greenpool.client.topology import discovery
from tests.cmap_runner import SPEC_DIR

SDAM_DIR = SPEC_DIR / "server-discovery-and-monitoring" / "tests"


def load(directory: str) -> list[tuple[str, dict[str, Any]]]:
    """The files of ``directory`` (``rs``, ``errors``...), by name without ``.json``."""
    folder = SDAM_DIR / directory
    if not folder.is_dir():
        return []
    return [(path.stem, _read(path)) for path in sorted(folder.glob("*.json"))]


def _read(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json_util.loads(path.read_text())
    return loaded


def address(text: str) -> Address:
    return parse_address(text)


def reply_description(source: str, reply: Mapping[str, Any]) -> ServerDescription:
    """The description a check of ``source`` makes of ``reply``; ``{}`` is a
    network error, as the format says. A fixed round trip: the files ignore it."""
    where = address(source)
    if not reply:
        return ServerDescription(where, error=ConnectionError(f"{source}: network error"))
    return ServerDescription(where, Hello(dict(reply)), round_trip_time=0.0)


# A multi-threaded driver's PossiblePrimary is Unknown (the SDAM spec's ServerType note).
TYPE_ALIASES = {"PossiblePrimary": "Unknown"}


def check_outcome(description: TopologyDescription, outcome: Mapping[str, Any],
                  generations: Mapping[Address, int] | None = None) -> None:
    """Assert that ``description`` is the outcome the file expects (and, for
    ``errors/``, that each server's pool has the generation it names)."""
    assert TOPOLOGY_TYPE._fields[description.topology_type] == outcome["topologyType"]
    if "setName" in outcome:
        assert description.replica_set_name == outcome["setName"]
    if "logicalSessionTimeoutMinutes" in outcome:
        assert (discovery.session_timeout_minutes(description)
                == outcome["logicalSessionTimeoutMinutes"])
    if "maxSetVersion" in outcome:
        assert description.max_set_version == outcome["maxSetVersion"]
    if "maxElectionId" in outcome:
        assert description.max_election_id == outcome["maxElectionId"]
    if "compatible" in outcome:
        error = discovery.compatibility_error(description)
        assert (error is None) == outcome["compatible"], error
        if error is not None:
            assert "greenpool" in error and "PyMongo" not in error
    servers = description.server_descriptions()
    expected = {address(name): server for name, server in outcome["servers"].items()}
    assert set(servers) == set(expected), (sorted(servers), sorted(expected))
    for where, server in expected.items():
        _check_server(servers[where], server)
        if "pool" in server and generations is not None:
            assert generations[where] == server["pool"]["generation"], where


def _check_server(actual: ServerDescription, expected: Mapping[str, Any]) -> None:
    where = actual.address
    wanted = TYPE_ALIASES.get(expected["type"], expected["type"])
    assert SERVER_TYPE._fields[actual.server_type] == wanted, (where, actual)
    if "setName" in expected:
        assert actual.replica_set_name == expected["setName"], where
    if "setVersion" in expected:
        assert actual.set_version == expected["setVersion"], where
    if "electionId" in expected:
        assert actual.election_id == expected["electionId"], where
    if "logicalSessionTimeoutMinutes" in expected:
        assert (actual.logical_session_timeout_minutes
                == expected["logicalSessionTimeoutMinutes"]), where
    if "minWireVersion" in expected:
        assert actual.min_wire_version == expected["minWireVersion"], where
    if "maxWireVersion" in expected:
        assert actual.max_wire_version == expected["maxWireVersion"], where
    if "topologyVersion" in expected:
        assert actual.topology_version == expected["topologyVersion"], where
    if "error" in expected:
        assert expected["error"] in str(actual.error), (where, actual.error)
