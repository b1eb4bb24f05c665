"""SRV polling (greenpool.client.topology.srvpoll) against the project's loopback DNS server.

The server (tests/slow_dns.py) serves the Initial DNS Seedlist Discovery README's zone,
and each test changes its records while a poller runs, as the SRV polling spec's prose
tests (its tests/README.md) describe: the numbered tests below are theirs. The
"topology" is a list the poller's callback replaces; each test waits for the callback,
or for the DNS server to have answered a number of rescans, never for a time.

Prose test 9 (no polling for a load-balanced topology) is the topology's decision: it
never starts a poller then.
"""

from __future__ import annotations

import doctest
import logging
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import dns.name
import dns.rdatatype
import dns.resolver
import gevent
import gevent.event
import pytest

import greenpool.client.config.uri
import greenpool.client.topology.srvpoll
from greenpool.address import Address
from greenpool.client.config.uri import parse_uri
from greenpool.client.topology.srvpoll import (
    MIN_RESCAN_INTERVAL,
    SrvPoller,
    rescan_interval,
    rescanned_hosts,
)
from tests.slow_dns import SlowDNSServer
from tests.uri_dns import Records, seedlist_zone
from tests.uri_spec import MISSING, SEEDLIST_DIR

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not (SEEDLIST_DIR / "README.md").exists(), reason=MISSING),
]

DOMAIN = "test.build.10gen.cc"
HOST = f"localhost.{DOMAIN}"
#: Seconds between rescans here (the records' TTL is 0): short, so rescans keep coming.
INTERVAL = 0.02


def srv(zone: Records, name: str, *ports: int, target: str = HOST) -> Records:
    """``zone`` with the SRV records of ``name`` replaced by one per port."""
    key = (dns.name.from_text(name), dns.rdatatype.SRV)
    changed = {k: v for k, v in zone.items() if k != key}
    if ports:
        changed[key] = [f"0 0 {port} {target}." for port in ports]
    return changed


def at(*ports: int) -> list[Address]:
    return [(HOST, port) for port in ports]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowDNSServer]:
    """The README's zone on a loopback DNS server, which dnspython asks; TTL 0."""
    with SlowDNSServer(seedlist_zone(), ttl=0) as server:
        monkeypatch.setattr(dns.resolver, "default_resolver", server.resolver())
        yield server


class Topology:
    """The hosts, as the poller's owner keeps them; the callbacks it got."""

    def __init__(self, hosts: list[Address]) -> None:
        self.hosts = hosts
        self.reports: list[list[Address]] = []
        self.changed = gevent.event.Event()

    def on_hosts(self, hosts: list[Address]) -> None:
        self.hosts = hosts
        self.reports.append(hosts)
        self.changed.set()

    def wait(self) -> list[Address]:
        assert self.changed.wait(10), "the poller reported no change"
        self.changed.clear()
        return self.hosts


@pytest.fixture
def polling(server: SlowDNSServer) -> Iterator[Callable[[str], tuple[Topology, SrvPoller]]]:
    """Start a poller for a connection string, its topology seeded as parse_uri seeds it."""
    pollers: list[SrvPoller] = []

    def start(uri: str) -> tuple[Topology, SrvPoller]:
        settings = parse_uri(uri)
        topology = Topology(list(settings.hosts))
        poller = SrvPoller.for_settings(settings, current_hosts=lambda: topology.hosts,
                                        on_hosts=topology.on_hosts, min_interval=INTERVAL)
        pollers.append(poller)
        poller.start()
        return topology, poller

    yield start
    for poller in pollers:
        poller.stop()


def answered(server: SlowDNSServer, count: int) -> None:
    """Wait until the DNS server has answered ``count`` more queries."""
    target = len(server.queries) + count
    with gevent.Timeout(10, AssertionError(f"fewer than {count} rescans")):
        while len(server.queries) < target:
            gevent.sleep(INTERVAL / 2)


TEST1 = f"_mongodb._tcp.test1.{DOMAIN}"


@pytest.mark.parametrize(("new_ports", "expected"), [
    pytest.param((27017, 27018, 27019), at(27017, 27018, 27019), id="1-addition"),
    pytest.param((27017,), at(27017), id="2-removal"),
    pytest.param((27017, 27019), at(27017, 27019), id="3-replacement"),
    pytest.param((27019,), at(27019), id="4-both-replaced-by-one"),
    pytest.param((27019, 27020), at(27019, 27020), id="5-both-replaced-by-two"),
])
def test_changing_records(
    server: SlowDNSServer, polling: Any, new_ports: tuple[int, ...], expected: list[Address]
) -> None:
    topology, _ = polling(f"mongodb+srv://test1.{DOMAIN}/?tls=false")
    assert sorted(topology.hosts) == at(27017, 27018)
    answered(server, 2)  # rescans of the same records: nothing to report
    assert topology.reports == []
    server.zone = srv(server.zone, TEST1, *new_ports)
    assert sorted(topology.wait()) == expected
    assert len(topology.reports) == 1


def test_hosts_that_stay_are_left_alone(server: SlowDNSServer, polling: Any) -> None:
    topology, _ = polling(f"mongodb+srv://test1.{DOMAIN}/?tls=false")
    before = list(topology.hosts)
    server.zone = srv(server.zone, TEST1, 27019, *reversed([port for _, port in before]))
    assert topology.wait() == [*before, (HOST, 27019)]  # in their order, the new one after


def timed_out(server: SlowDNSServer) -> None:
    server.delay = 1.0  # over the lookup's limit (connectTimeoutMS=200)


def no_such_name(server: SlowDNSServer) -> None:
    server.zone = {key: value for key, value in server.zone.items()
                   if key[0] != dns.name.from_text(f"test1.{DOMAIN}")
                   and key[0] != dns.name.from_text(TEST1)}


def no_records(server: SlowDNSServer) -> None:
    # The name stays (a TXT record), its SRV records go: an answer without records.
    zone = srv(server.zone, TEST1)
    zone[(dns.name.from_text(TEST1), dns.rdatatype.TXT)] = ['"nothing here"']
    server.zone = zone


def outside_the_domain(server: SlowDNSServer) -> None:
    server.zone = srv(server.zone, TEST1, 27019, target="localhost.build.10gen.cc")


@pytest.mark.parametrize("fault", [
    pytest.param(timed_out, id="6-lookup-timeout"),
    pytest.param(no_such_name, id="7-lookup-failure"),
    pytest.param(no_records, id="8-no-records"),
    pytest.param(outside_the_domain, id="no-record-in-the-domain"),
])
def test_a_failed_rescan_keeps_the_hosts(
    server: SlowDNSServer, polling: Any, fault: Callable[[SlowDNSServer], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool")
    topology, poller = polling(
        f"mongodb+srv://test1.{DOMAIN}/?tls=false&heartbeatFrequencyMS=500&connectTimeoutMS=200")
    good = server.zone
    fault(server)
    answered(server, 3)
    assert topology.reports == []
    assert sorted(topology.hosts) == at(27017, 27018)
    assert poller.interval == 0.5  # heartbeatFrequencyMS until records come back
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("SRV polling keeps the hosts it has" in text for text in warnings) == 1
    # Records again, changed: the poller finds them.
    server.delay = 0.0
    server.zone = srv(good, TEST1, 27017, 27019)
    assert sorted(topology.wait()) == at(27017, 27019)
    assert poller.interval == INTERVAL


def test_a_record_outside_the_domain_is_left_out_and_logged(
    server: SlowDNSServer, polling: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool")
    topology, _ = polling(f"mongodb+srv://test1.{DOMAIN}/?tls=false")
    zone = srv(server.zone, TEST1, 27017)
    zone[(dns.name.from_text(TEST1), dns.rdatatype.SRV)].append(f"0 0 27019 {HOST}.evil.cc.")
    server.zone = zone
    assert topology.wait() == at(27017)
    answered(server, 2)
    refused = [record.levelno for record in caplog.records
               if f"points to {HOST}.evil.cc, which is not in" in record.getMessage()
               and f"({HOST}.evil.cc:27019) is left out"
               in record.getMessage()]
    assert refused[0] == logging.WARNING and set(refused[1:]) == {logging.DEBUG}


def test_srv_allowed_hosts_suffix_rules_the_rescans(
    server: SlowDNSServer, polling: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The suffix lets in a host outside test1's domain (build.10gen.cc, not
    # test.build.10gen.cc), and leaves out one outside the suffix.
    caplog.set_level(logging.DEBUG, logger="greenpool")
    topology, _ = polling(
        f"mongodb+srv://test1.{DOMAIN}/?tls=false&srvAllowedHostsSuffix=build.10gen.cc")
    outside = "localhost.build.10gen.cc"
    zone = srv(server.zone, TEST1, 27017, target=outside)
    zone[(dns.name.from_text(TEST1), dns.rdatatype.SRV)].append("0 0 27019 db.evil.cc.")
    server.zone = zone
    assert topology.wait() == [(outside, 27017)]
    assert any("does not end in srvAllowedHostsSuffix's .build.10gen.cc" in record.getMessage()
               and "(db.evil.cc:27019) is left out" in record.getMessage()
               for record in caplog.records)


def test_srv_host_validator_rules_the_rescans(server: SlowDNSServer) -> None:
    asked: list[str] = []

    def validator(host: str) -> bool:
        asked.append(host)
        if host == "db.broken.cc":
            raise RuntimeError("no answer")  # a validator that fails leaves its host out
        return host != "db.evil.cc"

    settings = greenpool.client.config.uri.client_settings(
        f"mongodb+srv://test1.{DOMAIN}/?tls=false", {}, srv_host_validator=validator)
    topology = Topology(list(settings.hosts))
    poller = SrvPoller.for_settings(settings, current_hosts=lambda: topology.hosts,
                                    on_hosts=topology.on_hosts, min_interval=INTERVAL)
    zone = srv(server.zone, TEST1, 27017, target="db.anywhere.org")
    key = (dns.name.from_text(TEST1), dns.rdatatype.SRV)
    zone[key] += ["0 0 27019 db.evil.cc.", "0 0 27020 db.broken.cc."]
    server.zone = zone
    poller.start()
    try:
        assert topology.wait() == [("db.anywhere.org", 27017)]
    finally:
        poller.stop()
    assert {"db.anywhere.org", "db.evil.cc", "db.broken.cc"} <= set(asked)


def test_10_srv_max_hosts_zero_takes_every_record(server: SlowDNSServer, polling: Any) -> None:
    topology, _ = polling(f"mongodb+srv://test1.{DOMAIN}/?tls=false&srvMaxHosts=0")
    server.zone = srv(server.zone, TEST1, 27017, 27019, 27020)
    assert sorted(topology.wait()) == at(27017, 27019, 27020)


def test_11_srv_max_hosts_as_many_as_the_records(server: SlowDNSServer, polling: Any) -> None:
    topology, _ = polling(f"mongodb+srv://test1.{DOMAIN}/?tls=false&srvMaxHosts=2")
    server.zone = srv(server.zone, TEST1, 27019, 27020)
    assert sorted(topology.wait()) == at(27019, 27020)


def test_12_srv_max_hosts_picks_new_records_at_random(
    server: SlowDNSServer, polling: Any
) -> None:
    topology, _ = polling(f"mongodb+srv://test1.{DOMAIN}/?tls=false&srvMaxHosts=2")
    server.zone = srv(server.zone, TEST1, 27017, 27019, 27020)
    hosts = topology.wait()
    assert len(hosts) == 2 and hosts[0] == (HOST, 27017)
    assert hosts[1] in at(27019, 27020)
    answered(server, 3)
    assert len(topology.reports) == 1  # a full topology stays as it is


def test_13_a_custom_service_name(server: SlowDNSServer, polling: Any) -> None:
    topology, poller = polling(
        f"mongodb+srv://test22.{DOMAIN}/?tls=false&srvServiceName=customname")
    assert poller.name == f"_customname._tcp.test22.{DOMAIN}"
    server.zone = srv(server.zone, f"_customname._tcp.test22.{DOMAIN}", 27019, 27020)
    assert sorted(topology.wait()) == at(27019, 27020)


# -- when the next rescan comes --------------------------------------------------------


def a_poller(server: SlowDNSServer, **options: Any) -> tuple[Topology, SrvPoller]:
    topology = Topology(at(27017, 27018))
    poller = SrvPoller(f"test1.{DOMAIN}", heartbeat_frequency=10.0,
                       current_hosts=lambda: topology.hosts, on_hosts=topology.on_hosts,
                       **options)
    return topology, poller


@pytest.mark.parametrize(("ttl", "interval"), [(120, 120), (5, 60), (0, 60)])
def test_the_next_rescan_comes_after_the_ttl_but_never_under_a_minute(
    server: SlowDNSServer, ttl: int, interval: float
) -> None:
    server.ttl = ttl
    _, poller = a_poller(server)
    assert poller.interval == MIN_RESCAN_INTERVAL  # before the first rescan
    poller.rescan()
    assert poller.interval == interval
    no_such_name(server)
    poller.rescan()
    assert poller.interval == 10.0  # heartbeatFrequencyMS


def test_rescan_interval_and_hosts_as_functions() -> None:
    assert rescan_interval(30, 10) == 30 and rescan_interval(3, 10) == 10
    assert rescanned_hosts(at(1, 2), at(2, 3, 4), 2, rng=random.Random(1)) in (at(2, 3),
                                                                                at(2, 4))
    assert rescanned_hosts(at(1, 2, 3), at(1, 2, 3, 4), 2) == at(1, 2, 3)  # never removes
    assert rescanned_hosts(at(1, 2), at(1, 2), 0) == at(1, 2)


def test_stop_ends_polling(server: SlowDNSServer) -> None:
    topology, poller = a_poller(server, min_interval=INTERVAL)
    server.ttl = 0
    poller.start()
    assert poller.running
    answered(server, 2)
    poller.stop()
    poller.stop()  # idempotent
    assert not poller.running
    asked = len(server.queries)
    server.zone = srv(server.zone, TEST1, 27019)
    gevent.sleep(10 * INTERVAL)
    assert len(server.queries) == asked and topology.reports == []


def test_stop_drops_a_lookup_in_flight(server: SlowDNSServer) -> None:
    server.delay = 0.5
    topology, poller = a_poller(server, min_interval=0)
    poller.start()
    with gevent.Timeout(10, AssertionError("no lookup started")):
        while not server.queries:
            gevent.sleep(0.01)
    server.zone = srv(server.zone, TEST1, 27019)
    poller.stop()
    gevent.sleep(0.7)  # the answer comes, to a lookup given up
    assert topology.reports == []


def test_the_owner_may_stop_it_from_its_callback(server: SlowDNSServer) -> None:
    topology = Topology(at(27017))

    def on_hosts(hosts: list[Address]) -> None:
        poller.stop()
        topology.on_hosts(hosts)

    poller = SrvPoller(f"test1.{DOMAIN}", heartbeat_frequency=10.0,
                       current_hosts=lambda: topology.hosts, on_hosts=on_hosts,
                       min_interval=INTERVAL)
    poller.start()
    assert sorted(topology.wait()) == at(27017, 27018)
    assert not poller.running
    answered_before = len(server.queries)
    gevent.sleep(10 * INTERVAL)
    assert len(server.queries) == answered_before


def test_a_failing_callback_does_not_end_polling(
    server: SlowDNSServer, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[list[Address]] = []

    def on_hosts(hosts: list[Address]) -> None:
        calls.append(hosts)
        raise RuntimeError("the owner's bug")

    poller = SrvPoller(f"test1.{DOMAIN}", heartbeat_frequency=INTERVAL,
                       current_hosts=lambda: at(27017), on_hosts=on_hosts, min_interval=INTERVAL)
    poller.start()
    try:
        answered(server, 3)
    finally:
        poller.stop()
    assert len(calls) >= 2 and poller.interval == INTERVAL
    assert "the SRV poller of test1.test.build.10gen.cc raised" in caplog.text


def test_for_settings_needs_an_srv_connection_string() -> None:
    with pytest.raises(ValueError, match="mongodb\\+srv://"):
        SrvPoller.for_settings(parse_uri("mongodb://h"), current_hosts=list,
                               on_hosts=print)


def test_hub_join_returns_while_a_poller_waits() -> None:
    script = textwrap.dedent("""
        import gevent
        from greenpool.client.topology.srvpoll import SrvPoller
        poller = SrvPoller("cluster0.example.com", heartbeat_frequency=10.0,
                           current_hosts=list, on_hosts=print)
        poller.start()
        gevent.sleep(0)
        assert poller.running
        assert gevent.get_hub().join(timeout=30), "Hub.join() timed out"
        print("joined")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "joined"


def test_the_modules_examples() -> None:
    assert doctest.testmod(greenpool.client.topology.srvpoll).failed == 0
