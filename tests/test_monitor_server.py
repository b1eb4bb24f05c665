"""The streaming monitor against a real server: SecantusDB (or ``$GREENPOOL_TEST_URI``),
which answers awaitable hellos and streams their replies when exhaustAllowed is set; a
stepdown learned from the stream. (The spec's serverMonitoringMode.json runs against it
in tests/test_monitoring_spec.py.)
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymongo import monitoring as _m
from pymongo.server_type import SERVER_TYPE

from greenpool import Client
from greenpool.address import parse_address
from greenpool.wire.connector import connect
from greenpool.wire.link import LinkOptions
from tests.events import AllEvents
from tests.servers import ServerProcess, with_options

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]


def _address(uri: str) -> tuple[str, int | None]:
    return parse_address(uri.split("//", 1)[1].split("/", 1)[0].split(",")[0])


def test_secantusdb_streams_awaitable_hello_replies(mongodb_uri: str) -> None:
    """What the monitor relies on: with exhaustAllowed, replies keep coming
    flagged moreToCome, one per maxAwaitTimeMS while nothing changes."""
    link = connect(_address(mongodb_uri), LinkOptions(connect_timeout=10, socket_timeout=10))
    try:
        assert link.hello is not None
        version = link.hello["topologyVersion"]
        link.start_stream("admin", {"hello": 1, "topologyVersion": version,
                                    "maxAwaitTimeMS": 100})
        for _ in range(3):
            link.wait_readable(timeout=10)
            assert link.receive()["topologyVersion"] == version
            assert link.more_to_come
    finally:
        link.close()


def test_a_stepdown_is_learned_from_the_stream() -> None:
    """heartbeatFrequencyMS is a minute: the new state can only come streamed."""
    with ServerProcess(replica_set=True) as server:
        uri = with_options(server.uri, directConnection="true", heartbeatFrequencyMS=60_000)
        events = AllEvents()
        with Client(uri, event_listeners=[events]) as client:
            events.wait_for(_m.ServerHeartbeatStartedEvent, 2)
            (server_,) = client.topology.servers.values()
            assert server_.description.server_type == SERVER_TYPE.RSPrimary
            events.clear()
            tool = connect(server.address, LinkOptions(connect_timeout=10, socket_timeout=10))
            try:
                tool.command("admin", {"replSetStepDown": 60, "force": True})
            finally:
                tool.close()
            changed = events.wait_for(_m.ServerDescriptionChangedEvent)[0]
            assert changed.new_description.server_type == SERVER_TYPE.RSSecondary
            beats = events.of(_m.ServerHeartbeatSucceededEvent)
            assert beats and all(beat.awaited for beat in beats)
            assert events.names(_m.ServerHeartbeatSucceededEvent,
                                _m.ServerDescriptionChangedEvent)[-2:] == [
                "ServerHeartbeatSucceededEvent", "ServerDescriptionChangedEvent"]


def test_a_streaming_client_never_keeps_hub_join_waiting(mongodb_uri: str) -> None:
    script = textwrap.dedent("""
        import sys
        import gevent
        import greenpool
        client = greenpool.Client(sys.argv[1])
        client.command("admin", {"ping": 1})
        monitor = next(iter(client.topology.servers.values())).monitor
        while not monitor.streaming:
            gevent.sleep(0.01)
        assert gevent.get_hub().join(timeout=30), "Hub.join() did not return"
        print("joined", monitor.streaming)
    """)
    uri = with_options(mongodb_uri, serverMonitoringMode="stream")
    done = subprocess.run([sys.executable, "-c", script, uri], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["joined", "True"]


@pytest.fixture(autouse=True)
def _not_on_a_function_platform(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_EXECUTION_ENV", "AWS_LAMBDA_RUNTIME_API", "FUNCTIONS_WORKER_RUNTIME",
                 "K_SERVICE", "FUNCTION_NAME", "VERCEL"):
        monkeypatch.delenv(name, raising=False)
    yield
