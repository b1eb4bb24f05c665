"""The Client-Side Operations Timeout spec tests, each by name
(``<file>[<description>]``), run by tests/csot_unified.py against
greenpool.Client and SecantusDB's one-node replica set.

The files that do not apply to a command-level Client are listed in
NOT_APPLICABLE with the reason (docs/conformance.rst shows the same list);
a test in a running file that needs something greenpool does not offer is
skipped, naming it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.csot_unified import CSOT_DIR, NotApplicable, Runner, load_cases

RUN = [
    "close-cursors.json",
    "command-execution.json",
    "convenient-transactions.json",
    "cursors.json",
    "error-transformations.json",
    "global-timeoutMS.json",
    "legacy-timeouts.json",
    "non-tailable-cursors.json",
    "retryability-legacy-timeouts.json",
    "retryability-timeoutMS.json",
    "override-collection-timeoutMS.json",
    "override-database-timeoutMS.json",
    "override-operation-timeoutMS.json",
    "runCursorCommand.json",
    "sessions-inherit-timeoutMS.json",
    "sessions-override-operation-timeoutMS.json",
    "sessions-override-timeoutMS.json",
    "tailable-non-awaitData.json",
    "waitQueueTimeout.json",
]
NOT_APPLICABLE = {
    "bulkWrite.json": "greenpool.Client has no bulkWrite API (one command per call)",
    "change-streams.json": "greenpool.Client has no change stream API (no resume logic)",
    "deprecated-options.json": "greenpool.Client has none of the deprecated per-operation "
                               "options (maxTimeMS, maxCommitTimeMS, wTimeoutMS helpers)",
    "gridfs-advanced.json": "greenpool has no GridFS API",
    "gridfs-delete.json": "greenpool has no GridFS API",
    "gridfs-download.json": "greenpool has no GridFS API",
    "gridfs-find.json": "greenpool has no GridFS API",
    "gridfs-upload.json": "greenpool has no GridFS API",
    "tailable-awaitData.json": "greenpool.Client has no maxAwaitTimeMS for awaitData cursors",
}
# Single cases that do not apply, by id, with the reason.
SKIP = {
    "runCursorCommand[Non-tailable cursor iteration timeoutMS is refreshed for getMore if "
    "timeoutMode is iteration - failure]":
        "it counts the whole drain of runCursorCommand as one next() call; greenpool's "
        "iteration mode gives each next() call that needs a getMore the limit anew, and "
        "no single call here takes 100 ms",
    "runCursorCommand[Tailable cursor iteration timeoutMS is refreshed for getMore - failure]":
        "it expects a getMore the server holds for 60 ms to exceed an iteration limit of "
        "100 ms; greenpool gives each next() call the whole limit, as the spec's "
        "iteration mode says, and the call succeeds",
}
CASES = [(file_name, spec, test) for file_name in RUN for spec, test in load_cases(file_name)]


def test_every_spec_file_is_run_or_listed() -> None:
    if not CSOT_DIR.exists():
        pytest.skip(f"spec tests not found in {CSOT_DIR}")
    present = {path.name for path in CSOT_DIR.glob("*.json")}
    assert present == set(RUN) | set(NOT_APPLICABLE)
    assert not set(RUN) & set(NOT_APPLICABLE)


@pytest.mark.parametrize("file_name", sorted(NOT_APPLICABLE))
def test_csot_spec_file_not_applicable(file_name: str) -> None:
    """Each file that does not apply shows on the conformance page, with its reason."""
    pytest.skip(f"{file_name}: {NOT_APPLICABLE[file_name]}")


@pytest.mark.parametrize(
    ("file_name", "spec", "test"), CASES,
    ids=[f"{file_name.removesuffix('.json')}[{test['description']}]"
         for file_name, _, test in CASES])
def test_csot_spec(file_name: str, spec: dict[str, Any], test: dict[str, Any],
                   replset_uri: str, request: pytest.FixtureRequest) -> None:
    case_id = request.node.callspec.id
    if case_id in SKIP:
        pytest.skip(SKIP[case_id])
    if "skipReason" in test:
        pytest.skip(test["skipReason"])
    try:
        Runner(replset_uri).run(spec, test)
    except NotApplicable as reason:
        pytest.skip(f"needs {reason}, which greenpool.Client does not offer")
