"""The Client Backpressure spec's tests (``client-backpressure/tests``), each by name
(``<file>[<description>]``), against greenpool.Client and SecantusDB's one-node replica
set, whose failCommand fail point adds the overload error labels.

As in tests/test_retryable_spec.py: a test runs through the project's unified runner
(tests/unified/) on greenpool.Client's collection API, or through
tests/retryable_unified.py's commands when it uses an operation that API does not
express (COMMAND_RUNNER says which).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests import retryable_unified
from tests.cmap_runner import SPEC_DIR
from tests.spec_files import MISSING_MARK
from tests.test_retryable_spec import COMMAND_RUNNER as RETRYABLE_COMMAND_RUNNER
from tests.unified.deployment import Deployment
from tests.unified.files import load_file
from tests.unified.runner import NotApplicable, Runner, client_uri
from tests.unified.suite import CLIENTS

pytestmark = pytest.mark.timeout(60)

#: The operations a test runs through tests/retryable_unified.py's commands, and why.
COMMAND_RUNNER = {
    **RETRYABLE_COMMAND_RUNNER,
    "database.aggregate": "the collection API has no Database.aggregate; the aggregate "
                          "command on the database",
}
BACKPRESSURE_DIR = SPEC_DIR / "client-backpressure" / "tests"
FILES = sorted(path.name for path in BACKPRESSURE_DIR.glob("*.json")) if (
    BACKPRESSURE_DIR.exists()) else []
CASES = [(name, spec, test) for name in FILES
         for spec in [load_file(BACKPRESSURE_DIR / name)] for test in spec["tests"]]


@pytest.mark.skipif(not FILES, reason=f"Client Backpressure {MISSING_MARK} in "
                                      f"{BACKPRESSURE_DIR}")
def test_spec_tests_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert FILES == ["backpressure-connection-checkin.json", "backpressure-retry-loop.json",
                     "backpressure-retry-max-attempts.json", "getMore-retried.json"]


@pytest.mark.parametrize(("file_name", "spec", "test"), CASES, ids=[
    f"{name.removesuffix('.json')}[{test['description']}]" for name, _, test in CASES])
def test_client_backpressure(file_name: str, spec: dict[str, Any], test: dict[str, Any],
                             replset_uri: str, deployment: Deployment) -> None:
    if "skipReason" in test:
        pytest.skip(test["skipReason"])
    for requirements in (spec.get("runOnRequirements"), test.get("runOnRequirements")):
        reason = deployment.unmet(requirements)
        if reason is not None:
            pytest.skip(reason)
    names = [(operation["name"], f"{spec_object(spec, operation)}.{operation['name']}")
             for operation in test["operations"]]
    if any(name in COMMAND_RUNNER or qualified in COMMAND_RUNNER for name, qualified in names):
        try:
            retryable_unified.Runner(replset_uri, deployment.admin).run(spec, test)
        except retryable_unified.NotApplicable as reason:
            pytest.skip(f"needs {reason}")
        return
    try:
        Runner(CLIENTS["greenpool"], client_uri(replset_uri, {}), deployment).run(spec, test)
    except NotApplicable as reason:
        pytest.skip(str(reason))


def spec_object(spec: dict[str, Any], operation: dict[str, Any]) -> str:
    """The kind of entity an operation runs on (client, database, collection...)."""
    for entity in spec.get("createEntities", []):
        ((kind, fields),) = entity.items()
        if fields.get("id") == operation["object"]:
            return str(kind)
    return str(operation["object"])
