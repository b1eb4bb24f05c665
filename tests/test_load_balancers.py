"""The Load Balancer spec tests (``load-balancers/tests/*.json``), one pytest test per case,
named ``<file stem>[<description>]``, run by tests/lb_unified.py against greenpool.Client
behind the LB proxy fixture in front of two SecantusDB servers.

Cases that fail because of a greenpool bug are marked ``xfail(strict=True)`` with the
diagnosis in ``KNOWN_BUGS``; fix greenpool, then delete the entry.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.lb_proxy import LBCluster
from tests.lb_unified import LB_DIR, Runner, load_cases, skip_reason

CASES = load_cases()

# (file stem, description) -> why greenpool fails it.
CURSOR_NOT_PINNED = (
    "greenpool bug: a load-balanced cursor is never pinned by its opening command. "
    "Cursor._round_trip passes keep=self._keep to Client._lease, which calls keep(conn) when "
    "the with block ends, before Cursor.__init__ runs self._read(reply) and sets self._id; "
    "_keep sees id 0 and the connection is checked in, so every getMore/killCursors checks "
    "a connection out again (possibly to the other backend)")
CLOSED_AS_STALE = (
    "greenpool bug: a connection that had a network error is closed with reason 'stale', "
    "not 'error'. Client._send runs topology.handle_error first, which clears the pool for "
    "the connection's serviceId (its generation is now old), and Pool._put_back tests "
    "is_stale(conn) before conn.error at checkin")
NO_COMMIT_ABORT_RETRY = (
    "greenpool: commitTransaction/abortTransaction are not retried once after a retryable "
    "(network) error, so the second {name} commandStartedEvent is missing (being added in "
    "session.py); the connection is also closed as 'stale' instead of 'error' ("
    + CLOSED_AS_STALE + ")")

# (file stem, description) -> why greenpool fails it.
KNOWN_BUGS: dict[tuple[str, str], str] = {
    **{("cursors", description): CURSOR_NOT_PINNED for description in (
        "pinned connections are returned when the cursor is drained",
        "pinned connections are returned to the pool when the cursor is closed",
        "pinned connections are not returned to the pool after a non-network error on getMore",
        "aggregate pins the cursor to a connection",
        "listCollections pins the cursor to a connection",
        "listIndexes pins the cursor to a connection",
        "change streams pin to a connection",
    )},
    **{("cursors", description): CURSOR_NOT_PINNED + "; then: " + CLOSED_AS_STALE
       for description in (
           "pinned connections are not returned after an network error during getMore",
           "pinned connections are returned after a network error during a killCursors "
           "request",
       )},
    ("sdam-error-handling", "only connections for a specific serviceId are closed when pools "
     "are cleared"): CURSOR_NOT_PINNED + " (the two cursors share one connection)",
    ("sdam-error-handling", "stale errors are ignored"): (
        CURSOR_NOT_PINNED + " (the second cursor's getMore runs on a new connection of the "
        "new generation, so its error clears the pool a second time)"),
    ("wait-queue-timeouts", "wait queue timeout errors include cursor statistics"): (
        CURSOR_NOT_PINNED + " (with maxPoolSize=1 the insert gets the free connection)"),
    ("transactions", "sessions are reused in LB mode"): (
        "greenpool has no implicit sessions: Client.command without session= sends no lsid, "
        "so there is no lsid to compare (Sessions spec: implicit sessions from a server "
        "session pool)"),
    ("transactions", "pinned connection is not released after a non-transient CRUD error"): (
        "greenpool bug: Client._lease pins a transaction's connection "
        "(_pin_to_transaction) only after the first command succeeds; when that command "
        "fails with a non-transient server error (code 51) the finally checks the "
        "connection in, so the transaction is left unpinned (0 checked out, expected 1)"),
    ("transactions", "pinned connection is released after a transient network CRUD error"):
        CLOSED_AS_STALE,
    ("transactions", "pinned connection is released after a transient network commit error"):
        NO_COMMIT_ABORT_RETRY.format(name="commitTransaction"),
    ("transactions", "pinned connection is released after a transient network abort error"):
        NO_COMMIT_ABORT_RETRY.format(name="abortTransaction"),
    ("lb-connection-establishment", "operations against load balancers fail if URI contains "
     "loadBalanced=false"): (
        "greenpool (like PyMongo) raises ServerSelectionTimeoutError after "
        "serverSelectionTimeoutMS: the monitor's handshake gets OperationFailure 354 "
        "(LoadBalancerSupportMismatch) from the balancer and the server stays Unknown; the "
        "case expects the server error itself (isClientError: false). The spec marks it "
        "skipReason (servers do not refuse yet); decide whether greenpool should surface a "
        "handshake's server error from server selection at once"),
}


def _params() -> list[Any]:
    params = []
    for stem, spec, test in CASES:
        marks: list[Any] = []
        reason = skip_reason(test)
        if reason is not None:
            marks.append(pytest.mark.skip(reason=reason))
        bug = KNOWN_BUGS.get((stem, test["description"]))
        if bug is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=bug))
        params.append(pytest.param(stem, spec, test, id=f"{stem}-{test['description']}",
                                   marks=marks))
    return params


def test_the_spec_files_are_there() -> None:
    """One visible failure when the spec files are missing; never a silent pass."""
    if not CASES:
        pytest.skip(f"Load Balancer spec tests not found in {LB_DIR} "
                    "(set GREENPOOL_SPEC_TESTS to the spec-tests 'source' directory)")
    assert len(CASES) == 40
    names = {(stem, test["description"]) for stem, _, test in CASES}
    assert set(KNOWN_BUGS) <= names, f"stale KNOWN_BUGS entries: {set(KNOWN_BUGS) - names}"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("stem", "spec", "test"), _params())
def test_load_balancers(
    stem: str, spec: dict[str, Any], test: dict[str, Any], lb: LBCluster,
    lb_single_cluster: LBCluster,
) -> None:
    runner = Runner(lb, lb_single_cluster.uri, non_lb=stem == "non-lb-connection-establishment")
    runner.run(spec, test)
