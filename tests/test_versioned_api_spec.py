"""The Versioned API spec's unified tests (``versioned-api/tests``), each file by name, on
stock PyMongo's MongoClient (the reference) and on greenpool.Client, through the same
runner (tests/unified/) against SecantusDB's one-node replica set.

Test ids are ``test_versioned_api[<file>-<client>]``. A client entity's ``serverApi``
becomes the client's ``server_api=ServerApi(...)``; the files then check that every
command carries ``apiVersion`` (and ``apiStrict``, ``apiDeprecationErrors`` when given),
getMore and a transaction's commands too, and that a client without one sends none.
A case whose runOnRequirements the server does not meet is not run, as the format says.
"""

from __future__ import annotations

import pytest

from tests.cmap_runner import SPEC_DIR
from tests.unified.deployment import Deployment
from tests.unified.runner import client_uri
from tests.unified.suite import CLIENTS, NotRun, ids, run_file, spec_files

VERSIONED_DIR = SPEC_DIR / "versioned-api" / "tests"

#: What is not run, and why: one case as ``file[description]``.
NOT_RUN: dict[str, NotRun] = {}
CASES = [(name, client) for name in spec_files(VERSIONED_DIR) for client in CLIENTS]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "client"), CASES, ids=ids(CASES))
def test_versioned_api(name: str, client: str, replset_uri: str, deployment: Deployment,
                       request: pytest.FixtureRequest) -> None:
    run_file(VERSIONED_DIR / f"{name}.json", CLIENTS[client],
             client_uri(replset_uri, {"serverSelectionTimeoutMS": 10_000}), deployment,
             NOT_RUN, request)
