"""A spec directory as test cases: one test per file and client, the file's tests run in
turn, and the table of what is not run and why.

A file's test passes when every case of it that applies passes. A case does not apply
when the deployment does not meet its runOnRequirements or the file says to skip it
(:class:`~tests.unified.runner.NotApplicable`), or when the module's table says so. A
table entry for a server feature SecantusDB lacks carries the error that feature's
absence causes: the case runs anyway, on each client, and must fail with that error (on
stock PyMongo that is the proof that the server, not the client, is why; the day the
server has the feature, the entry fails and goes).
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from tests.unified.deployment import Deployment
from tests.unified.files import load_file
from tests.unified.runner import ClientFactory, NotApplicable, Runner


@dataclass(frozen=True)
class NotRun:
    """Why a file (keyed by its name without .json) or a case (``file[description]``)
    is not run. ``server_error``: the case needs a server feature SecantusDB lacks, and
    running it fails with this text."""

    reason: str
    server_error: str | None = None


#: Options and methods PyMongo does not have, which greenpool.Client, shaped as PyMongo's,
#: has not either (the CRUD, transactions and index management files use them).
RAW_DATA = NotRun("rawData: an option the CRUD spec tells drivers not to implement unless "
                   "asked (for time-series buckets, MongoDB's internal use); PyMongo has none")
COUNT = NotRun("Collection.count: removed in PyMongo 4 (count_documents and "
                "estimated_document_count replace it), so neither client has it")


def spec_files(directory: Path) -> list[str]:
    """The names (without .json) of a spec directory's files; none if it is missing."""
    return sorted(path.stem for path in directory.glob("*.json")) if directory.exists() else []


def run_file(path: Path, make_client: ClientFactory, uri: str, deployment: Deployment,
             not_run: Mapping[str, NotRun], request: pytest.FixtureRequest, *,
             fail_point_heartbeat_ms: int | None = None) -> None:
    """Run every test of one file on clients from ``make_client``; fail naming each case
    that failed, skip if no case applies. The test carries a ``cases`` property, each
    case's ``[description, outcome, why]`` as JSON, which the conformance page shows.
    ``fail_point_heartbeat_ms``: the Runner's."""
    if not path.exists():
        pytest.skip(f"spec tests not found in {path.parent}")
    if path.stem in not_run:
        pytest.skip(not_run[path.stem].reason)
    spec = load_file(path)
    cases = [[test["description"], *_run_case(spec, test, make_client, uri, deployment,
                                              not_run.get(f"{path.stem}[{test['description']}]"),
                                              fail_point_heartbeat_ms)]
             for test in spec["tests"]]
    report_cases(cases, request)
    if not any(outcome == "passed" for _, outcome, _ in cases):
        pytest.skip("no case applies: " + "; ".join(f"{d}: {why}" for d, _, why in cases))


def report_cases(cases: list[list[str]], request: pytest.FixtureRequest) -> None:
    """Attach ``cases`` (``[description, outcome, why]`` each) to the test as its
    ``cases`` property, and fail naming each case that failed."""
    request.node.user_properties.append(("cases", json.dumps(cases)))
    failures = [f"{description}: {why}" for description, outcome, why in cases
                if outcome == "failed"]
    if failures:
        pytest.fail(f"{len(failures)} of {len(cases)} cases failed:\n\n"
                    + "\n\n".join(failures), pytrace=False)


def _run_case(spec: Mapping[str, Any], test: Mapping[str, Any], make_client: ClientFactory,
              uri: str, deployment: Deployment, entry: NotRun | None,
              fail_point_heartbeat_ms: int | None) -> tuple[str, str]:
    """``(outcome, why)``: passed, not run (and why) or failed (and how)."""
    if entry is not None and entry.server_error is None:
        return "not run", entry.reason
    try:
        Runner(make_client, uri, deployment,
               fail_point_heartbeat_ms=fail_point_heartbeat_ms).run(spec, test)
    except NotApplicable as reason:
        return "not run", str(reason)
    except Exception as error:  # each case's failure is reported, whatever it is
        if entry is not None and entry.server_error is not None and (
                entry.server_error.lower() in str(error).lower()):
            return "not run", (f"{entry.reason} (it fails with {entry.server_error!r}, as "
                               f"expected)")
        return "failed", _failure(error)
    if entry is not None:
        return "failed", (f"passed, but the table says it cannot ({entry.reason}): remove "
                          f"the entry")
    return "passed", ""


def _failure(error: BaseException) -> str:
    """An error, short: its type and message, and where in the runner or the client it
    arose."""
    frames = traceback.extract_tb(error.__traceback__)[-3:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(error).__name__}: {error} [{where}]"


def ids(cases: list[tuple[str, str]]) -> list[str]:
    return [f"{name}-{client}" for name, client in cases]


def greenpool_client(uri: str, **kwargs: Any) -> Any:
    """``greenpool.Client`` on ``uri``: it discovers the deployment as the reference does."""
    import greenpool

    return greenpool.Client(uri, **kwargs)


#: The client factories every case runs on: stock PyMongo's (the reference) and greenpool's.
CLIENTS: dict[str, ClientFactory] = {"pymongo": MongoClient, "greenpool": greenpool_client}
