"""Listeners get from greenpool the calls PyMongo makes on them, decided per object.

PyMongo's MongoClient calls every method of an interface on each registered
listener (pymongo.monitoring's ``publish_*``): what the method resolves to on
the object is what runs, whether its class defines it, the instance holds it,
or ``__getattr__``/``__getattribute__`` answers. Four listeners of every
interface, one of each kind, go through the same workload on PyMongo's own
MongoClient and on greenpool.Client, and must see the same (method, event)
calls: pool (CMAP) events, command events and SDAM events. PyMongo's abstract
stubs, which only raise NotImplementedError, are the one thing greenpool does
not call; they run no listener code.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any
from unittest import mock

import pymongo
import pytest
from pymongo import monitoring as _m

from greenpool import Client, Pool
from greenpool.pool.listeners import Subscribers, answers_itself, handler
from tests.mock import MockConnector

INTERFACES = (_m.ConnectionPoolListener, _m.CommandListener, _m.ServerListener,
              _m.ServerHeartbeatListener, _m.TopologyListener)
#: Every method of every interface (some names serve two: started, opened...).
METHODS = sorted({name for interface in INTERFACES for name in vars(interface)
                  if not name.startswith("_")})
#: What the plain listener overrides and the instance listener holds: a few of
#: each interface's, so that both drivers must leave the others alone.
CHOSEN = ("connection_checked_out", "pool_ready", "started", "opened", "description_changed")
#: The events both drivers publish for the workload below (a ping, then close),
#: as (method, event class); a driver's own extras (PyMongo's
#: ServerHeartbeatStarted of a streaming check, say) are not compared.
COMPARED = {
    ("pool_created", "PoolCreatedEvent"), ("pool_ready", "PoolReadyEvent"),
    ("pool_closed", "PoolClosedEvent"), ("connection_created", "ConnectionCreatedEvent"),
    ("connection_ready", "ConnectionReadyEvent"), ("connection_closed", "ConnectionClosedEvent"),
    ("connection_check_out_started", "ConnectionCheckOutStartedEvent"),
    ("connection_checked_out", "ConnectionCheckedOutEvent"),
    ("connection_checked_in", "ConnectionCheckedInEvent"),
    ("started", "CommandStartedEvent"), ("succeeded", "CommandSucceededEvent"),
    ("started", "ServerHeartbeatStartedEvent"), ("succeeded", "ServerHeartbeatSucceededEvent"),
    ("opened", "ServerOpeningEvent"), ("opened", "TopologyOpenedEvent"),
    ("description_changed", "ServerDescriptionChangedEvent"),
    ("description_changed", "TopologyDescriptionChangedEvent"),
    ("closed", "ServerClosedEvent"), ("closed", "TopologyClosedEvent"),
}

Calls = set[tuple[str, str]]


class Every(*INTERFACES):  # type: ignore[misc]
    """A listener of every interface that overrides nothing: every method is
    PyMongo's abstract stub."""


def _recorder(calls: Calls, method: str) -> Callable[[Any], None]:
    def record(event: Any) -> None:
        calls.add((method, type(event).__name__))
    return record


def plain(calls: Calls) -> object:
    """A subclass that overrides some methods: the ordinary listener."""
    overrides = {name: lambda self, event, name=name: calls.add((name, type(event).__name__))
                 for name in CHOSEN}
    return type("Plain", (Every,), overrides)()


def on_the_instance(calls: Calls) -> object:
    """Methods set on the instance, the class overriding none."""
    listener = Every()
    for name in CHOSEN:
        setattr(listener, name, _recorder(calls, name))
    return listener


def by_getattr(calls: Calls) -> object:
    """A ``unittest.mock.Mock`` specced as a listener of every interface: its
    ``__getattr__`` answers every method."""
    listener = mock.Mock(spec=Every)
    for name in METHODS:
        getattr(listener, name).side_effect = _recorder(calls, name)
    return listener


def by_getattribute(calls: Calls) -> object:
    """A class whose ``__getattribute__`` routes every listener method."""
    class Routed(Every):
        def __getattribute__(self, name: str) -> Any:
            if name in METHODS:
                return _recorder(calls, name)
            return object.__getattribute__(self, name)
    return Routed()


KINDS = {"plain": plain, "on_the_instance": on_the_instance, "by_getattr": by_getattr,
         "by_getattribute": by_getattribute}


def pymongo_calls(uri: str, make: Callable[[Calls], object]) -> Calls:
    calls: Calls = set()
    listener = make(calls)
    # PyMongo prints the NotImplementedError of each abstract stub it calls.
    with contextlib.redirect_stderr(io.StringIO()):
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            uri, event_listeners=[listener], directConnection=True)
        try:
            client.admin.command("ping")
        finally:
            client.close()
    return calls


def greenpool_calls(uri: str, make: Callable[[Calls], object]) -> Calls:
    calls: Calls = set()
    with Client(uri, event_listeners=[make(calls)]) as client:
        client.command("admin", {"ping": 1})
    return calls


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_greenpool_calls_what_pymongo_calls_on_each_kind_of_listener(
        mongodb_uri: str, kind: str) -> None:
    make = KINDS[kind]
    expected = pymongo_calls(mongodb_uri, make) & COMPARED
    got = greenpool_calls(mongodb_uri, make) & COMPARED
    assert got == expected
    if kind in ("plain", "on_the_instance"):
        assert {method for method, _ in got} == set(CHOSEN)
    else:
        assert got == COMPARED  # every method answered: every event


# -- the rule itself, without a server ---------------------------------------------------------


def test_what_each_kind_resolves_to() -> None:
    calls: Calls = set()
    listeners = {kind: make(calls) for kind, make in KINDS.items()}
    assert [kind for kind, each in listeners.items() if answers_itself(each)] == [
        "by_getattr", "by_getattribute"]
    for kind, each in listeners.items():
        assert handler(each, "connection_checked_out") is not None, kind
        expected_in = kind in ("by_getattr", "by_getattribute")
        assert (handler(each, "connection_checked_in") is not None) is expected_in, kind
    assert handler(Every(), "connection_checked_out") is None


def test_a_listener_answering_lookups_is_asked_at_every_event() -> None:
    calls: Calls = set()
    answers = {"connection_checked_in": False}

    class Sometimes(Every):
        def __getattribute__(self, name: str) -> Any:
            if answers.get(name):
                return _recorder(calls, name)
            return object.__getattribute__(self, name)

    subscribers = Subscribers([Sometimes()], ["connection_checked_in"])
    event = _m.ConnectionCheckedInEvent(("db.test", 27017), 1)
    assert subscribers.takers("connection_checked_in")  # it may take it: build the event
    subscribers.notify("connection_checked_in", event)
    assert not calls  # it resolved to the stub: not called
    answers["connection_checked_in"] = True
    subscribers.notify("connection_checked_in", event)
    assert calls == {("connection_checked_in", "ConnectionCheckedInEvent")}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_pool_alone_calls_each_kind(kind: str) -> None:
    calls: Calls = set()
    pool: Pool[Any] = Pool(("db.test", 27017), connector=MockConnector(),
                           listeners=[KINDS[kind](calls)])
    pool.ready()
    pool.checkin(pool.checkout())
    pool.close()
    methods = {method for method, _ in calls}
    cmap = {name for name in vars(_m.ConnectionPoolListener) if not name.startswith("_")}
    if kind in ("plain", "on_the_instance"):
        assert methods == {"connection_checked_out", "pool_ready"}
    else:
        assert methods == cmap - {"pool_cleared", "connection_check_out_failed"}
