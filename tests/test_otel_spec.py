"""The OpenTelemetry spec's unified tests (``open-telemetry/tests``: ``operation/`` and
``transaction/``), each file by name, on greenpool.Client only, through the runner
(tests/unified/) against SecantusDB's one-node replica set.

greenpool.Client only: stock PyMongo 4.20 has no tracing (its MongoClient takes no
``tracing`` option), so it has no reference run here. A client entity's
``observeTracingMessages`` becomes ``tracing={"enabled": True, ...}`` and the spans are
read from the OpenTelemetry SDK's in-memory exporter (tests/unified/tracing.py). Test
ids are ``test_open_telemetry[<dir>/<file>]``. A case whose runOnRequirements the server
does not meet is not run, as the format says; :data:`NOT_RUN` lists the cases SecantusDB
cannot run, each with the error its missing feature causes.
"""

from __future__ import annotations

import pytest

from tests.cmap_runner import SPEC_DIR
from tests.unified.deployment import Deployment
from tests.unified.runner import client_uri
from tests.unified.suite import NotRun, greenpool_client, run_file, spec_files

pytest.importorskip("opentelemetry.sdk.trace")

OTEL_DIR = SPEC_DIR / "open-telemetry" / "tests"

#: What is not run, and why: a file, or one case as ``file[description]``.
NOT_RUN: dict[str, NotRun] = {
    # Not the server: the client's API. The file's mapReduce is a collection helper.
    "operation/map_reduce": NotRun(
        "PyMongo 4 removed Collection.map_reduce (the mapReduce command runs through "
        "Database.command) and greenpool.Client has PyMongo's API, so the file's "
        "collection.mapReduce operation has no method to call"),
}
CASES = [f"{folder}/{name}" for folder in ("operation", "transaction")
         for name in spec_files(OTEL_DIR / folder)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", CASES)
def test_open_telemetry(name: str, replset_uri: str, deployment: Deployment,
                        request: pytest.FixtureRequest) -> None:
    run_file(OTEL_DIR / f"{name}.json", greenpool_client,
             client_uri(replset_uri, {"serverSelectionTimeoutMS": 10_000}), deployment,
             {key.partition("/")[2]: value for key, value in NOT_RUN.items()
              if key.startswith(name.partition("/")[0] + "/")}, request)
