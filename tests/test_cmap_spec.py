"""The CMAP spec's cmap-format conformance tests, by file name.

Unit-style files run against a pool of mock connections. Integration-style
files run against the test server (``mongodb_uri``): a pool of real
:class:`~greenpool.wire.link.Link` connections with the file's appName, whose
establishment errors go through SDAM's rules as in a Client, with the file's
fail point set before and switched off after.
"""

from __future__ import annotations

from typing import Any

import pytest

from greenpool import Pool, PoolOptions
from greenpool.address import Address
from greenpool.client.config.uri import parse_uri
from greenpool.client.topology.topology import Topology
from greenpool.wire.connector import make_connector
from greenpool.wire.link import LinkOptions
from tests.cmap_runner import CMAP_DIR, CmapTestRunner, load_cmap_tests
from tests.failpoints import failpoint
from tests.mock import MockConnector

TESTS = load_cmap_tests()
UNIT = [(name, test) for name, test in TESTS if test["style"] == "unit"]
INTEGRATION = [(name, test) for name, test in TESTS if test["style"] == "integration"]


def make_mock_pool(options: dict[str, Any], listener: object) -> Pool[Any]:
    return Pool(("localhost", 27017), PoolOptions(options), connector=MockConnector(),
                listeners=[listener])


@pytest.mark.skipif(not TESTS, reason=f"CMAP spec tests not found in {CMAP_DIR} "
                    "(set GREENPOOL_SPEC_TESTS to the spec-tests 'source' directory)")
def test_spec_tests_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert len(UNIT) == 26, [name for name, _ in UNIT]
    assert len(INTEGRATION) == 7, [name for name, _ in INTEGRATION]


@pytest.mark.parametrize(("name", "test"), UNIT, ids=[name for name, _ in UNIT])
def test_cmap_unit(name: str, test: dict[str, Any]) -> None:
    CmapTestRunner(test, make_mock_pool).run()


@pytest.mark.parametrize(("name", "test"), INTEGRATION, ids=[name for name, _ in INTEGRATION])
def test_cmap_integration(name: str, test: dict[str, Any], mongodb_uri: str) -> None:
    address = parse_uri(mongodb_uri).hosts[0]

    def make_real_pool(options: dict[str, Any], listener: object) -> Pool[Any]:
        link_options = LinkOptions(app_name=options.pop("appName", None), connect_timeout=10)

        def make_pool(where: Address) -> Pool[Any]:
            return Pool(where, PoolOptions(options), connector=make_connector(link_options),
                        listeners=[listener],
                        on_establish_error=lambda error, conn: topology.handle_establish_error(
                            error, conn))

        # A topology without monitors: the file's operations make the pool ready.
        topology = Topology([address], make_pool, direct=True)
        topology.open(None)
        (server,) = topology.servers.values()
        return server.pool

    with failpoint(mongodb_uri, test["failPoint"]):
        CmapTestRunner(test, make_real_pool).run()
