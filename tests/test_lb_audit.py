"""What an audit of the CMAP and Load Balancer specs found: sessions are never pruned
behind a load balancer, a connection takes its service's generation before it
authenticates, the LoadBalancer ServerDescription leaves every other field unset, and
the pool-created event and log message report every option the user gave.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
import gevent.event
import pytest
from bson.objectid import ObjectId
from pymongo import monitoring as _m
from pymongo.errors import OperationFailure
from pymongo.server_description import ServerDescription
from pymongo.server_type import SERVER_TYPE

from greenpool import Client, Pool, PoolOptions
from greenpool.wire.link import Link
from tests.cmap_runner import EVENT_TYPES, Recorder
from tests.events import AllEvents
from tests.lb_proxy import LBCluster
from tests.mock import MockTransport

pytestmark = pytest.mark.timeout(60)

ADDRESS = ("db.test", 27017)
_SERVER_FIELDS = (
    "all_hosts", "tags", "replica_set_name", "primary", "max_bson_size", "max_message_size",
    "max_write_batch_size", "min_wire_version", "max_wire_version", "set_version",
    "election_id", "cluster_time", "logical_session_timeout_minutes", "round_trip_time",
    "me", "error", "topology_version", "last_write_date",
)


def sent_lsids(events: AllEvents) -> list[Any]:
    return [e.command["lsid"] for e in events.of(_m.CommandStartedEvent)
            if e.command_name == "ping"]


def age_idle_sessions(client: Client, seconds: float) -> None:
    """Pretend the client's idle server sessions were last used ``seconds`` ago."""
    for server_session in client._operations._server_sessions:
        server_session.last_used -= seconds


# -- sessions ---------------------------------------------------------------------------


def test_load_balanced_mode_never_prunes_idle_sessions(lb: LBCluster) -> None:
    events = AllEvents()
    with Client(lb.uri, event_listeners=[events]) as client:
        client.command("admin", {"ping": 1})
        age_idle_sessions(client, 3600)  # far past any logicalSessionTimeoutMinutes
        client.command("admin", {"ping": 1})
    first, second = sent_lsids(events)
    assert first == second, "the Load Balancer spec: MUST NOT prune the session pool"


def test_a_direct_connection_drops_sessions_about_to_expire(replset_uri: str) -> None:
    events = AllEvents()
    with Client(f"{replset_uri}{'&' if '?' in replset_uri else '?'}directConnection=true",
                event_listeners=[events]) as client:
        client.command("admin", {"ping": 1})
        (server,) = client.topology.servers.values()
        minutes = server.description.logical_session_timeout_minutes
        assert minutes is not None, "a replica set member supports sessions"
        age_idle_sessions(client, 60)  # well within the timeout: reused
        client.command("admin", {"ping": 1})
        age_idle_sessions(client, (minutes - 1) * 60 + 1)  # within a minute of expiring
        client.command("admin", {"ping": 1})
    first, second, third = sent_lsids(events)
    assert first == second != third


# -- generation before authentication ----------------------------------------------------


class AuthenticatingConnector:
    """Reports its hello (a serviceId) at once, then "authenticates" until released."""

    def __init__(self, service_id: ObjectId, fail: BaseException | None = None) -> None:
        self.service_id = service_id
        self.fail = fail
        self.authenticating = gevent.event.Event()
        self.release = gevent.event.Event()

    def __call__(self, conn: Any) -> MockTransport:
        conn.handshake_done(self.service_id)
        self.authenticating.set()
        self.release.wait()
        if self.fail is not None:
            raise self.fail
        return MockTransport(conn.id, conn.service_id)


def test_a_clear_during_authentication_makes_the_new_connection_stale() -> None:
    service = ObjectId()
    connector = AuthenticatingConnector(service)
    recorder = Recorder()
    pool: Pool[Any] = Pool(ADDRESS, {"loadBalanced": True}, connector=connector,
                           listeners=[recorder])
    pool.ready()
    checkout = gevent.spawn(pool.checkout)
    connector.authenticating.wait(timeout=5)
    pool.clear(service_id=service)  # while the connection authenticates
    connector.release.set()
    conn = checkout.get(timeout=5)
    assert conn.service_id == service
    assert pool.is_stale(conn), "it took its generation before the clear, at the hello"
    pool.checkin(conn)
    closed = [e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionClosed"]
    assert [(e.connection_id, e.reason) for e in closed] == [(conn.id, "stale")]
    pool._check_invariants()
    assert pool._services.entries == {}
    pool.close()


def test_an_authentication_error_is_judged_by_the_generation_of_its_hello() -> None:
    service = ObjectId()
    connector = AuthenticatingConnector(service, fail=OperationFailure("auth failed", 18))
    judged: list[tuple[Any, bool]] = []
    pool: Pool[Any] = Pool(
        ADDRESS, {"loadBalanced": True}, connector=connector,
        on_establish_error=lambda error, conn: judged.append(
            (conn.service_id, pool.is_stale(conn))))
    pool.ready()
    checkout = gevent.spawn(pool.checkout)
    connector.authenticating.wait(timeout=5)
    pool.clear(service_id=service)
    connector.release.set()
    with pytest.raises(OperationFailure):
        checkout.get(timeout=5)
    # SDAM ignores errors on stale connections: this one's service was cleared after its
    # hello, so its authentication error must not clear the service again.
    assert judged == [(service, True)]
    pool._check_invariants()
    assert pool._services.entries == {}, "the service's entry goes once nobody counts in it"
    pool.close()


def test_the_link_takes_its_generation_before_authenticating(
        lb: LBCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bool, int]] = []
    events = AllEvents()
    client = Client(lb.uri, event_listeners=[events])
    authenticate = Link.authenticate

    def clear_while_authenticating(link: Link, **options: Any) -> None:
        if not seen:  # the first connection only (close's endSessions opens another)
            conn = next(iter(client.pool._pending))
            seen.append((conn._counted, conn.generation))
            client.pool.clear(service_id=conn.service_id)
        authenticate(link, **options)

    monkeypatch.setattr(Link, "authenticate", clear_while_authenticating)
    try:
        client.command("admin", {"ping": 1})
    finally:
        client.close()
    assert seen == [(True, 0)]
    closed = events.of(_m.ConnectionClosedEvent)
    assert [e.reason for e in closed][:1] == ["stale"], "checked in stale, then closed"


# -- the LoadBalancer ServerDescription ---------------------------------------------------


def test_the_load_balancer_description_has_only_address_and_type(lb: LBCluster) -> None:
    events = AllEvents()
    with Client(lb.uri, event_listeners=[events]) as client:
        changed = events.of(_m.ServerDescriptionChangedEvent)
        (server,) = client.topology.servers.values()
        described = server.description
    assert len(changed) == 1
    new = changed[0].new_description
    assert new is described
    assert (new.address, new.server_type) == (client.address, SERVER_TYPE.LoadBalancer)
    unset = ServerDescription(client.address)
    for name in _SERVER_FIELDS:
        assert getattr(new, name) == getattr(unset, name), name


# -- the pool-created options --------------------------------------------------------------


def test_options_given_at_their_default_are_reported() -> None:
    recorder = Recorder()
    options = PoolOptions({"maxPoolSize": 100, "minPoolSize": 0, "waitQueueTimeoutMS": 250})
    pool: Pool[Any] = Pool(ADDRESS, options, connector=lambda conn: MockTransport(conn.id),
                           listeners=[recorder])
    created = recorder.events[0]
    assert isinstance(created, _m.PoolCreatedEvent)
    assert created.options == {"minPoolSize": 0, "maxPoolSize": 100, "waitQueueTimeoutMS": 250}
    pool.close()


def test_the_client_reports_uri_options_at_their_default(
        mongodb_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.connection")
    events = AllEvents()
    uri = f"{mongodb_uri}{'&' if '?' in mongodb_uri else '?'}maxPoolSize=100&maxConnecting=2"
    with Client(uri, event_listeners=[events]):
        pass
    (created,) = events.of(_m.PoolCreatedEvent)
    assert created.options == {"maxPoolSize": 100, "maxConnecting": 2}
    (message,) = [r for r in caplog.records if r.name == "greenpool.connection"
                  and r.structured["message"] == "Connection pool created"]  # type: ignore[attr-defined]
    assert message.structured["maxPoolSize"] == 100  # type: ignore[attr-defined]
    assert message.structured["maxConnecting"] == 2  # type: ignore[attr-defined]
    assert "maxPoolSize=100, maxConnecting=2" in message.getMessage()
