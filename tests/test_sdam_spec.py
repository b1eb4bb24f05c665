"""The SDAM spec's discovery tests, each file by name: ``rs/``, ``sharded/``, ``single/``.

Each phase's hello replies go through :func:`greenpool.client.discovery.update`, the
pure rules, and the description that comes out must be the phase's outcome. The
initial description comes from the file's connection string, as a Client builds it.
"""

from __future__ import annotations

from typing import Any

import pytest

from greenpool.client import discovery
from greenpool.client.uri import parse_uri
from tests import sdam_runner
from tests.spec_files import MISSING_MARK

RS = sdam_runner.load("rs")
SHARDED = sdam_runner.load("sharded")
SINGLE = sdam_runner.load("single")


@pytest.mark.skipif(not RS, reason=f"SDAM {MISSING_MARK} in {sdam_runner.SDAM_DIR}")
def test_spec_tests_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert (len(RS), len(SHARDED), len(SINGLE)) == (77, 9, 19)


def run(test: dict[str, Any]) -> None:
    settings = parse_uri(test["uri"])
    description = discovery.initial(
        settings.hosts, direct=settings.direct_connection, replica_set=settings.replica_set,
        load_balanced=settings.load_balanced)
    for phase in test["phases"]:
        for source, reply in phase.get("responses", []):
            server = sdam_runner.reply_description(source, reply)
            description = discovery.update(description, server,
                                           seed_count=len(settings.hosts)).description
        sdam_runner.check_outcome(description, phase["outcome"])


@pytest.mark.parametrize(("name", "test"), RS, ids=[name for name, _ in RS])
def test_rs(name: str, test: dict[str, Any]) -> None:
    run(test)


@pytest.mark.parametrize(("name", "test"), SHARDED, ids=[name for name, _ in SHARDED])
def test_sharded(name: str, test: dict[str, Any]) -> None:
    run(test)


@pytest.mark.parametrize(("name", "test"), SINGLE, ids=[name for name, _ in SINGLE])
def test_single(name: str, test: dict[str, Any]) -> None:
    run(test)
