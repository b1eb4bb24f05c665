"""The Load Balancer spec tests (``load-balancers/tests/*.json``), one pytest test per case,
named ``<file stem>[<description>]``, run by tests/lb_unified.py against greenpool.Client
behind the LB proxy fixture in front of two SecantusDB servers.

Cases that fail because of a greenpool bug are marked ``xfail(strict=True)`` with the
diagnosis in ``KNOWN_DEVIATIONS``; fix greenpool, then delete the entry.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import gevent
import pytest
from pymongo import monitoring as _m
from pymongo.errors import AutoReconnect

from greenpool import Client
from tests.events import AllEvents
from tests.lb_proxy import LBCluster, LBProxy
from tests.lb_unified import LB_DIR, Runner, load_cases, skip_reason
from tests.servers import ADMIN, ServerProcess

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


@pytest.mark.timeout(60)
def test_load_balancers_sdam_error_handling_errors_during_authentication_are_processed() -> None:
    """sdam-error-handling.json's "errors during authentication are processed" (the one
    case with ``auth: true``), by hand, against a load balancer in front of a server
    running with ``--auth``: a network error in saslContinue clears that service only."""
    with (
        ServerProcess(users=[ADMIN]) as server,
        LBProxy([server.address]) as proxy,
    ):
        events = AllEvents()
        credentials = f"{quote(ADMIN.name)}:{quote(ADMIN.password)}@"
        uri = proxy.uri.replace("mongodb://", f"mongodb://{credentials}")
        uri += "&appname=lbSDAMErrorTestClient&retryWrites=false&serverSelectionTimeoutMS=5000"
        with server.client(user=ADMIN) as admin, Client(uri, event_listeners=[events]) as client:
            admin.admin.command({
                "configureFailPoint": "failCommand", "mode": {"times": 1},
                "data": {"failCommands": ["saslContinue"], "closeConnection": True,
                         "appName": "lbSDAMErrorTestClient"}})
            try:
                with pytest.raises(AutoReconnect):  # isClientError: a network error
                    client.command("singleDB", {"insert": "singleColl",
                                                "documents": [{"x": 1}]})
            finally:
                admin.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
            gevent.sleep(0)
            observed = events.of(
                _m.ConnectionCreatedEvent, _m.PoolClearedEvent, _m.ConnectionClosedEvent,
                _m.ConnectionCheckOutFailedEvent, _m.ConnectionReadyEvent,
                _m.ConnectionCheckedOutEvent, _m.ConnectionCheckedInEvent)
            assert [type(e).__name__ for e in observed] == [
                "ConnectionCreatedEvent", "PoolClearedEvent", "ConnectionClosedEvent",
                "ConnectionCheckOutFailedEvent"]
            assert observed[1].service_id is not None
            assert observed[2].reason == "error"
            assert observed[3].reason == "connectionError"
            # Only that service was cleared: the pool never paused.
            assert client.stats().state == "ready"
            assert client.command("singleDB", {"insert": "singleColl",
                                               "documents": [{"x": 2}]})["n"] == 1


@pytest.mark.timeout(30)
def test_load_balanced_topology_events(lb_uri: str) -> None:
    """The Load Balancer spec's SDAM sequence, exactly: no monitor, no heartbeats, the
    pool ready at once, and nothing else at open or close."""
    events = AllEvents()
    client = Client(lb_uri, event_listeners=[events])
    try:
        (server,) = client.topology.servers.values()
        assert server.monitor is None
        assert client.stats().state == "ready"
        client.command("admin", {"ping": 1})
    finally:
        client.close()
    sdam = events.of(_m.TopologyOpenedEvent, _m.TopologyDescriptionChangedEvent,
                     _m.TopologyClosedEvent, _m.ServerOpeningEvent,
                     _m.ServerDescriptionChangedEvent, _m.ServerClosedEvent,
                     _m.ServerHeartbeatStartedEvent, _m.ServerHeartbeatSucceededEvent,
                     _m.ServerHeartbeatFailedEvent)
    described = [
        (type(e).__name__,
         getattr(e, "new_description", None) and (
             e.new_description.topology_type_name
             if isinstance(e, _m.TopologyDescriptionChangedEvent)
             else e.new_description.server_type_name))
        for e in sdam]
    assert described == [
        ("TopologyOpenedEvent", None),
        ("TopologyDescriptionChangedEvent", "LoadBalanced"),
        ("ServerOpeningEvent", None),
        ("ServerDescriptionChangedEvent", "LoadBalancer"),
        ("TopologyDescriptionChangedEvent", "LoadBalanced"),
        ("ServerClosedEvent", None),
        ("TopologyDescriptionChangedEvent", "Unknown"),
        ("TopologyClosedEvent", None),
    ]
    opened = sdam[1].new_description.server_descriptions()
    assert [s.server_type_name for s in opened.values()] == ["Unknown"]
    assert [s.server_type_name for s in sdam[4].new_description.server_descriptions().values()
            ] == ["LoadBalancer"]
    assert sdam[6].new_description.server_descriptions() == {}
