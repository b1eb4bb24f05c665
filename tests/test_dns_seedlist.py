"""The Initial DNS Seedlist Discovery spec's replica-set and sharded tests, file by file.

The project's loopback DNS server (tests/slow_dns.py) serves the zone of the spec's
tests/README.md, and dnspython asks it, so greenpool's SRV and TXT lookups run as they
would against a name server. Two layers of each file are checked:

- what a connection string gives (:func:`test_seedlist`): the seeds (or their number,
  for srvMaxHosts' random choice), the options, the user, password and database, or
  the error with the reason the file's comment gives;
- what discovery finds (:func:`test_discovered_hosts`): the hosts a Client's
  topology holds once its monitors have checked the seeds, and a ping. The
  deployments the spec names (a replica set ``repl0`` on ports 27017-27019, mongos on
  27017 and 27018, all with TLS) are fake servers (tests/fake_server.py) on free
  ports: the zone's SRV records and the expected hosts are given those ports, and the
  zone's host names resolve to 127.0.0.1 for the sockets.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.name
import dns.rdatatype
import dns.resolver
import gevent
import gevent.socket
import pytest

import greenpool
from greenpool import ConfigurationError
from greenpool.address import format_address, parse_address
from greenpool.client.config.uri import ClientSettings, parse_uri
from tests.fake_server import FakeServer
from tests.servers import TLSFiles, make_tls_files
from tests.slow_dns import SlowDNSServer
from tests.uri_dns import Records, seedlist_zone
from tests.uri_spec import MISSING, assert_options, host_strings, seedlist_tests

TESTS = [(f"{directory}/{name}", test)
         for directory in ("replica-set", "sharded")
         for name, test in seedlist_tests(directory)]
IDS = [name for name, _ in TESTS]

# Why each error case fails: a word of the message, so that a case cannot pass by
# failing for another reason (a name missing from the zone, say).
WHY = {
    "direct-connection-true": "directConnection=true",
    "misformatted-option": "has no value",
    "no-results": "no SRV records",
    # Its comment predates the spec's 2024 change, which allows a host of fewer than
    # three parts: it fails because the zone has no SRV records for the name.
    "not-enough-parts": "no SRV records",
    "parent-part-mismatch1": "not in test14.test.build.10gen.cc's domain",
    "parent-part-mismatch2": "not in test15.test.build.10gen.cc's domain",
    "parent-part-mismatch3": "not in test16.test.build.10gen.cc's domain",
    "parent-part-mismatch4": "not in test17.test.build.10gen.cc's domain",
    "parent-part-mismatch5": "points to localhost.evil.build.10gen.cc",
    "returned-parent-too-short": "points to test.build.10gen.cc,",
    "returned-parent-wrong": "points to localhost.build.10gen.cc,",
    "srvMaxHosts-conflicts_with_replicaSet-txt": "srvMaxHosts=1 cannot be given with replicaSet",
    "srvMaxHosts-conflicts_with_replicaSet": "srvMaxHosts=1 cannot be given with replicaSet",
    "two-txt-records": "has 2 TXT records",
    "txt-record-not-allowed-option": "sets socketTimeoutMS, but only",
    "txt-record-with-unallowed-option": "sets ssl, but only",
    "uri-with-port": "takes no port",
    "uri-with-two-hosts": "names one host, not 2",
}

# parsed_options keys -> what ClientSettings holds for them.
PARSED = {
    "user": lambda s: s.credentials.username,
    "password": lambda s: s.credentials.password.reveal(),
    "db": lambda s: s.database,
    "auth_database": lambda s: s.database,
    "defaultDatabase": lambda s: s.database,
}


def spec_zone() -> Records:
    """The README's zone, and the record of test22 its table leaves out: the
    table lists one SRV record for ``_customname._tcp.test22``, while
    srv-service-name.json expects the two the live zone holds."""
    zone = seedlist_zone()
    if zone:
        key = (dns.name.from_text("_customname._tcp.test22.test.build.10gen.cc"),
               dns.rdatatype.SRV)
        zone[key] = [*zone[key], "0 0 27018 localhost.test.build.10gen.cc."]
    return zone


@pytest.fixture
def dns_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowDNSServer]:
    """The spec's zone on a loopback DNS server, which dnspython asks."""
    with SlowDNSServer(spec_zone()) as server:
        monkeypatch.setattr(dns.resolver, "default_resolver", server.resolver())
        yield server


@pytest.mark.skipif(not TESTS, reason=MISSING)
def test_spec_files_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert len(TESTS) == 44
    assert {name.split("/")[1] for name, test in TESTS if test.get("error")} == set(WHY)


@pytest.mark.parametrize(("name", "test"), TESTS, ids=IDS)
def test_seedlist(name: str, test: dict[str, Any], dns_server: SlowDNSServer) -> None:
    if test.get("error"):
        with pytest.raises(ConfigurationError) as failure:
            parse_uri(test["uri"])
        assert WHY[name.split("/")[1]] in str(failure.value)
        return
    settings = parse_uri(test["uri"])
    if "seeds" in test:
        assert host_strings(settings) == sorted(test["seeds"])
    if "numSeeds" in test:
        assert len(settings.hosts) == test["numSeeds"]
        zone_hosts = {"localhost.test.build.10gen.cc:27017", "localhost.test.build.10gen.cc:27018"}
        assert set(host_strings(settings)) <= zone_hosts  # a random choice among test1's
    assert_options(settings, test["options"])
    for key, expected in test.get("parsed_options", {}).items():
        assert PARSED[key](settings) == expected, key
    # Both lookups reached the name server, SRV records and TXT options alike.
    srv_name = f"_{settings.srv_service_name}._tcp.{settings.srv_host}"
    asked = {(name.lower(), kind) for name, kind, _ in dns_server.queries}
    assert {(srv_name, "SRV"), (settings.srv_host, "TXT")} <= asked


# -- after discovery: the multi-server Client ---------------------------------------------


#: The ports the spec's deployments listen on, in the zone and in the expected hosts.
SPEC_PORTS = (27017, 27018, 27019)
ZONE_NAMES = ("localhost.test.build.10gen.cc", "localhost.sub.test.build.10gen.cc")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"), server_names=ZONE_NAMES)


class Deployment:
    """Fake servers standing in for the spec's deployment, each on a free port."""

    def __init__(self, sharded: bool, tls: TLSFiles | None) -> None:
        """Two mongos or three replica set members; speaking TLS with ``tls``'s
        server certificate, or plain TCP without (as a deployment that allows
        both answers a client that turned TLS off)."""
        context = None
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls.server_cert_file, tls.server_key_file)
        count = 2 if sharded else 3
        self.servers = [FakeServer(tls=context) for _ in range(count)]
        for server in self.servers:
            server.start()
        #: Spec port -> the port its fake server took.
        self.ports = {spec: server.address[1]
                      for spec, server in zip(SPEC_PORTS[:count], self.servers, strict=True)}
        members = [f"localhost:{port}" for port in self.ports.values()]
        for index, server in enumerate(self.servers):
            if sharded:
                server.hello.update({"msg": "isdbgrid"})
            else:
                server.hello.update({
                    "setName": "repl0", "hosts": members, "primary": members[0],
                    "me": members[index], "isWritablePrimary": index == 0,
                    "secondary": index != 0})

    def close(self) -> None:
        for server in self.servers:
            server.stop()

    def zone(self, zone: Records) -> Records:
        """``zone`` with each SRV record's port the one its fake server took."""
        return {key: [self._srv(data) if key[1] == dns.rdatatype.SRV else data
                      for data in records]
                for key, records in zone.items()}

    def _srv(self, data: str) -> str:
        priority, weight, port, target = data.split()
        return f"{priority} {weight} {self.ports.get(int(port), int(port))} {target}"

    def host(self, spec_host: str) -> str:
        """A host of the file's ``hosts``, on the port its fake server took."""
        name, port = parse_address(spec_host)
        return format_address((name, self.ports[port] if port is not None else port))


@pytest.fixture
def zone_names_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """The zone's host names resolve to 127.0.0.1 for sockets, as the spec's name
    server makes them; every other name resolves as usual."""
    original = gevent.socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.lower().rstrip(".") in ZONE_NAMES:
            host = "127.0.0.1"
        return original(host, port, *args, **kwargs)

    monkeypatch.setattr(gevent.socket, "getaddrinfo", getaddrinfo)


def with_ca(uri: str, settings: ClientSettings, tls: TLSFiles) -> str:
    """``uri`` trusting the fake servers' CA, when it speaks TLS (the spec's
    deployments do; the test runner brings the CA)."""
    if not settings.tls:
        return uri
    separator = "&" if "?" in uri else ("?" if re.search(r"://[^/]*/", uri) else "/?")
    return f"{uri}{separator}tlsCAFile={Path(tls.ca_file)}"


def discovered(client: Any) -> list[str]:
    return sorted(format_address(address)
                  for address in client.topology.description.server_descriptions())


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "test"), [t for t in TESTS if not t[1].get("error")],
                         ids=[name for name, test in TESTS if not test.get("error")])
def test_discovered_hosts(name: str, test: dict[str, Any], dns_server: SlowDNSServer,
                          tls_files: TLSFiles, zone_names_resolve: None) -> None:
    settings = parse_uri(test["uri"])
    deployment = Deployment(name.startswith("sharded/"), tls_files if settings.tls else None)
    try:
        dns_server.zone = deployment.zone(dns_server.zone)
        uri = with_ca(test["uri"], settings, tls_files)
        expected = sorted(deployment.host(host) for host in test.get("hosts", ()))
        with greenpool.Client(uri) as client:
            with gevent.Timeout(20, AssertionError(f"discovery did not find {expected}")):
                while True:
                    found = discovered(client)
                    if found == expected if "hosts" in test else len(found) == test["numHosts"]:
                        break
                    gevent.sleep(0.05)
            if test.get("ping", True):
                assert client.command("admin", {"ping": 1})["ok"] == 1
    finally:
        deployment.close()


def test_the_fake_deployment_answers_as_the_spec_deployment_would(
    dns_server: SlowDNSServer, tls_files: TLSFiles, zone_names_resolve: None
) -> None:
    """What test_discovered_hosts builds, through the one-server Client: one member,
    reached by its zone name over TLS, says it is repl0's primary."""
    deployment = Deployment(False, tls_files)
    try:
        dns_server.zone = deployment.zone(dns_server.zone)
        settings = parse_uri("mongodb+srv://test3.test.build.10gen.cc/")
        ((host, port),) = settings.hosts
        assert (host, port) == ("localhost.test.build.10gen.cc", deployment.ports[27017])
        uri = with_ca(f"mongodb://{host}:{port}/?directConnection=true&tls=true", settings,
                      tls_files)
        with greenpool.Client(uri) as client:
            assert client.command("admin", {"ping": 1})["ok"] == 1
            hello = client.command("admin", {"hello": 1})
        assert (hello["setName"], hello["me"]) == ("repl0", f"localhost:{port}")
        assert deployment.host("localhost:27019") == f"localhost:{deployment.ports[27019]}"
    finally:
        deployment.close()


def test_names_outside_the_zone_resolve_as_usual(zone_names_resolve: None) -> None:
    assert gevent.socket.getaddrinfo("127.0.0.1", 1, socket.AF_INET)[0][4] == ("127.0.0.1", 1)
