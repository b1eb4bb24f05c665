"""The Read and Write Concern spec's pure tests, each file by name:
connection-string/read-concern.json and write-concern.json (what a connection string
asks for), document/read-concern.json and write-concern.json (what goes on the wire,
whether it is the server's default, whether it is acknowledged).

Test ids are the spec's descriptions.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
from pymongo.errors import ConfigurationError as PyMongoConfigurationError
from pymongo.read_concern import ReadConcern

from greenpool import ConfigurationError
from greenpool.client.config.uri import parse_uri
from greenpool.client.operations import concern
from tests.cmap_runner import SPEC_DIR
from tests.spec_files import MISSING_MARK

TESTS = SPEC_DIR / "read-write-concern" / "tests"
MISSING = f"{MISSING_MARK}: {TESTS}"


def cases(directory: str, file_name: str) -> list[dict[str, Any]]:
    path = TESTS / directory / file_name
    if not path.exists():
        return []
    tests: list[dict[str, Any]] = json.loads(path.read_text())["tests"]
    return tests


def ids(tests: list[dict[str, Any]]) -> list[str]:
    return [test["description"] for test in tests]


URI_WRITE = cases("connection-string", "write-concern.json")
URI_READ = cases("connection-string", "read-concern.json")
DOCUMENT_WRITE = cases("document", "write-concern.json")
DOCUMENT_READ = cases("document", "read-concern.json")


@pytest.mark.skipif(not URI_WRITE, reason=MISSING)
def test_spec_files_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    counts = (len(URI_WRITE), len(URI_READ), len(DOCUMENT_WRITE), len(DOCUMENT_READ))
    assert counts == (13, 5, 14, 6)


def parsed(test: dict[str, Any]) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings = parse_uri(test["uri"])
    return concern.from_settings(settings.extra), [str(each.message) for each in caught]


@pytest.mark.parametrize("test", URI_WRITE, ids=ids(URI_WRITE))
def test_connection_string_write_concern(test: dict[str, Any]) -> None:
    if not test["valid"]:
        with pytest.raises(ConfigurationError):
            parse_uri(test["uri"])
        return
    (write_concern, _), warned = parsed(test)
    expected = test["writeConcern"]
    wire = {"w": "w", "wtimeoutMS": "wtimeout", "journal": "j"}
    assert write_concern.document == {wire[key]: value for key, value in expected.items()}
    if test["warning"] is False:
        assert warned == []


@pytest.mark.parametrize("test", URI_READ, ids=ids(URI_READ))
def test_connection_string_read_concern(test: dict[str, Any]) -> None:
    assert test["valid"]  # the file has no invalid case
    (_, read_concern), warned = parsed(test)
    assert read_concern.document == test["readConcern"]
    if test["warning"] is False:
        assert warned == []


@pytest.mark.parametrize("test", DOCUMENT_WRITE, ids=ids(DOCUMENT_WRITE))
def test_write_concern_document(test: dict[str, Any]) -> None:
    given = test["writeConcern"]
    fields = {"w": given.get("w"), "wtimeout": given.get("wtimeoutMS"),
              "journal": given.get("journal")}
    if not test["valid"]:
        with pytest.raises((ValueError, PyMongoConfigurationError)):
            concern.make_write_concern(**fields)
        return
    write_concern = concern.make_write_concern(**fields)
    assert (concern.write_concern_field(write_concern) or {}) == test["writeConcernDocument"]
    assert (concern.write_concern_field(write_concern) is None) == test["isServerDefault"]
    assert write_concern.acknowledged == test["isAcknowledged"]


@pytest.mark.parametrize("test", DOCUMENT_READ, ids=ids(DOCUMENT_READ))
def test_read_concern_document(test: dict[str, Any]) -> None:
    assert test["valid"]  # the file has no invalid case
    read_concern = ReadConcern(test["readConcern"].get("level"))
    assert (concern.read_concern_field(read_concern) or {}) == test["readConcernDocument"]
    assert (concern.read_concern_field(read_concern) is None) == test["isServerDefault"]
