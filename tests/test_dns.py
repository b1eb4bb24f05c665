"""greenpool.client.config.dns: SRV and TXT lookups, in gevent's threadpool, bounded.

Most tests answer through the DNS stub (tests/uri_dns.py, which replaces
``dns.resolver.resolve``: the lookups still call it, in a worker thread); the
resolver tests ask the loopback DNS server (tests/slow_dns.py) through a
``dns.resolver.default_resolver`` of their own, as a program that sets one does.
That greenpool.Client's lookups keep the hub free without monkey-patching is
tests/test_cooperative.py's proof; these run patched, like the rest of the suite.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import dns.exception
import dns.resolver
import gevent
import pytest
from gevent.monkey import get_original

from greenpool.client.config.dns import srv_records, txt_records
from greenpool.errors import ConfigurationError
from tests.slow_dns import SlowDNSServer, make_zone
from tests.uri_dns import StubResolver, install_stub

SRV_NAME = "_mongodb._tcp.app.greenpool.test"
ZONE = make_zone({
    SRV_NAME: [("SRV", "0 0 27017 a.greenpool.test."), ("SRV", "0 0 27018 b.greenpool.test.")],
    "app.greenpool.test": [("TXT", '"authSource=admin" "&replicaSet=rs"')],
    "bare.greenpool.test": [("A", "127.0.0.1")],
})

# The real time.sleep: it holds a worker thread even under monkey-patching.
blocking_sleep: Callable[[float], None] = get_original("time", "sleep")


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> StubResolver:
    return install_stub(monkeypatch, ZONE)


@dataclass
class SlowAnswers:
    """What the slow stub saw: the lifetime each lookup was given, and how many answers
    it has given so far (each after holding its worker thread)."""

    lifetimes: list[float | None] = field(default_factory=list)
    answered: int = 0


def answer_slowly(
    monkeypatch: pytest.MonkeyPatch, stub: StubResolver, seconds: float
) -> SlowAnswers:
    """Make the stub hold its worker thread ``seconds`` before each answer."""
    slow_answers = SlowAnswers()

    def slow(*args: Any, **kwargs: Any) -> Any:
        slow_answers.lifetimes.append(kwargs.get("lifetime"))
        blocking_sleep(seconds)
        slow_answers.answered += 1
        return stub.resolve(*args, **kwargs)

    monkeypatch.setattr(dns.resolver, "resolve", slow)
    return slow_answers


def test_srv_and_txt_records(stub: StubResolver) -> None:
    assert srv_records(SRV_NAME, timeout=5) == [("a.greenpool.test", 27017),
                                                ("b.greenpool.test", 27018)]
    assert txt_records("app.greenpool.test", timeout=5) == ["authSource=admin&replicaSet=rs"]
    assert stub.queries == [(SRV_NAME, "SRV"), ("app.greenpool.test", "TXT")]


def test_missing_records(stub: StubResolver) -> None:
    with pytest.raises(ConfigurationError, match=r"no SRV records for '_mongodb\._tcp\.nowhere"):
        srv_records("_mongodb._tcp.nowhere.greenpool.test", timeout=5)
    with pytest.raises(ConfigurationError, match=r"no SRV records for 'bare\.greenpool\.test'"):
        srv_records("bare.greenpool.test", timeout=5)  # a name without SRV records
    assert txt_records("bare.greenpool.test", timeout=5) == []
    assert txt_records("nowhere.greenpool.test", timeout=5) == []


@pytest.mark.parametrize(("error", "message"), [
    (dns.exception.Timeout(timeout=0.5), r"timed out after 5 s$"),
    (dns.resolver.NoNameservers(), r"failed: NoNameservers$"),
])
def test_dnspython_errors_name_the_name(
    monkeypatch: pytest.MonkeyPatch, error: Exception, message: str
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(dns.resolver, "resolve", fail)
    with pytest.raises(ConfigurationError, match=message) as caught:
        srv_records(SRV_NAME, timeout=5)
    assert f"the DNS lookup of the SRV records of '{SRV_NAME}'" in str(caught.value)


def test_the_time_limit_holds_while_other_greenlets_run(
    monkeypatch: pytest.MonkeyPatch, stub: StubResolver
) -> None:
    slow = answer_slowly(monkeypatch, stub, 0.6)
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        while True:
            gevent.sleep(0.01)
            ticks += 1

    ticker = gevent.spawn(tick)
    started = time.monotonic()
    try:
        with pytest.raises(ConfigurationError, match=r"'_mongodb._tcp.app.greenpool.test' "
                                                     r"timed out after 0.2 s$"):
            srv_records(SRV_NAME, timeout=0.2)
        assert slow.answered == 0  # it gave up before the answer (0.6 s), not after
    finally:
        ticker.kill()
    assert time.monotonic() - started >= 0.2  # not before its time
    # The hub ran the ticker meanwhile: a lookup that held the hub would have let it run
    # once at most.
    assert ticks >= 3
    assert slow.lifetimes == [0.2]  # dnspython's own limit is the same
    gevent.sleep(0.5)  # the worker thread finishes, its answer dropped


def test_a_deadline_shortens_the_time_limit(
    monkeypatch: pytest.MonkeyPatch, stub: StubResolver
) -> None:
    slow = answer_slowly(monkeypatch, stub, 0.6)
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=r"timed out after 0.2\d* s "
                                                 r"\(the time left before its deadline\)$"):
        txt_records("app.greenpool.test", timeout=10, deadline=started + 0.25)
    assert slow.answered == 0  # it gave up before the answer (0.6 s)
    assert slow.lifetimes and slow.lifetimes[0] is not None and slow.lifetimes[0] <= 0.25
    gevent.sleep(0.5)
    # A deadline later than the time limit leaves the limit alone.
    assert srv_records(SRV_NAME, timeout=3, deadline=time.monotonic() + 60)
    assert slow.lifetimes[1] == 3


def test_a_passed_deadline_asks_nothing(stub: StubResolver) -> None:
    with pytest.raises(ConfigurationError, match="timed out after 0 s"):
        srv_records(SRV_NAME, timeout=5, deadline=time.monotonic() - 1)
    with pytest.raises(ConfigurationError, match="timed out after 0 s"):
        txt_records("app.greenpool.test", timeout=0)
    assert stub.queries == []


def test_an_enclosing_timeout_is_its_own(
    monkeypatch: pytest.MonkeyPatch, stub: StubResolver
) -> None:
    answer_slowly(monkeypatch, stub, 0.5)
    outer = gevent.Timeout(0.1)
    with pytest.raises(gevent.Timeout) as caught, outer:
        srv_records(SRV_NAME, timeout=5)
    assert caught.value is outer
    gevent.sleep(0.5)


def test_a_killed_lookup_leaves_the_threadpool_free(
    monkeypatch: pytest.MonkeyPatch, stub: StubResolver
) -> None:
    answer_slowly(monkeypatch, stub, 0.3)
    pool = gevent.get_hub().threadpool
    waiter = gevent.spawn(srv_records, SRV_NAME, timeout=5)
    gevent.sleep(0.05)
    waiter.kill()
    assert waiter.dead and isinstance(waiter.value, gevent.GreenletExit)
    assert len(pool) == 1  # the query goes on in its thread...
    gevent.sleep(0.5)
    assert len(pool) == 0  # ...and ends there, its answer dropped


@pytest.fixture
def busy_threadpool() -> Iterator[list[Any]]:
    """Every thread of the hub's threadpool held for 1 s: their results."""
    pool = gevent.get_hub().threadpool
    held = [pool.spawn(blocking_sleep, 1.0) for _ in range(pool.maxsize)]
    try:
        yield held
    finally:
        gevent.joinall(held)


def test_the_wait_for_a_free_thread_counts(
    stub: StubResolver, busy_threadpool: list[Any]
) -> None:
    with pytest.raises(ConfigurationError, match=r"timed out after 0\.2 s$"):
        srv_records(SRV_NAME, timeout=0.2)
    # It gave up while every thread was still held (1 s), not once one was free.
    assert not any(result.ready() for result in busy_threadpool)
    assert stub.queries == []


# -- through a resolver the program set ------------------------------------------------------


@pytest.fixture
def loopback_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowDNSServer]:
    """dnspython's default resolver, set to ask a loopback DNS server only."""
    with SlowDNSServer(ZONE) as server:
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = ["127.0.0.1"]
        resolver.port = server.port
        monkeypatch.setattr(dns.resolver, "default_resolver", resolver)
        yield server


def test_the_programs_default_resolver_is_asked(loopback_dns: SlowDNSServer) -> None:
    assert sorted(srv_records(SRV_NAME, timeout=5)) == [("a.greenpool.test", 27017),
                                                        ("b.greenpool.test", 27018)]
    assert txt_records("app.greenpool.test", timeout=5) == ["authSource=admin&replicaSet=rs"]
    assert loopback_dns.queries == [(SRV_NAME, "SRV", "udp"),
                                    ("app.greenpool.test", "TXT", "udp")]


def test_lookups_overlap(loopback_dns: SlowDNSServer) -> None:
    """Ten lookups of a server that takes 0.3 s per answer are all in flight at once (in
    turn, each would be answered before the next was asked)."""
    loopback_dns.delay = 0.3
    lookups = [gevent.spawn(srv_records, SRV_NAME, timeout=5) for _ in range(10)]
    gevent.joinall(lookups, raise_error=True)
    assert all(len(lookup.value) == 2 for lookup in lookups)
    assert loopback_dns.most_at_once == 10


def test_a_slow_server_times_out_naming_the_name(loopback_dns: SlowDNSServer) -> None:
    loopback_dns.delay = 0.6
    with pytest.raises(ConfigurationError, match=r"records of 'app.greenpool.test' timed out"):
        txt_records("app.greenpool.test", timeout=0.2)
    assert loopback_dns.answered == 0  # it gave up before the answer (0.6 s)
    gevent.sleep(0.5)  # the server's answer comes, to a socket already given up
