"""Who holds the pool, through greenpool.pymongo's MongoClient on a real server.

The same three cases as tests/test_holds_client.py, on PyMongo's own client:
a slow query blocked by a fail point, a pinned cursor left open and an HTTP
call inside a transaction (load-balanced mode). The waiter's
WaitQueueTimeoutError is PyMongo's own class (PyMongo's tests compare it
exactly), with PyMongo's message first; then the holders, their acquire
sites in this file (PyMongo's frames skipped), and where each holder is now,
also in its ``holders`` attribute. ``-s`` prints the errors.
"""

from __future__ import annotations

import logging
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import gevent
import pymongo
import pytest
from gevent.pywsgi import WSGIServer
from pymongo.errors import WaitQueueTimeoutError

import greenpool
from greenpool.pool import reports
from greenpool.pool.holds import Site
from tests.failpoints import failpoint
from tests.holding import HoldListener, here, named, show, until
from tests.lb_proxy import LBCluster
from tests.servers import unique

greenpool_pymongo = pytest.importorskip("greenpool.pymongo")
pytestmark = pytest.mark.timeout(60)
HERE = __file__


def the_pool(client: Any) -> Any:
    (server,) = client._topology._servers.values()
    return server.pool


class Sites:
    acquired = 0
    other = 0
    took = 0.0  # seconds slow_report took, its checkout and checkin included


def slow_report(orders: Any, sites: Sites) -> list[dict[str, Any]]:
    started = time.monotonic()
    sites.acquired = here() + 1
    found = list(orders.find({"status": "late"}))
    sites.took = time.monotonic() - started
    return found


@pytest.fixture
def app_name() -> str:
    return unique("pmholds")


def blocking_find(app_name: str, ms: int) -> dict[str, Any]:
    return {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["find"], "appName": app_name,
                     "blockConnection": True, "blockTimeMS": ms}}


def test_a_slow_query_is_named_in_the_waiters_timeout(mongodb_uri: str, app_name: str) -> None:
    client = greenpool_pymongo.MongoClient(mongodb_uri, appName=app_name, maxPoolSize=1,
                                           waitQueueTimeoutMS=300, acquire_sites=True)
    try:
        orders = client.shop.orders
        client.admin.command("ping")
        sites = Sites()
        with failpoint(mongodb_uri, blocking_find(app_name, 2000)):
            holder = named("report-view", slow_report, orders, sites)
            until(lambda: the_pool(client).active_sockets == 1)
            gevent.sleep(0.1)
            with pytest.raises(WaitQueueTimeoutError) as raised:
                sites.other = here() + 1
                orders.count_documents({})
            show(raised.value)
            assert type(raised.value) is WaitQueueTimeoutError  # PyMongo's, exactly
            (seen,) = raised.value.holders  # type: ignore[attr-defined]
            assert seen.greenlet == "report-view"
            assert seen.acquired_at == Site(HERE, sites.acquired, "slow_report")
            assert seen.now_at == Site(HERE, sites.acquired, "slow_report",
                                       inside="Cursor.__next__")
            lines = str(raised.value).splitlines()
            assert lines[0].startswith("Timed out while checking out a connection from "
                                       "connection pool. maxPoolSize: 1, timeout: 0.3")
            assert lines[1:] == ["Held by, longest first:", f"  {seen}"]

            listed = [r for r in greenpool.pool_reports()
                      if r.address == the_pool(client).address]
            assert len(listed) == 1 and listed[0].holders[0].greenlet == "report-view"
            assert holder.get(timeout=10) == []
        assert the_pool(client).holders() == []
        pool = the_pool(client)
    finally:
        client.close()
    assert pool not in reports._pools  # a closed pool reports no more


def test_a_timeout_ms_expiry_while_waiting_names_the_holder(
        mongodb_uri: str, app_name: str) -> None:
    client = greenpool_pymongo.MongoClient(mongodb_uri, appName=app_name, maxPoolSize=1,
                                           acquire_sites=True)
    try:
        orders = client.shop.orders
        client.admin.command("ping")
        sites = Sites()
        with failpoint(mongodb_uri, blocking_find(app_name, 1500)):
            holder = named("report-view", slow_report, orders, sites)
            until(lambda: the_pool(client).active_sockets == 1)
            with pytest.raises(pymongo.errors.PyMongoError) as raised, pymongo.timeout(0.2):
                orders.count_documents({})
            error = raised.value
            assert error.timeout
            assert type(error) is WaitQueueTimeoutError, repr(error)
            assert [h.acquired_at for h in error.holders] == [  # type: ignore[attr-defined]
                Site(HERE, sites.acquired, "slow_report")]
            holder.join(10)
    finally:
        client.close()


# -- load-balanced mode ---------------------------------------------------------------------


open_cursors: list[Any] = []


def list_orders(orders: Any, sites: Sites) -> dict[str, Any]:
    cursor = orders.find({}, batch_size=2)
    open_cursors.append(cursor)  # left open: its connection stays pinned
    sites.acquired = here() + 1
    return dict(next(cursor))


def test_a_pinned_cursor_left_open_is_named(lb: LBCluster) -> None:
    client = greenpool_pymongo.MongoClient(lb.uri, maxPoolSize=1, waitQueueTimeoutMS=200,
                                           acquire_sites=True)
    try:
        orders = client.shop[unique("orders")]
        orders.insert_many([{"n": n} for n in range(5)])
        sites = Sites()
        named("orders-view", list_orders, orders, sites).join(10)
        with pytest.raises(WaitQueueTimeoutError) as raised:
            client.admin.command("ping")
        show(raised.value)
        (seen,) = raised.value.holders
        assert (seen.greenlet, seen.purpose, seen.pinned, seen.ended) == (
            "orders-view", "cursor", True, True)
        assert seen.acquired_at == Site(HERE, sites.acquired, "list_orders")
        assert str(raised.value).splitlines()[0].startswith(
            "Timeout waiting for connection from the connection pool. maxPoolSize: 1, "
            "connections in use by cursors: 1,")
        open_cursors.pop().close()
        assert the_pool(client).holders() == []
    finally:
        client.close()


@pytest.fixture
def slow_http() -> Iterator[str]:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        gevent.sleep(2)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"charged"]

    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/charge"
    finally:
        server.stop(timeout=1)


def checkout_view(client: Any, payment_url: str, sites: Sites) -> None:
    with client.start_session() as session, session.start_transaction():
        sites.acquired = here() + 1
        client.shop.orders.insert_one({"paid": False}, session=session)
        sites.other = here() + 1
        urllib.request.urlopen(payment_url, timeout=10).read()  # the connection stays pinned


def test_an_http_call_inside_a_transaction_is_named(lb: LBCluster, slow_http: str) -> None:
    client = greenpool_pymongo.MongoClient(lb.uri, maxPoolSize=1, waitQueueTimeoutMS=300,
                                           acquire_sites=True)
    try:
        client.shop.orders.insert_one({"setup": True})
        sites = Sites()
        view = named("checkout-view", checkout_view, client, slow_http, sites)
        until(lambda: sites.other != 0)
        gevent.sleep(0.1)
        with pytest.raises(WaitQueueTimeoutError) as raised:
            client.admin.command("ping")
        show(raised.value)
        (seen,) = raised.value.holders
        assert (seen.greenlet, seen.purpose, seen.pinned, seen.ended) == (
            "checkout-view", "transaction", True, False)
        assert seen.acquired_at == Site(HERE, sites.acquired, "checkout_view")
        assert seen.now_at == Site(HERE, sites.other, "checkout_view", inside="urlopen")
        view.get(timeout=10)
        assert the_pool(client).holders() == []
    finally:
        client.close()


# -- long holds -----------------------------------------------------------------------------


def test_a_long_hold_is_logged_and_sent_once(mongodb_uri: str, app_name: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    listener = HoldListener()
    client = greenpool_pymongo.MongoClient(mongodb_uri, appName=app_name, maxPoolSize=2,
                                           event_listeners=[listener], long_hold_threshold=0.2)
    try:
        orders = client.shop.orders
        client.admin.command("ping")
        sites = Sites()
        with caplog.at_level(logging.WARNING, logger="greenpool"), \
                failpoint(mongodb_uri, blocking_find(app_name, 700)):
            named("report-view", slow_report, orders, sites).get(timeout=10)
        (event,) = listener.long_holds
        # Past the threshold, and sent while the connection was held (the find blocked
        # 700 ms), however long a busy machine made that hold.
        assert event.holder.greenlet == "report-view"
        assert 0.2 <= event.duration <= sites.took
        assert event.holder.acquired_at == Site(HERE, sites.acquired, "slow_report")
        (record,) = [r for r in caplog.records if "long_hold_threshold" in r.getMessage()]
        assert record.name == "greenpool"
        assert record.structured["acquireSite"] == (  # type: ignore[attr-defined]
            f"{HERE}:{sites.acquired} in slow_report")
    finally:
        client.close()


def test_client_kwargs_binds_greenpools_own_keywords(mongodb_uri: str) -> None:
    """For frameworks that build PyMongo's MongoClient themselves; the result
    may go through greenpool.pymongo.MongoClient again unchanged."""
    kwargs = greenpool_pymongo.client_kwargs(acquire_sites=True, maxPoolSize=3)
    assert kwargs["maxPoolSize"] == 3 and "acquire_sites" not in kwargs
    for client in (pymongo.MongoClient(mongodb_uri, **kwargs),
                   greenpool_pymongo.MongoClient(mongodb_uri, **kwargs)):
        try:
            client.admin.command("ping")
            pool = the_pool(client)
            assert isinstance(pool, greenpool_pymongo.GreenPool) and pool._gp_sites
        finally:
            client.close()
    with pytest.raises(ValueError, match="long_hold_threshold must be"):
        greenpool_pymongo.client_kwargs(long_hold_threshold="5")


def test_greenpools_own_keywords_are_checked_and_not_passed_to_pymongo(mongodb_uri: str) -> None:
    with pytest.raises(ValueError, match="long_hold_threshold must be None or a finite"):
        greenpool_pymongo.MongoClient(mongodb_uri, long_hold_threshold=-1)
    for keywords, sites in (({}, False), ({"long_hold_threshold": 60}, True),
                            ({"long_hold_threshold": 60, "acquire_sites": False}, False)):
        client = greenpool_pymongo.MongoClient(mongodb_uri, connect=False, **keywords)
        try:
            client.admin.command("ping")
            pool = the_pool(client)
            assert isinstance(pool, greenpool_pymongo.GreenPool)
            assert pool._gp_sites is sites, keywords
            assert pool.long_hold_threshold == keywords.get("long_hold_threshold")
            assert (pool._gp_watcher is None) == ("long_hold_threshold" not in keywords)
        finally:
            client.close()
