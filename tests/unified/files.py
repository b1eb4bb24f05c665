"""Reading a unified format test file: Extended JSON, and the schema versions this runner
reads (the format's "Executing a Test File": an incompatible file is an error, never
skipped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bson import json_util
from bson.binary import UuidRepresentation
from bson.json_util import JSONOptions

#: The newest schema version this runner reads (major 1; the format's version at the
#: spec commit of tests/spec_files.py).
SCHEMA_VERSION = (1, 28)

# Test files are relaxed or canonical Extended JSON; UUIDs in them are standard ones.
_JSON_OPTIONS = JSONOptions(document_class=dict,
                            uuid_representation=UuidRepresentation.STANDARD)


def load_file(path: Path) -> dict[str, Any]:
    """One test file, parsed; an AssertionError if its schema version is not one this
    runner reads."""
    spec: dict[str, Any] = json_util.loads(path.read_text(), json_options=_JSON_OPTIONS)
    check_schema_version(spec.get("schemaVersion"), path.name)
    return spec


def check_schema_version(version: Any, where: str) -> None:
    parts = str(version).split(".")
    assert all(part.isdigit() for part in parts) and len(parts) <= 3, (
        f"{where}: schemaVersion {version!r} is not a version string")
    major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    assert major == SCHEMA_VERSION[0] and minor <= SCHEMA_VERSION[1], (
        f"{where}: schemaVersion {version} is not one this runner reads (1.0 to "
        f"{SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]})")
