"""The Retryable Reads and Retryable Writes spec tests, each by name
(``<file>[<description>]``), run by tests/retryable_unified.py against
greenpool.Client and SecantusDB's one-node replica set.

greenpool's Client is a command runner: an operation of a test is the command
a driver sends for it, retried as :mod:`greenpool.client.retries` classifies
it by name. The files that do not apply to it are listed in NOT_APPLICABLE
with the reason (docs/conformance.rst shows the same list); a test in a
running file that needs something greenpool does not offer, or a deployment
the test server is not, is skipped, naming it.

minHeartbeatFrequencyMS is 10 ms here instead of 500: most tests fail a command
with a state change or a closed connection, which marks the server Unknown, so
the retry waits for the monitor's next check; at 500 ms apart those waits alone
would take two minutes.
PyMongo's own suite shortens it the same way (``client_knobs(min_heartbeat_interval=
0.1)``); tests/test_failover.py checks the real spacing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from greenpool.client import monitor
from tests.retryable_unified import READS_DIR, WRITES_DIR, NotApplicable, Runner, load_cases

pytestmark = pytest.mark.timeout(60)

READS_NOT_APPLICABLE = {
    **{f"changeStreams-{name}.json": "greenpool.Client has no change stream API"
       for name in ("client.watch", "client.watch-serverErrors", "db.coll.watch",
                    "db.coll.watch-serverErrors", "db.watch", "db.watch-serverErrors")},
    **{f"gridfs-{name}.json": "greenpool has no GridFS API"
       for name in ("download", "download-serverErrors", "downloadByName",
                    "downloadByName-serverErrors")},
    "mapReduce.json": "greenpool has no mapReduce helper (and SecantusDB no mapReduce "
                      "command); Client.command never retries mapReduce by name",
}
WRITES_NOT_APPLICABLE = {
    **{f"{name}.json": "greenpool.Client has no bulkWrite API (one command per call)"
       for name in ("bulkWrite", "bulkWrite-errorLabels", "bulkWrite-serverErrors")},
    **{f"{name}.json": "greenpool.Client has no client-level bulkWrite API"
       for name in ("client-bulkWrite-clientErrors", "client-bulkWrite-serverErrors")},
}


# Single cases that cannot pass against SecantusDB, by id, with the reason.
SKIP = {
    "insertOne-errorLabels[InsertOne fails after multiple retryable writeConcernErrors]":
        "SecantusDB answers the retry (same lsid and txnNumber) with the write's stored "
        "result and without the fail point's second writeConcernError, so it succeeds; "
        "mongod applies the fail point to the retry too",
}


def _files(directory: Any, not_applicable: dict[str, str]) -> list[str]:
    if not directory.exists():
        return []
    return sorted(path.name for path in directory.glob("*.json")
                  if path.name not in not_applicable)


READ_CASES = [(name, spec, test) for name in _files(READS_DIR, READS_NOT_APPLICABLE)
              for spec, test in load_cases("reads", name)]
WRITE_CASES = [(name, spec, test) for name in _files(WRITES_DIR, WRITES_NOT_APPLICABLE)
               for spec, test in load_cases("writes", name)]


def _ids(cases: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[str]:
    return [f"{name.removesuffix('.json')}[{test['description']}]" for name, _, test in cases]


@pytest.fixture(scope="module")
def admin(replset_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    """One PyMongo client for every test's initial data and outcome."""
    with MongoClient(replset_uri, directConnection=True,
                     serverSelectionTimeoutMS=10_000) as client:
        yield client


@pytest.fixture(autouse=True)
def _quick_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "MIN_HEARTBEAT_FREQUENCY", 0.01)


def run(uri: str, admin: MongoClient[dict[str, Any]], spec: dict[str, Any],
        test: dict[str, Any], request: pytest.FixtureRequest) -> None:
    case_id = request.node.callspec.id
    if case_id in SKIP:
        pytest.skip(SKIP[case_id])
    if "skipReason" in test:
        pytest.skip(test["skipReason"])
    try:
        Runner(uri, admin).run(spec, test)
    except NotApplicable as reason:
        pytest.skip(f"needs {reason}")


def test_every_spec_file_is_run_or_listed() -> None:
    for directory, not_applicable in ((READS_DIR, READS_NOT_APPLICABLE),
                                      (WRITES_DIR, WRITES_NOT_APPLICABLE)):
        if not directory.exists():
            pytest.skip(f"spec tests not found in {directory}")
        present = {path.name for path in directory.glob("*.json")}
        assert set(not_applicable) <= present, set(not_applicable) - present


@pytest.mark.parametrize("file_name", sorted(READS_NOT_APPLICABLE))
def test_retryable_reads_file_not_applicable(file_name: str) -> None:
    """Each file that does not apply shows on the conformance page, with its reason."""
    pytest.skip(f"{file_name}: {READS_NOT_APPLICABLE[file_name]}")


@pytest.mark.parametrize("file_name", sorted(WRITES_NOT_APPLICABLE))
def test_retryable_writes_file_not_applicable(file_name: str) -> None:
    """Each file that does not apply shows on the conformance page, with its reason."""
    pytest.skip(f"{file_name}: {WRITES_NOT_APPLICABLE[file_name]}")


@pytest.mark.parametrize(("file_name", "spec", "test"), READ_CASES, ids=_ids(READ_CASES))
def test_retryable_reads(file_name: str, spec: dict[str, Any], test: dict[str, Any],
                         replset_uri: str, admin: MongoClient[dict[str, Any]],
                         request: pytest.FixtureRequest) -> None:
    run(replset_uri, admin, spec, test, request)


@pytest.mark.parametrize(("file_name", "spec", "test"), WRITE_CASES, ids=_ids(WRITE_CASES))
def test_retryable_writes(file_name: str, spec: dict[str, Any], test: dict[str, Any],
                          replset_uri: str, admin: MongoClient[dict[str, Any]],
                         request: pytest.FixtureRequest) -> None:
    run(replset_uri, admin, spec, test, request)
