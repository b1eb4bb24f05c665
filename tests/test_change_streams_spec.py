"""The Change Streams spec's unified tests (``change-streams/tests/unified``), each file by
name, on stock PyMongo's MongoClient (the reference) and on greenpool.Client, through the
same runner (tests/unified/) against SecantusDB's one-node replica set.

Test ids are ``test_change_streams[<file>-<client>]``. What is not run, and why, is NOT_RUN
below (docs/conformance.rst shows it, with each file's cases): a server feature SecantusDB
lacks, proven by the case failing with that server error on stock PyMongo too. A case
whose runOnRequirements the server does not meet is not run, as the format says.
"""

from __future__ import annotations

import pytest

from tests.cmap_runner import SPEC_DIR
from tests.unified.deployment import Deployment
from tests.unified.runner import client_uri
from tests.unified.suite import CLIENTS, NotRun, ids, run_file, spec_files

CHANGE_STREAMS_DIR = SPEC_DIR / "change-streams" / "tests" / "unified"

#: What is not run, and why: a file by name, or one case as ``file[description]``.
NOT_RUN: dict[str, NotRun] = {}

#: The heartbeatFrequencyMS of a case's clients when it sets a fail point (the format's
#: MAY): a resumable error marks the server Unknown, and the resume waits for the next
#: check, a heartbeat (10 s by default, as long as the selection timeout) away.
FAIL_POINT_HEARTBEAT_MS = 500

CASES = [(name, client) for name in spec_files(CHANGE_STREAMS_DIR) for client in CLIENTS]


def test_every_table_entry_names_a_spec_file() -> None:
    if not CHANGE_STREAMS_DIR.exists():
        pytest.skip(f"spec tests not found in {CHANGE_STREAMS_DIR}")
    named = {key.partition("[")[0] for key in NOT_RUN}
    assert named <= set(spec_files(CHANGE_STREAMS_DIR)), sorted(named)


@pytest.mark.parametrize(("name", "client"), CASES, ids=ids(CASES))
def test_change_streams(name: str, client: str, replset_uri: str, deployment: Deployment,
                        request: pytest.FixtureRequest) -> None:
    run_file(CHANGE_STREAMS_DIR / f"{name}.json", CLIENTS[client],
             client_uri(replset_uri, {"serverSelectionTimeoutMS": 10_000}), deployment,
             NOT_RUN, request, fail_point_heartbeat_ms=FAIL_POINT_HEARTBEAT_MS)
