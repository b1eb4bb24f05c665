"""SDAM log messages on ``greenpool.topology``: the spec's ``logging-loadbalanced.json``
(unified format, by name) behind the load balancer fixture, and the messages of a
monitored single server, heartbeats included, checked field by field against the SDAM
Logging and Monitoring spec.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import gevent
import pytest
from bson.objectid import ObjectId

from greenpool import Client
from tests.cmap_runner import SPEC_DIR
from tests.failpoints import failpoint
from tests.lb_proxy import LBCluster
from tests.logging_unified import LoggingRunner
from tests.servers import with_options
from tests.unified_match import load_cases

pytestmark = pytest.mark.timeout(60)

LOGGING_LB = load_cases(
    SPEC_DIR / "server-discovery-and-monitoring" / "tests" / "unified"
    / "logging-loadbalanced.json")


def test_the_spec_file_is_there() -> None:
    assert [t["description"] for _, t in LOGGING_LB] == ["Topology lifecycle"]


@pytest.mark.parametrize(("spec", "test"), LOGGING_LB,
                         ids=[t["description"] for _, t in LOGGING_LB])
def test_logging_loadbalanced(spec: dict[str, Any], test: dict[str, Any],
                              lb: LBCluster) -> None:
    LoggingRunner(lb.uri).run(spec, test)


def topology_records(caplog: pytest.LogCaptureFixture, topology_id: ObjectId,
                     ) -> list[dict[str, Any]]:
    found = []
    for record in caplog.records:
        if record.name != "greenpool.topology":
            continue
        assert record.levelno == logging.DEBUG
        data: dict[str, Any] = record.structured  # type: ignore[attr-defined]
        if data["topologyId"] == topology_id:
            found.append({**data, "text": record.getMessage()})
    return found


def test_a_monitored_server_logs_its_lifecycle_and_heartbeats(
        mongodb_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.topology")
    with Client(mongodb_uri) as client:
        client.command("admin", {"ping": 1})
        topology_id = client.topology.topology_id
        host, port = client.address
    records = topology_records(caplog, topology_id)
    names = [r["message"] for r in records]
    assert names[:3] == ["Starting topology monitoring", "Topology description changed",
                         "Starting server monitoring"]
    assert names[-3:] == ["Stopped server monitoring", "Topology description changed",
                          "Stopped topology monitoring"]
    started = records[names.index("Server heartbeat started")]
    succeeded = records[names.index("Server heartbeat succeeded")]
    # The first check opens the monitoring connection: the server's id is not known yet.
    assert started["awaited"] is False and started["driverConnectionId"] == 1
    assert "serverConnectionId" not in started
    assert (started["serverHost"], started["serverPort"]) == (host, port)
    assert succeeded["driverConnectionId"] == 1
    assert isinstance(succeeded["serverConnectionId"], int)
    assert isinstance(succeeded["durationMS"], float) and succeeded["durationMS"] >= 0
    assert json.loads(succeeded["reply"])["ok"] == 1  # relaxed extended JSON
    assert (f"Heartbeat succeeded in {succeeded['durationMS']:g} ms for {host}:{port} on "
            f"connection with driver-generated ID 1") in succeeded["text"]
    changed = records[1]
    assert "topology_type: Unknown, servers: []" in changed["previousDescription"]
    assert f"topology_type: Unknown, servers: [<ServerDescription ('{host}', {port})" in (
        changed["newDescription"])  # the seed, before its first check
    assert changed["text"].startswith(f"Description changed for topology with ID {topology_id}")
    # Discovery: a standalone that was the one seed makes the topology Single.
    discovered = records[names.index("Topology description changed", 2)]
    assert "topology_type: Single" in discovered["newDescription"]
    # No message for ServerDescriptionChanged (the spec leaves it out).
    assert "Server description changed" not in names


def test_a_failed_heartbeat_is_logged_with_its_failure(
        mongodb_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.topology")
    app = f"hbfail{ObjectId()}"
    uri = with_options(mongodb_uri, appName=app, heartbeatFrequencyMS=500)
    with Client(uri) as client:
        client.command("admin", {"ping": 1})
        topology_id = client.topology.topology_id
        command = {"configureFailPoint": "failCommand", "mode": {"times": 1},
                   "data": {"failCommands": ["hello", "isMaster"], "closeConnection": True,
                            "appName": app}}
        with failpoint(mongodb_uri, command), gevent.Timeout(
                30, AssertionError("no failed heartbeat followed by a successful one")):
            # The next heartbeat fails; the monitor retries at once on a new connection.
            while True:
                names = [r["message"] for r in topology_records(caplog, topology_id)]
                if "Server heartbeat failed" in names and (
                        names[names.index("Server heartbeat failed"):].count(
                            "Server heartbeat succeeded") >= 1):
                    break
                (server,) = client.topology.servers.values()
                server.monitor.request_check()  # type: ignore[union-attr]
                gevent.sleep(0.1)
    records = topology_records(caplog, topology_id)
    failed = next(r for r in records if r["message"] == "Server heartbeat failed")
    assert failed["driverConnectionId"] == 1 and isinstance(failed["serverConnectionId"], int)
    assert failed["failure"] and isinstance(failed["durationMS"], float)
    assert "Failure: " in failed["text"]
    after = records[records.index(failed) + 1:]
    reconnected = [r for r in after if r["message"] == "Server heartbeat started"]
    assert reconnected and reconnected[0]["driverConnectionId"] == 2, (
        "the failed connection was closed: the next check opens connection 2")
