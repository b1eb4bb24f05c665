"""Hostile servers and bad input: one clear error and one discarded connection.

A fake server (tests/fake_server.py) answers the handshake and then
misbehaves; each test asserts the error's type and first line, a generous
time bound, that the connection was discarded, that no descriptor or greenlet
is left behind, and that the same Client serves again once the server
behaves.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator
from typing import Any

import gevent
import greenlet
import pytest
from pymongo import monitoring as _m
from pymongo.errors import AutoReconnect

from greenpool import Client
from tests.events import AllEvents
from tests.fake_server import MORE_TO_COME, FakeServer, Raw, Request, op_msg

pytestmark = pytest.mark.timeout(60)

# Generous: the machine is shared; a hang is what these bounds catch.
BOUND = 10.0


def wait_for(condition: Any, timeout: float = BOUND) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        gevent.sleep(0.02)


def _descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _live_greenlets() -> set[int]:
    hub = gevent.get_hub()
    current = greenlet.getcurrent()
    return {
        id(g) for g in gc.get_objects()
        if isinstance(g, greenlet.greenlet) and g and g is not hub and g is not current
    }


@contextlib.contextmanager
def no_leaks() -> Iterator[None]:
    """Every descriptor and greenlet opened inside is gone soon after."""
    gevent.sleep(0.05)
    descriptors, greenlets = _descriptors(), _live_greenlets()
    yield
    wait_for(lambda: _descriptors() <= descriptors)
    wait_for(lambda: _live_greenlets() <= greenlets)


def uri(server: FakeServer, options: str = "") -> str:
    host, port = server.address
    extra = f"&{options}" if options else ""
    return f"mongodb://{host}:{port}/?directConnection=true&heartbeatFrequencyMS=500{extra}"


def where(server: FakeServer) -> str:
    host, port = server.address
    return f"{host}:{port}"


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def closed_reasons(events: AllEvents) -> list[str]:
    return [e.reason for e in events.of(_m.ConnectionClosedEvent)]


class Switch:
    """A handler that misbehaves (``hostile``) until told to behave."""

    def __init__(self, hostile: Any, good: Any = None) -> None:
        self.hostile_answer = hostile
        self.good = good if good is not None else (lambda _request: {"ok": 1.0})
        self.hostile = True

    def __call__(self, request: Request) -> Any:
        return self.hostile_answer(request) if self.hostile else self.good(request)


# -- 1. moreToCome on a plain command, and any error while a connection is in use -------------


def test_more_to_come_on_a_plain_reply_discards_the_connection() -> None:
    streamed = Switch(lambda r: Raw(op_msg({"ok": 1.0}, r.request_id, flags=MORE_TO_COME)))
    with FakeServer(handlers={"ping": streamed}) as server, no_leaks():
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            started = time.monotonic()
            with pytest.raises(AutoReconnect) as caught:
                client.command("admin", {"ping": 1})
            assert time.monotonic() - started < BOUND
            assert first_line(caught.value) == (
                f"{where(server)}: the server flagged its reply moreToCome (more replies "
                "follow) although the request did not allow exhaust")
            assert closed_reasons(events) == ["error"]
            assert client.stats().total == 0
            streamed.hostile = False
            for _ in range(3):
                assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            assert closed_reasons(events) == ["error"]
    pings = [r for r in server.requests if r.name == "ping"]
    assert len(pings) == 4
    # The connection that got the stream was closed, the next one serves.
    assert pings[0].connection != pings[1].connection == pings[3].connection
    assert pings[0].connection in server.hangups


def test_any_error_while_a_connection_is_in_use_closes_it_at_checkin() -> None:
    class Unencodable:
        pass

    with FakeServer() as server, no_leaks():
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            # Not a PyMongoError: bson cannot encode the command.
            with pytest.raises(Exception, match="cannot encode object") as caught:
                client.command("db", {"insert": "c", "documents": [{"x": Unencodable()}]})
            assert not isinstance(caught.value, AutoReconnect)
            assert closed_reasons(events) == ["error"]
            failed = events.of(_m.CommandFailedEvent)
            assert [e.command_name for e in failed] == ["insert"]
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            assert client.stats().total == 1
