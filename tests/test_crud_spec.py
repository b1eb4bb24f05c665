"""The CRUD spec's unified tests (``crud/tests/unified``) and the Read and Write Concern
spec's operation tests (``read-write-concern/tests/operation``), each file by name, on
stock PyMongo's MongoClient (the reference) and on greenpool.Client, through the same
runner (tests/unified/) against SecantusDB's one-node replica set.

Test ids are ``test_crud[<file>-<client>]`` and ``test_read_write_concern[<file>-<client>]``.
The reference discovers the replica set; greenpool's Client, which does not discover
replica sets, connects to its member directly (tests/unified/suite.py's CLIENTS).
What is not run, and why, is NOT_RUN below, and REFERENCE_NOT_RUN on stock PyMongo alone
(docs/conformance.rst shows them, with each file's cases): an API greenpool.Client does not
offer by design (issue 28 names them), or a server feature SecantusDB lacks, proven by the
case failing with that server error on stock PyMongo too. A case whose runOnRequirements
the server does not meet (server 8.2.11, a replica set, no authentication) is not run,
as the format says.
"""

from __future__ import annotations

import pytest

from tests.cmap_runner import SPEC_DIR
from tests.unified.deployment import Deployment
from tests.unified.runner import client_uri
from tests.unified.suite import CLIENTS, COUNT, RAW_DATA, NotRun, ids, run_file, spec_files

CRUD_DIR = SPEC_DIR / "crud" / "tests" / "unified"
RWC_DIR = SPEC_DIR / "read-write-concern" / "tests" / "operation"

#: What is not run, and why: a file by name, or one case as ``file[description]``.
NOT_RUN: dict[str, NotRun] = {
    **{name: RAW_DATA for name in spec_files(CRUD_DIR) if name.endswith("-rawdata")},
    **{name: COUNT for name in ("count", "count-collation", "count-empty")},
    "findOneAndUpdate-errorResponse[findOneAndUpdate document validation errInfo is "
    "accessible]": NotRun("modifyCollection (collMod): PyMongo has no helper for it, so "
                          "neither client has one"),
    "default-write-concern-3.4[MapReduce omits default write concern]": NotRun(
        "mapReduce: removed in PyMongo 4, so neither client has it"),
}

_PARTIAL_RESULT = NotRun(
    "stock PyMongo 4.20 reports a partial result when an ordered batch's first operation "
    "fails: it counts a batch as having written something when it had fewer errors than "
    "operations, where the spec's rule for an ordered batch is no error, or a first error "
    "after an operation (greenpool.Client follows the spec)",
    server_error="'insertedCount' should not exist")

#: What the reference (stock PyMongo) fails for a reason of its own, besides NOT_RUN.
REFERENCE_NOT_RUN: dict[str, NotRun] = {
    f"client-bulkWrite-partialResults[partialResult is unset when first operation fails "
    f"during an ordered bulk write ({kind})]": _PARTIAL_RESULT for kind in ("verbose", "summary")
}

CRUD_CASES = [(name, client) for name in spec_files(CRUD_DIR) for client in CLIENTS]
RWC_CASES = [(name, client) for name in spec_files(RWC_DIR) for client in CLIENTS]


def entity_uri(replset_uri: str) -> str:
    """The URI client entities start from (their uriOptions added): one server, directly."""
    return client_uri(replset_uri, {"serverSelectionTimeoutMS": 10_000})


def test_every_table_entry_names_a_spec_file() -> None:
    if not CRUD_DIR.exists():
        pytest.skip(f"spec tests not found in {CRUD_DIR}")
    present = set(spec_files(CRUD_DIR)) | set(spec_files(RWC_DIR))
    named = {key.partition("[")[0] for key in {**NOT_RUN, **REFERENCE_NOT_RUN}}
    assert named <= present, sorted(named - present)


@pytest.mark.parametrize(("name", "client"), CRUD_CASES, ids=ids(CRUD_CASES))
def test_crud(name: str, client: str, replset_uri: str, deployment: Deployment,
              request: pytest.FixtureRequest) -> None:
    not_run = {**NOT_RUN, **REFERENCE_NOT_RUN} if client == "pymongo" else NOT_RUN
    run_file(CRUD_DIR / f"{name}.json", CLIENTS[client], entity_uri(replset_uri), deployment,
             not_run, request)


@pytest.mark.parametrize(("name", "client"), RWC_CASES, ids=ids(RWC_CASES))
def test_read_write_concern(name: str, client: str, replset_uri: str,
                            deployment: Deployment, request: pytest.FixtureRequest) -> None:
    run_file(RWC_DIR / f"{name}.json", CLIENTS[client], entity_uri(replset_uri), deployment,
             NOT_RUN, request)
