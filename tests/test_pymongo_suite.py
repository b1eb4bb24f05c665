"""devtools/pymongo_suite.py: PyMongo's own tests with its stock pools and with greenpool's.

The fast subset (PyMongo's CMAP runner, test_connection_monitoring.py, and
test_pooling.py, on the PyMongo installed here, against a one-node replica set) runs
through the tool exactly as ``python3 devtools/dev.py pymongo-suite`` does; parity is
judged from the outcomes the pytest processes reported; it is a long run
(``python3 devtools/dev.py slow``). The full tables are in docs/pymongo-suite.rst.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools import pymongo_suite

ROOT = Path(__file__).resolve().parents[1]
FAST_MODULES = ("test_connection_monitoring.py", "test_pooling.py")


def result(outcomes: dict[str, str], status: str = "ok", green_pools: int = 0) -> dict[str, Any]:
    return {"status": status, "seconds": 1.0, "pools": {"GreenPool": green_pools},
            "outcomes": {test: [outcome, ""] for test, outcome in outcomes.items()}}


def results(stock: dict[str, Any], green: dict[str, Any]) -> dict[str, Any]:
    return {"version": "4.20.0",
            "modes": {"rs": {"test_x.py": {"stock": stock, "greenpool": green}}}}


def test_report_finds_a_test_that_passes_only_with_stock_pools() -> None:
    stock = result({"t::a": "passed", "t::b": "passed", "t::c": "failed", "t::d": "passed"})
    green = result({"t::a": "passed", "t::b": "failed", "t::c": "passed"}, green_pools=3)
    text, breaks = pymongo_suite.report(results(stock, green))
    assert breaks == ["rs: t::b: stock passed, greenpool failed",
                      "rs: t::d: stock passed, greenpool not run"]
    # A test that passes only with greenpool's pools is listed, but breaks nothing.
    assert "t::c: stock failed, greenpool passed" in text
    assert "tests whose outcome differs: 3" in text
    assert "3/1/0/0" in text and "2/1/0/0" in text


def test_report_counts_a_hang_as_a_break() -> None:
    stock = result({"t::a": "passed"})
    green = result({"t::a": "hang"}, status="timeout", green_pools=1)
    text, breaks = pymongo_suite.report(results(stock, green))
    assert breaks == ["rs: t::a: stock passed, greenpool hang"]
    assert "0/0/0/1 (1 hang) [timeout]" in text


def test_report_refuses_a_greenpool_route_without_greenpools() -> None:
    same = {"t::a": "passed"}
    _, breaks = pymongo_suite.report(results(result(same), result(same, green_pools=0)))
    assert breaks == ["rs: the greenpool route built no GreenPool"]
    _, breaks = pymongo_suite.report(results(result(same), result(same, green_pools=2)))
    assert breaks == []


def test_report_refuses_a_run_where_nothing_passed_or_greenpool_did_not_load() -> None:
    _, breaks = pymongo_suite.report(results(result({"t::a": "failed"}),
                                             result({"t::a": "failed"}, green_pools=1)))
    assert breaks == ["rs: no test passed with the stock pools: nothing was compared"]
    refused = result({}, status="not run: UnsupportedPyMongoVersion('4.8.0')")
    _, breaks = pymongo_suite.report(results(result({"t::a": "passed"}), refused))
    assert "rs: test_x.py (greenpool): not run: UnsupportedPyMongoVersion('4.8.0')" in breaks


def test_suite_requirements_come_from_the_sdist_with_caps_for_old_suites(
        tmp_path: Path) -> None:
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "test.txt").write_text(
        "# what the tests need\npytest>=8.2\n\npytest-asyncio>=0.24.0  # async tests\n")
    new = pymongo_suite.suite_requirements("4.20.0", tmp_path)
    assert new[:2] == ["pytest>=8.2", "pytest-asyncio>=0.24.0"]
    assert not any("<" in requirement for requirement in new)
    assert set(pymongo_suite.SUITE_REQUIREMENTS) <= set(new)
    old = pymongo_suite.suite_requirements("4.9.2", tmp_path)
    assert {"pytest<8.4", "pytest-asyncio<0.25"} <= set(old)
    (tmp_path / "requirements" / "test.txt").unlink()  # an sdist without the file
    assert pymongo_suite.suite_requirements("4.10.0rc1", tmp_path)[:2] == list(
        pymongo_suite.TEST_REQUIREMENTS_FALLBACK)
    assert pymongo_suite.version_key("4.10.0rc1") == (4, 10, 0)


@pytest.mark.parametrize(("option", "value", "named"), [
    ("--modes", "rs,sharded", "'sharded'"),
    ("--test-timeout", "0", "0.0"),
])
def test_bad_options_are_refused_by_name(option: str, value: str, named: str) -> None:
    done = subprocess.run(
        [sys.executable, "devtools/pymongo_suite.py", option, value], cwd=ROOT,
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert named in done.stderr


# A long run (python3 devtools/dev.py slow): a venv on first use, then two pytest runs
# per route of PyMongo's own modules.
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_cmap_runner_and_pooling_tests_have_parity(tmp_path: Path) -> None:
    outcomes_file = tmp_path / "outcomes.json"
    done = subprocess.run(
        [sys.executable, "devtools/pymongo_suite.py", "--modes", "rs",
         "--modules", ",".join(FAST_MODULES), "--json", str(outcomes_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "parity: every test that passed with the stock pools" in done.stdout
    saved = json.loads(outcomes_file.read_text())
    import pymongo

    assert saved["version"] == pymongo.version
    modules = saved["modes"]["rs"]
    assert sorted(modules) == sorted(FAST_MODULES)
    for module, by_route in modules.items():
        stock, green = by_route["stock"], by_route["greenpool"]
        assert stock["status"] == green["status"] == "ok", module
        passed = {test for test, (outcome, _) in stock["outcomes"].items()
                  if outcome == "passed"}
        # The CMAP spec runner alone has dozens of tests; a module that ran nothing proves
        # nothing.
        assert len(passed) >= 20, (module, stock["outcomes"])
        assert {test for test, (outcome, _) in green["outcomes"].items()
                if outcome == "passed"} >= passed, module
        assert green["pools"].get("GreenPool", 0) > 0, module
        assert not stock["pools"], module  # the stock route swaps nothing
