"""A runner for the CMAP spec's cmap-format tests (unit and integration).

Spec threads are greenlets, each working through its own queue of
operations. The runner follows cmap-format/README.md: operations run in
order on the main greenlet or are handed to a named thread; afterwards the
main thread's error and the recorded events are checked with the spec's
MATCH rules (``42`` and ``"42"`` mean "any value").
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.queue
from pymongo import monitoring

from greenpool import Pool

SPEC_DIR = Path(
    os.environ.get(
        "GREENPOOL_SPEC_TESTS",
        Path(__file__).resolve().parents[2] / "shared" / "spec-tests" / "source",
    )
)
CMAP_DIR = SPEC_DIR / "connection-monitoring-and-pooling" / "tests" / "cmap-format"

# PyMongo event class -> spec event type.
EVENT_TYPES = {
    monitoring.PoolCreatedEvent: "ConnectionPoolCreated",
    monitoring.PoolReadyEvent: "ConnectionPoolReady",
    monitoring.PoolClearedEvent: "ConnectionPoolCleared",
    monitoring.PoolClosedEvent: "ConnectionPoolClosed",
    monitoring.ConnectionCreatedEvent: "ConnectionCreated",
    monitoring.ConnectionReadyEvent: "ConnectionReady",
    monitoring.ConnectionClosedEvent: "ConnectionClosed",
    monitoring.ConnectionCheckOutStartedEvent: "ConnectionCheckOutStarted",
    monitoring.ConnectionCheckOutFailedEvent: "ConnectionCheckOutFailed",
    monitoring.ConnectionCheckedOutEvent: "ConnectionCheckedOut",
    monitoring.ConnectionCheckedInEvent: "ConnectionCheckedIn",
}

# Spec field -> attribute of PyMongo's event.
EVENT_FIELDS = {
    "address": "address",
    "connectionId": "connection_id",
    "duration": "duration",
    "options": "options",
    "reason": "reason",
    "serviceId": "service_id",
    "interruptInUseConnections": "interrupt_connections",
}

DEFAULT_WAIT = 10.0  # seconds, for waitForEvent/waitForThread without a timeout


def load_cmap_tests() -> list[tuple[str, dict[str, Any]]]:
    """(file stem, test) for every JSON test file, sorted by name."""
    return [(path.stem, json.loads(path.read_text())) for path in sorted(CMAP_DIR.glob("*.json"))]


def event_as_dict(event: object) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": EVENT_TYPES[type(event)]}
    for field, attribute in EVENT_FIELDS.items():
        if hasattr(event, attribute):
            doc[field] = getattr(event, attribute)
    return doc


def error_as_dict(error: BaseException) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": type(error).__name__}
    for field in ("message", "address"):
        if hasattr(error, field):
            doc[field] = getattr(error, field)
    return doc


def assert_matches(actual: Any, expected: Any, path: str = "") -> None:
    """The spec's MATCH: ``expected`` is a subset of ``actual``; 42 = anything."""
    if expected in (42, "42") and not isinstance(expected, bool):
        assert actual is not None, f"{path}: expected a value, got nothing"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a document, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key}: missing from {actual!r}"
            assert_matches(actual[key], value, f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{path}: expected an array, got {actual!r}"
        for index, value in enumerate(expected):
            assert index < len(actual), f"{path}[{index}]: missing from {actual!r}"
            assert_matches(actual[index], value, f"{path}[{index}]")
    else:
        assert type(actual) is type(expected) or (
            isinstance(actual, (int, float)) and isinstance(expected, (int, float))
        ), f"{path}: expected {expected!r}, got {actual!r}"
        assert actual == expected, f"{path}: expected {expected!r}, got {actual!r}"


class Recorder(monitoring.ConnectionPoolListener):
    """Records every event and wakes whoever waits for a count of one type."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self._changed = gevent.event.Event()

    def _record(self, event: object) -> None:
        self.events.append(event)
        self._changed.set()

    pool_created = pool_ready = pool_cleared = pool_closed = _record
    connection_created = connection_ready = connection_closed = _record
    connection_check_out_started = connection_check_out_failed = _record
    connection_checked_out = connection_checked_in = _record

    def count(self, event_type: str) -> int:
        return sum(1 for e in self.events if EVENT_TYPES[type(e)] == event_type)

    def wait_for(self, event_type: str, count: int, timeout: float) -> None:
        with gevent.Timeout(timeout, AssertionError(
            f"timed out after {timeout}s waiting for {count} {event_type} events; "
            f"saw {[EVENT_TYPES[type(e)] for e in self.events]}"
        )):
            while self.count(event_type) < count:
                self._changed.clear()
                self._changed.wait()


class SpecThread:
    """A spec "thread": a greenlet running the operations it is handed."""

    def __init__(self, name: str, run: Callable[[dict[str, Any]], None]) -> None:
        self.name = name
        self.error: BaseException | None = None
        self._ops: gevent.queue.Queue[dict[str, Any] | None] = gevent.queue.Queue()
        self._run = run
        self.greenlet = gevent.spawn(self._loop)

    def submit(self, op: dict[str, Any]) -> None:
        self._ops.put(op)

    def finish(self, timeout: float) -> None:
        self._ops.put(None)
        with gevent.Timeout(timeout, AssertionError(f"thread {self.name} did not finish")):
            self.greenlet.join()

    def _loop(self) -> None:
        while (op := self._ops.get()) is not None:
            if self.error is not None:
                continue  # a failed thread runs nothing more
            try:
                self._run(op)
            except Exception as error:
                self.error = error


class CmapTestRunner:
    """Runs one cmap-format test against a pool built by ``make_pool``."""

    def __init__(self, test: dict[str, Any], make_pool: Callable[..., Pool[Any]]) -> None:
        self.test = test
        self.recorder = Recorder()
        self.labels: dict[str, Any] = {}
        self.threads: dict[str, SpecThread] = {}
        options = dict(test.get("poolOptions", {}))
        self.pool = make_pool(options, self.recorder)

    def run(self) -> None:
        error: BaseException | None = None
        try:
            for op in self.test["operations"]:
                thread = op.get("thread")
                if thread is not None:
                    self.threads[thread].submit(op)
                else:
                    self.execute(op)
        except Exception as caught:
            error = caught
        finally:
            self._cleanup()
        self.check(error)

    def execute(self, op: dict[str, Any]) -> None:
        name = op["name"]
        pool = self.pool
        if name == "start":
            target = op["target"]
            self.threads[target] = SpecThread(target, self.execute)
        elif name == "wait":
            gevent.sleep(op["ms"] / 1000)
        elif name == "waitForThread":
            thread = self.threads[op["target"]]
            thread.finish(DEFAULT_WAIT)
            if thread.error is not None:
                raise thread.error
        elif name == "waitForEvent":
            timeout = op.get("timeout", DEFAULT_WAIT * 1000) / 1000
            self.recorder.wait_for(op["event"], op["count"], timeout)
        elif name == "checkOut":
            conn = pool.checkout()
            if "label" in op:
                self.labels[op["label"]] = conn
        elif name == "checkIn":
            pool.checkin(self.labels[op["connection"]])
        elif name == "clear":
            pool.clear(interrupt_in_use_connections=op.get("interruptInUseConnections", False))
        elif name == "close":
            pool.close()
        elif name == "ready":
            pool.ready()
        else:
            raise AssertionError(f"unknown operation {name!r}")

    def check(self, error: BaseException | None) -> None:
        expected_error = self.test.get("error")
        if expected_error:
            assert error is not None, f"expected an error {expected_error}, got none"
            assert_matches(error_as_dict(error), expected_error, "error")
        elif error is not None:
            raise error
        ignore = set(self.test.get("ignore", ()))
        actual = [event_as_dict(e) for e in self.recorder.events]
        actual = [e for e in actual if e["type"] not in ignore]
        for index, expected in enumerate(self.test.get("events", [])):
            assert index < len(actual), (
                f"event {index} ({expected}) missing; got {[e['type'] for e in actual]}"
            )
            assert_matches(actual[index], expected, f"events[{index}]")

    def _cleanup(self) -> None:
        # Events are checked as recorded so far; stop everything first.
        snapshot = list(self.recorder.events)
        for thread in self.threads.values():
            thread.greenlet.kill(block=True, timeout=5)
        self.pool.close()
        self.recorder.events[:] = snapshot
