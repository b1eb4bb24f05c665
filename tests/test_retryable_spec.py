"""The Retryable Reads and Retryable Writes spec tests, each by name
(``<file>[<description>]``), against greenpool.Client and SecantusDB's one-node
replica set.

A test runs through the project's unified runner (tests/unified/): its operations are
greenpool.Client's collection API calls (``insertOne`` is ``collection.insert_one``),
retried as the Client retries them. A test that uses an operation the collection API
does not express (COMMAND_RUNNER says which, and why) runs through
tests/retryable_unified.py instead, where an operation is the command a driver sends for
it, run by ``Client.command``. The files that do not apply are listed in NOT_APPLICABLE
with the reason (docs/conformance.rst shows the same list); a test in a running file that
needs something greenpool does not offer, a fail point SecantusDB ignores, or a deployment
the test server is not, is skipped, naming it.

minHeartbeatFrequencyMS is 10 ms here instead of 500: most tests fail a command
with a state change or a closed connection, which marks the server Unknown, so
the retry waits for the monitor's next check; at 500 ms apart those waits alone
would take two minutes.
PyMongo's own suite shortens it the same way (``client_knobs(min_heartbeat_interval=
0.1)``); tests/test_failover.py checks the real spacing. For the same reason a client's
heartbeatFrequencyMS is 500 ms (the least the spec allows) unless the test gives its
own: a streaming monitor learns of a server's state from its awaited hello, which the
server answers after at most heartbeatFrequencyMS when nothing changed (a fail point's
error changes nothing), and a retry waits for that answer, as the Server Monitoring spec
says (only a network error cancels the awaited hello).
"""


from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from greenpool.client.topology import monitor
from tests import retryable_unified
from tests.retryable_unified import FAIL_POINTS, READS_DIR, WRITES_DIR
from tests.unified.deployment import Deployment
from tests.unified.files import load_file
from tests.unified.runner import NotApplicable, Runner, client_uri
from tests.unified.suite import CLIENTS

pytestmark = pytest.mark.timeout(60)

#: The base of every client's URI here (a test's uriOptions override it).
HEARTBEAT = {"heartbeatFrequencyMS": 500}

READS_NOT_APPLICABLE = {
    **{f"gridfs-{name}.json": (
        "the find commands' events are expected with filter {_id: <id>}; greenpool.gridfs "
        "sends {_id: {$eq: <id>}}, as PyMongo's gridfs does (an _id that is a document is "
        "then never read as operators); the downloads themselves are retried")
       for name in ("download", "download-serverErrors", "downloadByName",
                    "downloadByName-serverErrors")},
    "mapReduce.json": "greenpool has no mapReduce helper (and SecantusDB no mapReduce "
                      "command); Client.command never retries mapReduce by name",
}
WRITES_NOT_APPLICABLE: dict[str, str] = {}
#: The operations a test runs through tests/retryable_unified.py's commands, and why.
COMMAND_RUNNER = {
    "count": "PyMongo 4 has no Collection.count, so neither has the collection API; the "
             "count command is a retryable read",
    "listIndexNames": "PyMongo has no list_index_names; the listIndexes command",
}


# Single cases that cannot pass against SecantusDB, by id, with the reason.
SKIP = {
    "insertOne-errorLabels[InsertOne fails after multiple retryable writeConcernErrors]":
        "SecantusDB answers the retry (same lsid and txnNumber) with the write's stored "
        "result and without the fail point's second writeConcernError, so it succeeds; "
        "mongod applies the fail point to the retry too",
    "client-bulkWrite-serverErrors[client bulkWrite with no multi: true operations succeeds "
    "after retryable writeConcernError]":
        "SecantusDB runs a retried bulkWrite (same lsid and txnNumber) again instead of "
        "answering with the first attempt's result, so its insert fails with a duplicate "
        "key; stock PyMongo's retry gets the same E11000",
}


def _files(directory: Any, not_applicable: dict[str, str]) -> list[str]:
    if not directory.exists():
        return []
    return sorted(path.name for path in directory.glob("*.json")
                  if path.name not in not_applicable)


def _cases(directory: Any, not_applicable: dict[str, str]
           ) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(name, spec, test) for name in _files(directory, not_applicable)
            for spec in [load_file(directory / name)] for test in spec["tests"]]


READ_CASES = _cases(READS_DIR, READS_NOT_APPLICABLE)
WRITE_CASES = _cases(WRITES_DIR, WRITES_NOT_APPLICABLE)


def _ids(cases: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[str]:
    return [f"{name.removesuffix('.json')}[{test['description']}]" for name, _, test in cases]


@pytest.fixture(scope="module")
def admin(replset_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    """One PyMongo client for every test's initial data and outcome."""
    with MongoClient(replset_uri, directConnection=True,
                     serverSelectionTimeoutMS=10_000) as client:
        yield client


@pytest.fixture(scope="module")
def deployment(admin: MongoClient[dict[str, Any]]) -> Deployment:
    return Deployment.of(admin, auth=False)


@pytest.fixture(autouse=True)
def _quick_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "MIN_HEARTBEAT_FREQUENCY", 0.01)


def _operations(operations: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every operation of a test, those in a withTransaction callback included."""
    for operation in operations:
        yield operation
        yield from _operations((operation.get("arguments") or {}).get("callback") or [])


def run(uri: str, deployment: Deployment, spec: dict[str, Any], test: dict[str, Any],
        request: pytest.FixtureRequest) -> None:
    case_id = request.node.callspec.id
    if case_id in SKIP:
        pytest.skip(SKIP[case_id])
    if "skipReason" in test:
        pytest.skip(test["skipReason"])
    for requirements in (spec.get("runOnRequirements"), test.get("runOnRequirements")):
        reason = deployment.unmet(requirements)
        if reason is not None:
            pytest.skip(reason)
    operations = list(_operations(test["operations"]))
    for operation in operations:
        if operation["name"] == "failPoint":
            name = operation["arguments"]["failPoint"]["configureFailPoint"]
            if name not in FAIL_POINTS:
                pytest.skip(f"needs the {name} fail point (SecantusDB accepts it and does "
                            f"nothing)")
    if any(operation["name"] in COMMAND_RUNNER for operation in operations):
        try:
            retryable_unified.Runner(client_uri(uri, HEARTBEAT), deployment.admin).run(spec, test)
        except retryable_unified.NotApplicable as reason:
            pytest.skip(f"needs {reason}")
        return
    try:
        Runner(CLIENTS["greenpool"], client_uri(uri, HEARTBEAT), deployment).run(spec, test)
    except NotApplicable as reason:
        pytest.skip(str(reason))


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
                         replset_uri: str, deployment: Deployment,
                         request: pytest.FixtureRequest) -> None:
    run(replset_uri, deployment, spec, test, request)


@pytest.mark.parametrize(("file_name", "spec", "test"), WRITE_CASES, ids=_ids(WRITE_CASES))
def test_retryable_writes(file_name: str, spec: dict[str, Any], test: dict[str, Any],
                          replset_uri: str, deployment: Deployment,
                          request: pytest.FixtureRequest) -> None:
    run(replset_uri, deployment, spec, test, request)
