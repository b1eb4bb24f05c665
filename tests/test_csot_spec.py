"""The Client-Side Operations Timeout spec tests, each by name
(``<file>[<description>]``), against greenpool.Client and SecantusDB's one-node
replica set.

A test whose timeouts PyMongo's API expresses (the client's timeoutMS from the URI, an
operation's in a ``timeout()`` block) runs through the project's unified runner
(tests/unified/) on greenpool.Client's collection API, an operation's timeoutMS as a
``greenpool.timeout`` block around the call. The others run through tests/csot_unified.py,
where an operation is the command a driver sends for it, run with ``timeout=`` from the
level that sets one: :func:`command_runner_reason` says which tests, and why.

The files that do not apply to a command-level Client are listed in
NOT_APPLICABLE with the reason (docs/conformance.rst shows the same list);
a test in a running file that needs something greenpool does not offer is
skipped, naming it. The cases of PYMONGO_FILES that run on the collection API run on
stock PyMongo too, through the same runner, as the reference (the GridFS files' as well).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import gevent
import pymongo
import pytest
from bson import json_util

import greenpool
from tests import csot_unified
from tests.csot_unified import CSOT_DIR, NotApplicable, Runner, load_cases
from tests.unified import runner as unified
from tests.unified.deployment import Deployment
from tests.unified.files import load_file
from tests.unified.suite import CLIENTS

RUN = [
    "bulkWrite.json",
    "change-streams.json",
    "close-cursors.json",
    "command-execution.json",
    "convenient-transactions.json",
    "cursors.json",
    "deprecated-options.json",
    "error-transformations.json",
    "global-timeoutMS.json",
    "gridfs-advanced.json",
    "gridfs-delete.json",
    "gridfs-download.json",
    "gridfs-find.json",
    "gridfs-upload.json",
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
    "tailable-awaitData.json",
    "tailable-non-awaitData.json",
    "waitQueueTimeout.json",
]
NOT_APPLICABLE: dict[str, str] = {}
# Single cases that do not apply, by id, with the reason.
SKIP = {
    "runCursorCommand[Non-tailable cursor iteration timeoutMS is refreshed for getMore if "
    "timeoutMode is iteration - failure]":
        "it counts the whole drain of runCursorCommand as one next() call; greenpool's "
        "iteration mode gives each next() call that needs a getMore the limit anew, and "
        "no single call here takes 100 ms",
    "runCursorCommand[Tailable cursor awaitData iteration timeoutMS is refreshed for getMore - "
    "failure]":
        "it sets no timeoutMS (not on the client, the database or the createCommandCursor) "
        "yet expects a timeout error from a getMore the server holds for 60 ms; with no "
        "time limit greenpool's getMore waits and succeeds",
    "runCursorCommand[Tailable cursor iteration timeoutMS is refreshed for getMore - failure]":
        "it expects a getMore the server holds for 60 ms to exceed an iteration limit of "
        "100 ms; greenpool gives each next() call the whole limit, as the spec's "
        "iteration mode says, and the call succeeds",
}


def _cases(file_name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """A file's ``(file, test)`` pairs. The GridFS files' ids and chunks are Extended JSON
    (``$oid``, ``$binary``), read as BSON values as the unified runner's own files are."""
    if file_name.startswith("gridfs-"):
        path = CSOT_DIR / file_name
        spec = load_file(path) if path.exists() else {"tests": []}
        return [(spec, test) for test in spec["tests"]]
    return load_cases(file_name)


CASES = [(file_name, spec, test) for file_name in RUN for spec, test in _cases(file_name)]

_TRANSACTIONS = ("startTransaction", "withTransaction", "commitTransaction",
                 "abortTransaction")
#: The operations a test runs as commands (tests/csot_unified.py) for, and why.
COMMAND_OPERATIONS = {
    "count": "count: PyMongo 4 has no Collection.count",
    "listIndexNames": "listIndexNames: PyMongo has no list_index_names",
    "runCursorCommand": "runCursorCommand: greenpool's Database has no cursor_command",
    "createCommandCursor": "createCommandCursor: greenpool's Database has no cursor_command",
    "iterateOnce": "iterateOnce: PyMongo's find cursor has no try_next",
    **{name: f"{name}: a transaction's time limit is the Session API's timeout=, which "
             f"PyMongo's API (a timeout block) does not express"
       for name in _TRANSACTIONS},
}
#: Operations on a database entity that greenpool's Database does not have.
COMMAND_DATABASE_OPERATIONS = {
    "aggregate": "a database aggregate: greenpool's Database has no aggregate",
}
#: The operations whose timeoutMS outlives the call (the cursor it opens, its close),
#: which a timeout block around the call does not express.
_LASTING = {"createFindCursor", "close"}
#: None now: every operation of the files is offered.
_NOT_OFFERED: set[str] = set()


def command_runner_reason(spec: dict[str, Any], test: dict[str, Any]) -> str | None:
    """Why a test runs as commands (tests/csot_unified.py) rather than on the collection
    API (tests/unified/), or None."""
    entities = list(spec.get("createEntities") or [])
    operations = list(_operations(test["operations"]))
    entities += [e for o in operations if o["name"] == "createEntities"
                 for e in o["arguments"]["entities"]]
    kinds = {}
    for entity in entities:
        ((kind, options),) = entity.items()
        kinds[options["id"]] = kind
        if "timeoutMS" in (options.get(f"{kind}Options") or {}):
            return f"a {kind}'s timeoutMS: PyMongo's API has none"
        if kind == "session" and "defaultTimeoutMS" in (options.get("sessionOptions") or {}):
            return "a session's defaultTimeoutMS: PyMongo's API has none"
    # A change stream's iterateOnce is its try_next(), which the collection API has.
    streams = {o.get("saveResultAsEntity") for o in operations
               if o["name"] == "createChangeStream"}
    for operation in operations:
        name, arguments = operation["name"], operation.get("arguments") or {}
        if name == "iterateOnce" and operation["object"] in streams:
            continue
        if name in COMMAND_OPERATIONS:
            if name in _TRANSACTIONS and _needs_collection_api(entities):
                continue
            return COMMAND_OPERATIONS[name]
        if kinds.get(operation["object"]) == "database" and name in COMMAND_DATABASE_OPERATIONS:
            return COMMAND_DATABASE_OPERATIONS[name]
        if name in _NOT_OFFERED:
            return f"{name} (the command runner skips it, naming it)"
        if "timeoutMode" in arguments:
            return "timeoutMode: PyMongo's API has none"
        if "cursorType" in arguments:
            return ("a tailable cursor's timeouts (each getMore's): PyMongo's API does not "
                    "express them")
        if "timeoutMS" in arguments and name in _LASTING:
            return (f"{name}'s timeoutMS bounds the cursor it opens or closes, which a "
                    f"timeout block around the call does not")
    return None


def _needs_collection_api(entities: list[dict[str, Any]]) -> bool:
    """Whether the entities set what only the collection API applies: a write
    concern from the URI (wTimeoutMS; the command API sends commands as given)
    or a session's defaultTransactionOptions."""
    for entity in entities:
        ((kind, options),) = entity.items()
        if kind == "client" and "wTimeoutMS" in (options.get("uriOptions") or {}):
            return True
        if kind == "session" and "defaultTransactionOptions" in (
                options.get("sessionOptions") or {}):
            return True
    return False


def _operations(operations: list[dict[str, Any]]) -> Any:
    for operation in operations:
        yield operation
        arguments = operation.get("arguments") or {}
        yield from _operations(arguments.get("callback") or [])
        if "operation" in arguments:
            yield from _operations([arguments["operation"]])


#: What a file does that needs its clients' first connections made inside the test: fail
#: points on the handshake, or the pool's events observed.
_COLD_MARKERS = ('"hello"', '"isMaster"', '"ismaster"', '"saslContinue"', '"saslStart"',
                 'connectionCreatedEvent', 'connectionCheckedOutEvent', 'poolClearedEvent',
                 'connectionCheckOutFailedEvent')


def warmed(make_client: Any, spec: dict[str, Any]) -> Any:
    """``make_client``, each client's first connection made (a ping) and its events
    forgotten before the test runs, unless the file's tests need cold clients.

    A file's timeoutMS is often 50-75 ms, the time its authors gave one operation. On a
    client's first operation it would also have to cover discovering the server and
    opening a connection, which a loaded 2-core machine can take longer than that to do
    (a PyMongo 4.9.2 matrix run sent nothing within 75 ms of gridfs-find's first find)."""
    text = json_util.dumps(spec)
    if any(marker in text for marker in _COLD_MARKERS):
        return make_client

    def make(uri: str, **keywords: Any) -> Any:
        client = make_client(uri, **keywords)
        with contextlib.suppress(pymongo.errors.PyMongoError):
            client.admin.command("ping")  # within the client's own timeoutMS, or not at all
        gevent.sleep(0)  # pool events are delivered at the next yield
        for listener in keywords.get("event_listeners") or []:
            listener.events.clear()
        return client

    return make


def run_on_collection_api(spec: dict[str, Any], test: dict[str, Any], uri: str,
                          deployment: Deployment, make_client: Any = CLIENTS["greenpool"],
                          timeout: Any = greenpool.timeout) -> None:
    """One test through the unified runner (on greenpool.Client unless ``make_client``
    and its library's ``timeout`` block say otherwise); a command a fail point holds may
    outlive a timed-out operation, so the next test waits that long
    (tests/csot_unified.py's rule)."""
    blocks = [o["arguments"]["failPoint"].get("data", {}).get("blockTimeMS", 0)
              for o in _operations(test["operations"]) if o["name"] == "failPoint"]
    gevent.sleep(max(0.0, csot_unified.server_busy_until() - time.monotonic()))
    try:
        unified.Runner(warmed(make_client, spec), unified.client_uri(uri, {}), deployment,
                       timeout=timeout).run(spec, test)
    finally:
        if max(blocks, default=0):
            csot_unified.server_may_be_busy(time.monotonic(), max(blocks))


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
                   replset_uri: str, deployment: Deployment,
                   request: pytest.FixtureRequest) -> None:
    case_id = request.node.callspec.id
    if case_id in SKIP:
        pytest.skip(SKIP[case_id])
    if "skipReason" in test:
        pytest.skip(test["skipReason"])
    try:
        if command_runner_reason(spec, test) is None:
            run_on_collection_api(spec, test, replset_uri, deployment)
        else:
            Runner(replset_uri).run(spec, test)
    except (NotApplicable, unified.NotApplicable) as reason:
        pytest.skip(f"needs {reason}, which greenpool.Client does not offer")


#: The GridFS files run on stock PyMongo too (its gridfs, ``pymongo.timeout``), the
#: reference for greenpool.gridfs; these cases cannot.
GRIDFS_CASES = [case for case in CASES if case[0].startswith("gridfs-")]
PYMONGO_GRIDFS_SKIP = {
    "drop": "GridFSBucket.drop: PyMongo 4.20's bucket has none (greenpool.gridfs's is the "
            "spec's)",
}


@pytest.mark.parametrize(
    ("file_name", "spec", "test"), GRIDFS_CASES,
    ids=[f"{file_name.removesuffix('.json')}[{test['description']}]"
         for file_name, _, test in GRIDFS_CASES])
def test_csot_spec_gridfs_on_pymongo(file_name: str, spec: dict[str, Any],
                                     test: dict[str, Any], replset_uri: str,
                                     deployment: Deployment) -> None:
    for operation in _operations(test["operations"]):
        if operation["name"] in PYMONGO_GRIDFS_SKIP:
            pytest.skip(PYMONGO_GRIDFS_SKIP[operation["name"]])
    run_on_collection_api(spec, test, replset_uri, deployment, CLIENTS["pymongo"],
                          pymongo.timeout)


#: The files whose cases on the collection API run on stock PyMongo too (its own client,
#: ``pymongo.timeout``) as the reference; these cases PyMongo fails.
PYMONGO_FILES = ("bulkWrite.json", "deprecated-options.json", "tailable-awaitData.json")
PYMONGO_SKIP = {
    f"tailable-awaitData[error on {name} if maxAwaitTimeMS is {how} timeoutMS]":
        "PyMongo 4.20 does not refuse a maxAwaitTimeMS as long as timeoutMS or longer, "
        "which the CSOT spec requires (greenpool refuses it)"
    for name in ("aggregate", "watch") for how in ("greater than", "equal to")
}
REFERENCE_CASES = [case for case in CASES if case[0] in PYMONGO_FILES
                   and command_runner_reason(case[1], case[2]) is None]


@pytest.mark.parametrize(
    ("file_name", "spec", "test"), REFERENCE_CASES,
    ids=[f"{file_name.removesuffix('.json')}[{test['description']}]"
         for file_name, _, test in REFERENCE_CASES])
def test_csot_spec_on_pymongo(file_name: str, spec: dict[str, Any], test: dict[str, Any],
                              replset_uri: str, deployment: Deployment,
                              request: pytest.FixtureRequest) -> None:
    case_id = request.node.callspec.id
    if case_id in PYMONGO_SKIP:
        pytest.skip(PYMONGO_SKIP[case_id])
    run_on_collection_api(spec, test, replset_uri, deployment, CLIENTS["pymongo"],
                          pymongo.timeout)
