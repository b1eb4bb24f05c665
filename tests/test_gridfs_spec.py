"""The GridFS spec's unified tests (``gridfs/tests``), each file by name, on stock
PyMongo's MongoClient with PyMongo's :mod:`gridfs` (the reference) and on
greenpool.Client with :mod:`greenpool.gridfs`, through the same runner
(tests/unified/; the bucket entity and its operations are tests/unified/gridfs_ops.py)
against SecantusDB's one-node replica set.

Test ids are ``test_gridfs[<file>-<client>]``. Every case of every file runs on both.
"""

from __future__ import annotations

import pytest

from tests.cmap_runner import SPEC_DIR
from tests.unified.deployment import Deployment
from tests.unified.runner import client_uri
from tests.unified.suite import CLIENTS, NotRun, ids, run_file, spec_files

GRIDFS_DIR = SPEC_DIR / "gridfs" / "tests"

#: What is not run, and why: nothing.
NOT_RUN: dict[str, NotRun] = {}
CASES = [(name, client) for name in spec_files(GRIDFS_DIR) for client in CLIENTS]


@pytest.mark.parametrize(("name", "client"), CASES, ids=ids(CASES))
def test_gridfs(name: str, client: str, replset_uri: str, deployment: Deployment,
                request: pytest.FixtureRequest) -> None:
    run_file(GRIDFS_DIR / f"{name}.json", CLIENTS[client],
             client_uri(replset_uri, {"serverSelectionTimeoutMS": 10_000}), deployment,
             NOT_RUN, request)
