"""The Initial DNS Seedlist Discovery spec's load-balanced tests, on a DNS stub.

dnspython answers from the zone in the seedlist README (tests/uri_dns.py), so
greenpool's SRV and TXT code runs as it would against a name server. For each
file: parsing succeeds with the file's seeds and options, or fails with the
reason its comment gives. The hosts after discovery are the seeds: a
load-balanced topology is its one seed. The ping needs a load balancer and is
not run here.
"""

from __future__ import annotations

from typing import Any

import pytest

from greenpool import ConfigurationError
from greenpool.client.config.uri import parse_uri
from tests.uri_dns import install_stub, seedlist_zone
from tests.uri_spec import MISSING, assert_options, host_strings, seedlist_tests

TESTS = seedlist_tests("load-balanced")

# Why each error case fails: a word of the message, so that a case cannot pass
# by failing for another reason (a DNS name missing from the stub's zone, say).
WHY = {
    "loadBalanced-no-results": "does not exist",
    "loadBalanced-replicaSet-errors": "replicaSet",
    "loadBalanced-true-multiple-hosts": "allows one host",
    "srvMaxHosts-conflicts_with_loadBalanced-true": "srvMaxHosts",
    "srvMaxHosts-conflicts_with_loadBalanced-true-txt": "srvMaxHosts",
}


@pytest.mark.skipif(not TESTS, reason=MISSING)
def test_spec_files_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert len(TESTS) == 9
    assert {name for name, test in TESTS if test.get("error")} == set(WHY)


@pytest.mark.parametrize(("name", "test"), TESTS, ids=[name for name, _ in TESTS])
def test_load_balanced_seedlist(
    name: str, test: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = install_stub(monkeypatch, seedlist_zone())
    if test.get("error"):
        with pytest.raises(ConfigurationError) as failure:
            parse_uri(test["uri"])
        assert WHY[name] in str(failure.value)
        return
    settings = parse_uri(test["uri"])
    host = settings.srv_host
    # The TXT record was read (it may say loadBalanced=true) before validation.
    assert ("_mongodb._tcp." + str(host), "SRV") in stub.queries
    assert (host, "TXT") in stub.queries
    assert host_strings(settings) == sorted(test["seeds"])
    assert host_strings(settings) == sorted(test["hosts"])
    assert_options(settings, test["options"])
