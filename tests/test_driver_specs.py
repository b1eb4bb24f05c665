"""The unified tests of the driver specs that have no module of their own: transactions
and its convenient API, sessions, causal consistency, command monitoring, collection and
index management, and run-command. Each file by name, on stock PyMongo's MongoClient
(the reference) and on greenpool.Client, through the same runner (tests/unified/)
against SecantusDB's one-node replica set.

Test ids are ``test_spec[<suite>/<file>-<client>]``. What is not run, and why, is each
suite's table in NOT_RUN (docs/conformance.rst shows them, with each file's cases): a
server feature SecantusDB lacks, proven by the case failing with that server error; an
API PyMongo does not have (``count``, ``rawData``, ``modifyCollection``, a session's
``snapshotTime``), which greenpool.Client, shaped as PyMongo's, has not either.
REFERENCE_NOT_RUN lists what stock PyMongo alone fails, with the error it fails with. A
case whose runOnRequirements the server does not meet (server 8.2.11, a replica set, no
authentication) is not run, as the format says. A case that sets a fail point gets
clients with heartbeatFrequencyMS=500, as the format allows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cmap_runner import SPEC_DIR
from tests.unified.deployment import Deployment
from tests.unified.runner import client_uri
from tests.unified.suite import CLIENTS, COUNT, RAW_DATA, NotRun, run_file, spec_files

#: Each suite's directory of unified files.
SUITES: dict[str, Path] = {
    "transactions": SPEC_DIR / "transactions" / "tests" / "unified",
    "transactions-convenient-api": SPEC_DIR / "transactions-convenient-api" / "tests" / "unified",
    "sessions": SPEC_DIR / "sessions" / "tests",
    "causal-consistency": SPEC_DIR / "causal-consistency" / "tests",
    "command-monitoring": SPEC_DIR / "command-logging-and-monitoring" / "tests" / "monitoring",
    "command-logging": SPEC_DIR / "command-logging-and-monitoring" / "tests" / "logging",
    "collection-management": SPEC_DIR / "collection-management" / "tests",
    "index-management": SPEC_DIR / "index-management" / "tests",
    "run-command": SPEC_DIR / "run-command" / "tests" / "unified",
}

_MODIFY_COLLECTION = NotRun("modifyCollection (collMod): PyMongo has no helper for it, so "
                            "neither client has one")
_SNAPSHOT_TIME = NotRun("a session's snapshotTime (getSnapshotTime, the snapshotTime session "
                        "option): PyMongo 4.20's ClientSession has neither, so neither client "
                        "has them")
# SecantusDB answers a snapshot read with the latest data, not the data at the session's
# atClusterTime: a read after a write sees the write.
_SNAPSHOT_READS = NotRun("SecantusDB does not read at a snapshot's atClusterTime",
                         server_error="x: expected 11")
_SNAPSHOT_DISTINCT = NotRun(_SNAPSHOT_READS.reason, server_error="expected [11], got [11, 13]")

#: What is not run, and why, per suite: a file by name, or one case as
#: ``file[description]``.
NOT_RUN: dict[str, dict[str, NotRun]] = {
    "transactions": {"count": COUNT},
    "transactions-convenient-api": {},
    "sessions": {
        **{f"snapshot-sessions[{case}]": _SNAPSHOT_READS for case in (
            "Find operation with snapshot", "Aggregate operation with snapshot",
            "Mixed operation with snapshot",
            "Write commands with snapshot session do not affect snapshot reads")},
        "snapshot-sessions[Distinct operation with snapshot]": _SNAPSHOT_DISTINCT,
        **{f"snapshot-sessions[{case}]": _SNAPSHOT_TIME for case in (
            "Find operation with snapshot and snapshot time",
            "Distinct operation with snapshot and snapshot time",
            "Aggregate operation with snapshot and snapshot time",
            "countDocuments operation with snapshot and snapshot time",
            "Mixed operation with snapshot and snapshotTime")},
    },
    "causal-consistency": {
        "causal-consistency-clientBulkWrite[clientBulkWrite includes afterClusterTime in "
        "causally consistent session]": NotRun(
            "SecantusDB refuses the readConcern (afterClusterTime) the spec has a causally "
            "consistent session's bulkWrite carry",
            server_error="bulkWrite.readConcern"),
    },
    "command-monitoring": {},
    "command-logging": {
        f"redacted-commands[{case}]": NotRun(
            "SecantusDB's hello reply, as extended JSON, is longer than the 1000 characters "
            "a log message keeps by default (the logging spec's maxDocumentLength), so the "
            "cut reply is no longer a document; the case assumes a reply that fits",
            # Where the cut falls decides the JSON error's wording; its place does not.
            server_error="line 1 column")
        for case in ("hello without speculative authenticate command and server reply are "
                     "not redacted", "legacy hello without speculative authenticate command "
                     "and server reply are not redacted")},
    "collection-management": {
        "listCollections-rawdata": RAW_DATA,
        "modifyCollection-errorResponse": _MODIFY_COLLECTION,
        "modifyCollection-pre_and_post_images": _MODIFY_COLLECTION,
    },
    "index-management": {"index-rawdata": RAW_DATA},
    "run-command": {},
}

# PyMongo selects a server for the operation's read preference before it checks that a
# transaction's is primary: on a one-member set no secondary answers.
_PYMONGO_SELECTS_FIRST = NotRun(
    "stock PyMongo 4.20 selects a server for a secondary read preference in a transaction "
    "before refusing it, and a one-member set has no secondary: its error is the "
    "selection timeout's (greenpool.Client refuses at once)",
    server_error="No replica set members match selector")

#: What the reference (stock PyMongo) fails for a reason of its own, besides NOT_RUN.
REFERENCE_NOT_RUN: dict[str, dict[str, NotRun]] = {
    "transactions": {
        "read-pref[secondary readPreference]": _PYMONGO_SELECTS_FIRST,
        **{f"transaction-options[{case}]": _PYMONGO_SELECTS_FIRST for case in (
            "readPreference inherited from client",
            "readPreference inherited from defaultTransactionOptions",
            "startTransaction overrides readPreference")},
        **{f"run-command[{case}]": _PYMONGO_SELECTS_FIRST for case in (
            "run command fails with explicit secondary read preference",
            "run command fails with secondary read preference from transaction options")},
    },
}

CASES = [(suite, name, client) for suite, directory in SUITES.items()
         for name in spec_files(directory) for client in CLIENTS]


def test_every_table_entry_names_a_spec_file() -> None:
    for tables in (NOT_RUN, REFERENCE_NOT_RUN):
        for suite, table in tables.items():
            present = set(spec_files(SUITES[suite]))
            named = {key.partition("[")[0] for key in table}
            assert named <= present, (suite, sorted(named - present))


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("suite", "name", "client"), CASES,
                         ids=[f"{suite}/{name}-{client}" for suite, name, client in CASES])
def test_spec(suite: str, name: str, client: str, replset_uri: str, deployment: Deployment,
              request: pytest.FixtureRequest) -> None:
    not_run = NOT_RUN[suite]
    if client == "pymongo":
        not_run = {**not_run, **REFERENCE_NOT_RUN.get(suite, {})}
    run_file(SUITES[suite] / f"{name}.json", CLIENTS[client],
             client_uri(replset_uri, {"serverSelectionTimeoutMS": 10_000}), deployment,
             not_run, request, fail_point_heartbeat_ms=500)
