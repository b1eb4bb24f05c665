"""A test run cannot pass by skipping the specifications' own tests.

The conformance modules skip with a reason containing ``spec tests not found`` when the
spec files are missing (a plain clone has no ``../shared/spec-tests``). These hooks, imported
by ``tests/conftest.py``, collect those skips and

- end every run that had one with a loud summary naming the skipped suites and where the
  files come from;
- fail the run when ``CI`` is set (``CI=true``, as CI services set it).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.cmap_runner import SPEC_DIR

SPEC_REPOSITORY = "https://github.com/mongodb/specifications"
SPEC_COMMIT = "92b3c0b9287bfba1b0ec4084300858d05c654f8c"
"""The commit of mongodb/specifications the spec test files come from (its SOURCE.md)."""

MISSING_MARK = "spec tests not found"
"""What every conformance module's skip reason says when its files are missing."""

HOW_TO_GET = (
    f"get them with: git clone {SPEC_REPOSITORY} && git -C specifications checkout "
    f"{SPEC_COMMIT}, then set GREENPOOL_SPEC_TESTS=$PWD/specifications/source "
    "(or put that 'source' directory at ../shared/spec-tests/source beside this clone); "
    f"looked in {SPEC_DIR}")

_missing: dict[str, str] = {}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    if MISSING_MARK in reason.lower():
        _missing.setdefault(report.nodeid.split("::")[0], reason)


def _verdict() -> str:
    return "this FAILS the run: CI is set" if _in_ci() else "CI would fail this run"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _missing:
        return
    terminalreporter.section("spec files missing", sep="!", red=True, bold=True)
    for module, reason in sorted(_missing.items()):
        terminalreporter.write_line(f"{module}: {reason}")
    terminalreporter.write_line(f"{_verdict()}; {HOW_TO_GET}")


def pytest_unconfigure(config: pytest.Config) -> None:
    # After pytest's own closing line, so it is the last thing the run prints.
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _missing and reporter is not None:
        reporter.write_line(
            f"!!! CONFORMANCE SUITES SKIPPED, spec files missing ({_verdict()}): "
            f"{', '.join(sorted(_missing))}; {HOW_TO_GET}", red=True, bold=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _missing and _in_ci() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
