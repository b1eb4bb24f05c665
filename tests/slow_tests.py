"""The long runs: tests marked ``slow`` run only when asked (``--slow``).

A test is marked slow when it proves at length what a shorter test of the suite proves
too (a randomized run at full scale, a repetition count that hunts a rare race), so that
the test command stays within its time. ``python3 devtools/dev.py slow`` runs them
(``pytest --slow -m slow``), and CI runs them once; a run without ``--slow`` leaves them
out and its summary says how many and how to run them.
"""

from __future__ import annotations

from typing import Any

import pytest

_left_out: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true",
                     help="run the tests marked slow too (python3 devtools/dev.py slow)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: a long run the test command leaves out (python3 devtools/dev.py slow)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        _left_out.extend(item.nodeid for item in slow)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _left_out:
        terminalreporter.write_line(
            f"{len(_left_out)} slow tests left out (python3 devtools/dev.py slow runs them)")
