"""The Client Backpressure spec's tests (``client-backpressure/tests``), each by name
(``<file>[<description>]``), run by tests/retryable_unified.py against greenpool.Client
and SecantusDB's one-node replica set, whose failCommand fail point adds the overload
error labels.

An operation of a test is the command a driver sends for it, retried as
:mod:`greenpool.client.retries` classifies it by name. A test that needs what
greenpool's Client does not offer (change streams, bulkWrite, clientBulkWrite) is
skipped, naming it, as in tests/test_retryable_spec.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from tests import unified_match
from tests.cmap_runner import SPEC_DIR
from tests.retryable_unified import NotApplicable, Runner
from tests.spec_files import MISSING_MARK

pytestmark = pytest.mark.timeout(60)

BACKPRESSURE_DIR = SPEC_DIR / "client-backpressure" / "tests"
FILES = sorted(path.name for path in BACKPRESSURE_DIR.glob("*.json")) if (
    BACKPRESSURE_DIR.exists()) else []
CASES = [(name, spec, test) for name in FILES
         for spec, test in unified_match.load_cases(BACKPRESSURE_DIR / name)]


@pytest.mark.skipif(not FILES, reason=f"Client Backpressure {MISSING_MARK} in "
                                      f"{BACKPRESSURE_DIR}")
def test_spec_tests_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert FILES == ["backpressure-connection-checkin.json", "backpressure-retry-loop.json",
                     "backpressure-retry-max-attempts.json", "getMore-retried.json"]


@pytest.fixture(scope="module")
def admin(replset_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    """One PyMongo client for every test's initial data and outcome."""
    with MongoClient(replset_uri, directConnection=True,
                     serverSelectionTimeoutMS=10_000) as client:
        yield client


@pytest.mark.parametrize(("file_name", "spec", "test"), CASES, ids=[
    f"{name.removesuffix('.json')}[{test['description']}]" for name, _, test in CASES])
def test_client_backpressure(file_name: str, spec: dict[str, Any], test: dict[str, Any],
                             replset_uri: str, admin: MongoClient[dict[str, Any]]) -> None:
    if "skipReason" in test:
        pytest.skip(test["skipReason"])
    try:
        Runner(replset_uri, admin).run(spec, test)
    except NotApplicable as reason:
        pytest.skip(f"needs {reason}")
