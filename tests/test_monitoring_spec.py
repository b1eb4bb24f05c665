"""The Server Monitoring spec's tests, each file by name: SDAM's
``unified/serverMonitoringMode.json`` against a real server (SecantusDB, or
``$GREENPOOL_TEST_URI``), and the round-trip average of Server Selection's ``rtt/``
files, which the monitor keeps (:class:`greenpool.client.topology.roundtrips.RoundTrips`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import pytest
from pymongo import monitoring as _m

from greenpool import Client
from greenpool.client.topology.roundtrips import RoundTrips
from greenpool.wire.handshake import MIN_WIRE_VERSION
from tests.cmap_runner import SPEC_DIR
from tests.servers import with_options
from tests.spec_files import MISSING_MARK
from tests.unified_match import event_name, load_cases

pytestmark = pytest.mark.timeout(60)

MONITORING_MODE = load_cases(SPEC_DIR / "server-discovery-and-monitoring" / "tests" / "unified"
                             / "serverMonitoringMode.json")
# MongoDB 4.4 is wire version 9.
_WIRE_4_4 = 9


@pytest.fixture(autouse=True)
def _not_on_a_function_platform(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_EXECUTION_ENV", "AWS_LAMBDA_RUNTIME_API", "FUNCTIONS_WORKER_RUNTIME",
                 "K_SERVICE", "FUNCTION_NAME", "VERCEL"):
        monkeypatch.delenv(name, raising=False)
    yield


# -- unified/serverMonitoringMode.json ------------------------------------------------------


def test_the_spec_file_is_there() -> None:
    if not SPEC_DIR.exists():
        pytest.skip(f"{MISSING_MARK}: {SPEC_DIR}")
    assert [t["description"] for _, t in MONITORING_MODE] == [
        "connect with serverMonitoringMode=auto >=4.4",
        "connect with serverMonitoringMode=auto <4.4",
        "connect with serverMonitoringMode=stream >=4.4",
        "connect with serverMonitoringMode=stream <4.4",
        "connect with serverMonitoringMode=poll",
        "poll waits after successful heartbeat",
    ]


class Heartbeats(_m.ServerHeartbeatListener):
    """The observed heartbeat events of one client entity."""

    def __init__(self, observe: list[str]) -> None:
        self.observe = set(observe)
        self.events: list[Any] = []

    def _record(self, event: Any) -> None:
        if event_name(event) in self.observe:
            self.events.append(event)

    started = succeeded = failed = _record

    def count(self, name: str) -> int:
        return [event_name(e) for e in self.events].count(name)


@dataclass
class MonitoringModeRunner:
    """Just what serverMonitoringMode.json uses: client and database entities,
    runCommand, waitForEvent, wait, assertEventCount and sdam expectEvents."""

    uri: str
    clients: dict[str, tuple[Client, Heartbeats]] = field(default_factory=dict)
    databases: dict[str, tuple[str, str]] = field(default_factory=dict)

    def run(self, test: Mapping[str, Any]) -> None:
        try:
            for operation in test["operations"]:
                arguments = dict(operation.get("arguments") or {})
                getattr(self, f"op_{operation['name']}")(operation["object"], **arguments)
            for expected in test.get("expectEvents") or []:
                self.check_events(expected)
        finally:
            for client, _ in self.clients.values():
                client.close()

    def op_createEntities(self, _target: str, *, entities: list[Any]) -> None:
        for entity in entities:
            ((kind, spec),) = entity.items()
            if kind == "client":
                heartbeats = Heartbeats(spec["observeEvents"])
                options = {key: str(value) for key, value in spec["uriOptions"].items()}
                client = Client(with_options(self.uri, **options), event_listeners=[heartbeats])
                self.clients[spec["id"]] = (client, heartbeats)
            else:
                assert kind == "database", kind
                self.databases[spec["id"]] = (spec["client"], spec["databaseName"])

    def op_runCommand(self, target: str, *, command: dict[str, Any], commandName: str,
                      ) -> None:
        client_id, database = self.databases[target]
        assert self.clients[client_id][0].command(database, command)["ok"] == 1

    def op_waitForEvent(self, _target: str, *, client: str, event: dict[str, Any],
                        count: int) -> None:
        ((name, fields),) = event.items()
        assert not fields
        heartbeats = self.clients[client][1]
        with gevent.Timeout(30, AssertionError(f"no {count} {name}")):
            while heartbeats.count(name) < count:
                gevent.sleep(0.01)

    def op_wait(self, _target: str, *, ms: int) -> None:
        gevent.sleep(ms / 1000)

    def op_assertEventCount(self, _target: str, *, client: str, event: dict[str, Any],
                            count: int) -> None:
        ((name, fields),) = event.items()
        assert not fields
        assert self.clients[client][1].count(name) == count

    def check_events(self, expected: Mapping[str, Any]) -> None:
        assert expected["eventType"] == "sdam" and expected["ignoreExtraEvents"]
        actual = self.clients[expected["client"]][1].events
        wanted = expected["events"]
        assert len(actual) >= len(wanted)
        for index, (want, event) in enumerate(zip(wanted, actual, strict=False)):
            ((name, fields),) = want.items()
            assert event_name(event) == name, f"event {index}: {event_name(event)}, not {name}"
            assert set(fields) <= {"awaited"}, fields
            if "awaited" in fields:
                assert event.awaited is fields["awaited"], f"event {index}: awaited {fields}"


def _skip_reason(test: Mapping[str, Any]) -> str | None:
    for requirement in test.get("runOnRequirements") or []:
        if requirement.get("maxServerVersion", "99") < "4.4" and MIN_WIRE_VERSION >= _WIRE_4_4:
            return (f"for servers older than 4.4, which greenpool does not speak to (wire "
                    f"version {MIN_WIRE_VERSION} and up); test_monitor_streaming polls a "
                    f"server without topologyVersion")
    return None


@pytest.mark.parametrize(("spec", "test"), MONITORING_MODE,
                         ids=[t["description"] for _, t in MONITORING_MODE])
def test_server_monitoring_mode(spec: dict[str, Any], test: dict[str, Any],
                                mongodb_uri: str) -> None:
    reason = _skip_reason(test)
    if reason:
        pytest.skip(reason)
    MonitoringModeRunner(mongodb_uri).run(test)


# -- server-selection/tests/rtt ---------------------------------------------------------------


RTT_FILES = sorted((SPEC_DIR / "server-selection" / "tests" / "rtt").glob("*.json"))


def test_the_rtt_spec_files_are_there() -> None:
    if not SPEC_DIR.exists():
        pytest.skip(f"{MISSING_MARK}: {SPEC_DIR}")
    assert len(RTT_FILES) == 7


@pytest.mark.parametrize("path", RTT_FILES, ids=[p.stem for p in RTT_FILES])
def test_rtt_spec(path: Path) -> None:
    """server-selection/tests/rtt: the average after one more sample."""
    case = json.loads(path.read_text())
    trips = RoundTrips()
    if case["avg_rtt_ms"] != "NULL":
        trips.add(case["avg_rtt_ms"] / 1000)  # the first sample is the average
    trips.add(case["new_rtt_ms"] / 1000)
    assert trips.average is not None
    assert trips.average * 1000 == pytest.approx(case["new_avg_rtt"])
