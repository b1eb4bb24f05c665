"""The Load Balancer spec tests (``load-balancers/tests/*.json``), one pytest test per case,
named ``<file stem>[<description>]``, run by tests/lb_unified.py against greenpool.Client
behind the LB proxy fixture in front of two SecantusDB servers.

Cases that fail because of a greenpool bug are marked ``xfail(strict=True)`` with the
diagnosis in ``KNOWN_DEVIATIONS``; fix greenpool, then delete the entry.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.lb_proxy import LBCluster
from tests.lb_unified import LB_DIR, Runner, load_cases, skip_reason

CASES = load_cases()

# (file stem, description) -> why greenpool fails it.
KNOWN_DEVIATIONS: dict[tuple[str, str], str] = {
    ("lb-connection-establishment", "operations against load balancers fail if URI contains "
     "loadBalanced=false"): (
        "deliberate: greenpool follows SDAM as PyMongo does. The monitor's handshake gets "
        "OperationFailure 354 (LoadBalancerSupportMismatch) from the balancer, the server "
        "stays Unknown, and the operation fails with ServerSelectionTimeoutError carrying "
        "that error after serverSelectionTimeoutMS, not with the server error itself "
        "(isClientError: false). The spec skips this case for real servers (skipReason)."),
}


def _params() -> list[Any]:
    params = []
    for stem, spec, test in CASES:
        marks: list[Any] = []
        reason = skip_reason(test)
        if reason is not None:
            marks.append(pytest.mark.skip(reason=reason))
        bug = KNOWN_DEVIATIONS.get((stem, test["description"]))
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
    stale = set(KNOWN_DEVIATIONS) - names
    assert not stale, f"stale KNOWN_DEVIATIONS entries: {stale}"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("stem", "spec", "test"), _params())
def test_load_balancers(
    stem: str, spec: dict[str, Any], test: dict[str, Any], lb: LBCluster,
    lb_single_cluster: LBCluster,
) -> None:
    runner = Runner(lb, lb_single_cluster.uri, non_lb=stem == "non-lb-connection-establishment")
    runner.run(spec, test)
