"""Who holds the pool, through greenpool.Client on a real server.

The three ways a gevent app runs out of connections, each for real: a slow
query (a fail point blocks it on the server), a pinned cursor left open and
an HTTP call inside a transaction (load-balanced mode, where both pin their
connection). Each time the waiter's WaitQueueTimeoutError, and
``Client.pool_report()``, must name the holder, its acquire site in this
file and where it is now. ``-s`` prints the errors as a user sees them.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from gevent.pywsgi import WSGIServer

from greenpool import Client, Cursor, WaitQueueTimeoutError
from greenpool.pool.holds import Site
from tests.failpoints import failpoint
from tests.holding import here, named, show, until
from tests.lb_proxy import LBCluster
from tests.servers import unique, with_options

pytestmark = pytest.mark.timeout(60)
HERE = __file__


@pytest.fixture
def app_name() -> str:
    return unique("holds")


class Sites:
    acquired = 0


def slow_report(client: Client, sites: Sites) -> list[dict[str, Any]]:
    sites.acquired = here() + 1
    return list(client.find("shop", "orders", {"status": "late"}))


def test_a_slow_query_is_named_in_the_waiters_timeout(mongodb_uri: str, app_name: str) -> None:
    uri = with_options(mongodb_uri, appName=app_name, maxPoolSize=1, waitQueueTimeoutMS=300)
    block = {"configureFailPoint": "failCommand", "mode": {"times": 1},
             "data": {"failCommands": ["find"], "appName": app_name,
                      "blockConnection": True, "blockTimeMS": 2000}}
    sites = Sites()
    with Client(uri, acquire_sites=True) as client, failpoint(mongodb_uri, block):
        client.command("shop", {"ping": 1})
        holder = named("report-view", slow_report, client, sites)
        until(lambda: client.stats().in_use == 1)
        gevent.sleep(0.1)
        with pytest.raises(WaitQueueTimeoutError) as raised:
            client.command("shop", {"count": "orders"})
        show(raised.value)
        (seen,) = raised.value.holders
        assert seen.greenlet == "report-view" and seen.purpose == "cursor"
        assert seen.acquired_at == Site(HERE, sites.acquired, "slow_report")
        assert seen.now_at == Site(HERE, sites.acquired, "slow_report", inside="Client.find")
        assert 0.3 <= seen.held_for < 2
        lines = str(raised.value).splitlines()
        assert lines[0].startswith("Timed out while checking out a connection from connection "
                                   f"pool {client.address[0]}:{client.address[1]} after ")
        assert lines[1:] == ["Held by, longest first:", f"  {seen}"]

        # The live view, while two more wait without a limit.
        waiters = [gevent.spawn(client.command, "shop", {"ping": 1}, timeout=0)
                   for _ in range(2)]
        until(lambda: client.stats().waiting == 2)
        report = client.pool_report()
        assert report.waiting == 2 and report.oldest_wait is not None
        assert [h.greenlet for h in report.holders] == ["report-view"]
        assert holder.get(timeout=10) == []
        gevent.joinall(waiters, timeout=10, raise_error=True)
    assert client.pool_report().holders == ()


def test_an_operation_timeout_while_waiting_names_the_holder(
        mongodb_uri: str, app_name: str) -> None:
    """timeoutMS (here the call's ``timeout=``) runs out in the wait queue."""
    uri = with_options(mongodb_uri, appName=app_name, maxPoolSize=1)
    block = {"configureFailPoint": "failCommand", "mode": {"times": 1},
             "data": {"failCommands": ["find"], "appName": app_name,
                      "blockConnection": True, "blockTimeMS": 1500}}
    sites = Sites()
    with Client(uri, acquire_sites=True) as client, failpoint(mongodb_uri, block):
        client.command("shop", {"ping": 1})
        holder = named("report-view", slow_report, client, sites)
        until(lambda: client.stats().in_use == 1)
        with pytest.raises(WaitQueueTimeoutError) as raised:
            client.command("shop", {"count": "orders"}, timeout=0.2)
        assert raised.value.timeout
        assert [h.acquired_at for h in raised.value.holders] == [
            Site(HERE, sites.acquired, "slow_report")]
        holder.join(10)


# -- load-balanced mode: pinned cursors and transactions ------------------------------------


open_cursors: list[Cursor] = []  # what an app that forgets to close them keeps


def list_orders(client: Client, sites: Sites) -> dict[str, Any]:
    sites.acquired = here() + 1
    cursor = client.find("shop", "orders", {}, batch_size=2)
    open_cursors.append(cursor)  # left open: its connection stays pinned
    return next(cursor)


def test_a_pinned_cursor_left_open_is_named(lb: LBCluster) -> None:
    with Client(with_options(lb.uri, maxPoolSize=1, waitQueueTimeoutMS=200),
                acquire_sites=True) as client:
        client.command("shop", {"insert": "orders", "documents": [{"n": n} for n in range(5)]})
        sites = Sites()
        named("orders-view", list_orders, client, sites).join(10)
        with pytest.raises(WaitQueueTimeoutError) as raised:
            client.command("shop", {"ping": 1})
        show(raised.value)
        (seen,) = raised.value.holders
        assert (seen.greenlet, seen.purpose, seen.pinned, seen.ended) == (
            "orders-view", "cursor", True, True)
        assert seen.acquired_at == Site(HERE, sites.acquired, "list_orders")
        assert str(seen).endswith(
            f"(pinned to a cursor): checked out at {HERE}:{sites.acquired} in list_orders; "
            "its greenlet has ended without checking it in")
        open_cursors.pop().close()
        assert client.pool_report().holders == ()


@pytest.fixture
def slow_http() -> Iterator[str]:
    """An HTTP service on 127.0.0.1 that takes 2 s to answer."""
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


class CheckoutSites:
    acquired = 0
    http = 0


def checkout_view(client: Client, payment_url: str, sites: CheckoutSites) -> None:
    with client.start_session() as session:
        session.start_transaction()
        sites.acquired = here() + 1
        client.command("shop", {"insert": "orders", "documents": [{"paid": False}]},
                       session=session)
        sites.http = here() + 1
        urllib.request.urlopen(payment_url, timeout=10).read()  # the connection stays pinned
        session.commit_transaction()


def test_an_http_call_inside_a_transaction_is_named(lb: LBCluster, slow_http: str) -> None:
    with Client(with_options(lb.uri, maxPoolSize=1, waitQueueTimeoutMS=300),
                acquire_sites=True) as client:
        client.command("shop", {"create": unique("orders")})
        sites = CheckoutSites()
        view = named("checkout-view", checkout_view, client, slow_http, sites)
        until(lambda: sites.http != 0)
        gevent.sleep(0.1)
        with pytest.raises(WaitQueueTimeoutError) as raised:
            client.command("shop", {"ping": 1})
        show(raised.value)
        (seen,) = raised.value.holders
        assert (seen.greenlet, seen.purpose, seen.pinned, seen.ended) == (
            "checkout-view", "transaction", True, False)
        assert seen.acquired_at == Site(HERE, sites.acquired, "checkout_view")
        assert seen.now_at == Site(HERE, sites.http, "checkout_view", inside="urlopen")
        view.get(timeout=10)
        assert client.pool_report().holders == ()


# -- long holds -----------------------------------------------------------------------------


def test_a_long_hold_through_the_client_is_logged_with_both_sites(
        mongodb_uri: str, app_name: str, caplog: pytest.LogCaptureFixture) -> None:
    uri = with_options(mongodb_uri, appName=app_name)
    block = {"configureFailPoint": "failCommand", "mode": {"times": 1},
             "data": {"failCommands": ["find"], "appName": app_name,
                      "blockConnection": True, "blockTimeMS": 600}}
    sites = Sites()
    with Client(uri, long_hold_threshold=0.2) as client, failpoint(mongodb_uri, block), \
            caplog.at_level(logging.WARNING, logger="greenpool"):
        client.command("shop", {"ping": 1})
        named("report-view", slow_report, client, sites).get(timeout=10)
    (record,) = [r for r in caplog.records if "long_hold_threshold" in r.getMessage()]
    fields = record.structured  # type: ignore[attr-defined]
    assert fields["holder"] == "report-view" and 200 <= fields["durationMS"] < 600
    assert fields["acquireSite"] == f"{HERE}:{sites.acquired} in slow_report"
    assert fields["currentSite"] == f"{HERE}:{sites.acquired} in slow_report, inside Client.find"
    assert f'File "{HERE}", line {sites.acquired}, in slow_report' in fields["currentStack"]


def test_a_bad_long_hold_threshold_is_refused(mongodb_uri: str) -> None:
    with pytest.raises(ValueError, match="long_hold_threshold must be None or a finite "
                                         "number of seconds > 0, not 0"):
        Client(mongodb_uri, long_hold_threshold=0)
