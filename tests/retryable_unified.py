"""The Retryable Reads tests whose operations the collection API does not express
(tests/test_retryable_spec.py's COMMAND_RUNNER says which: ``count``,
``listIndexNames``), against
``greenpool.Client`` and SecantusDB's one-node replica set. Every other test of these
specs runs through the project's unified runner (tests/unified/), on the collection API.

It is the CSOT runner (tests/csot_unified.py: an operation is the command a driver sends
for it, run through ``Client.command`` or ``Client.cursor``), with what these files add:
results in the CRUD spec's shapes (a count's ``n``), the ``outcome`` of a test (the
collection's documents afterwards), and only the fail points SecantusDB implements. The
initial data and the outcome go through one PyMongo client for the whole module
(``admin``), not one per test. The caller checks the test's runOnRequirements.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import MongoClient

from tests import csot_unified
from tests.cmap_runner import SPEC_DIR
from tests.csot_unified import Collection, NotApplicable
from tests.unified_match import match, run_test

READS_DIR = SPEC_DIR / "retryable-reads" / "tests" / "unified"
WRITES_DIR = SPEC_DIR / "retryable-writes" / "tests" / "unified"

__all__ = ["FAIL_POINTS", "READS_DIR", "WRITES_DIR", "NotApplicable", "Runner"]

# The fail points SecantusDB implements (it accepts any other and ignores it).
FAIL_POINTS = frozenset({"failCommand", "failGetMoreAfterCursorCheckout",
                         "maxTimeAlwaysTimeOut"})


class Runner(csot_unified.Runner):
    """The CSOT runner with results and outcomes."""

    def __init__(self, uri: str, admin: MongoClient[dict[str, Any]]) -> None:
        super().__init__(uri)
        self._admin = admin

    def run(self, spec: Mapping[str, Any], test: Mapping[str, Any]) -> None:
        run_test(self, spec, test)
        for expected in test.get("outcome") or []:
            collection = self._admin[expected["databaseName"]][expected["collectionName"]]
            match(expected["documents"], list(collection.find({}, sort=[("_id", 1)])),
                  "outcome", root=False)

    # -- setup and teardown: one client for the module --------------------------------

    def initial_data(self, data: list[Mapping[str, Any]]) -> None:
        for item in data:
            database = self._admin[item["databaseName"]]
            database.drop_collection(item["collectionName"])
            database.create_collection(item["collectionName"])
            if item["documents"]:
                database[item["collectionName"]].insert_many(item["documents"])

    def close(self) -> None:
        failpoints, self.failpoints = self.failpoints, []
        super().close()
        for name in failpoints:
            self._admin.admin.command({"configureFailPoint": name, "mode": "off"})

    # -- operations, with the CRUD spec's results ---------------------------------------

    def op_failPoint(self, *, client: str, failPoint: Mapping[str, Any]) -> None:
        name = failPoint["configureFailPoint"]
        if name not in FAIL_POINTS:
            raise NotApplicable(f"the {name} fail point (SecantusDB accepts it and does "
                                f"nothing)")
        super().op_failPoint(client=client, failPoint=failPoint)

    def op_count(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return super().op_count(coll, filter=filter, **arguments)["n"]
