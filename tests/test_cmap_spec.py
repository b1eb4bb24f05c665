"""The CMAP spec's cmap-format conformance tests (unit style), by file name.

The integration-style files need a real server; they run in
test_cmap_spec_integration.py once one is available, and are collected and
skipped here with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from greenpool import Pool, PoolOptions
from tests.cmap_runner import CMAP_DIR, CmapTestRunner, load_cmap_tests
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
def test_cmap_integration(name: str, test: dict[str, Any]) -> None:
    pytest.skip("integration-style: needs greenpool's real connections to a server")
