"""A run without the spec files cannot pass in CI, and says so loudly elsewhere
(tests/spec_files.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cmap_runner import SPEC_DIR
from tests.spec_files import SPEC_COMMIT

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("tests/test_cmap_spec.py", "tests/test_uri_options.py")


def run(spec_dir: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["GREENPOOL_SPEC_TESTS"] = str(spec_dir)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        # Without the integration tests: the rest decides the run's verdict as well,
        # without starting a server.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
         "not integration", *MODULES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_missing_spec_files_fail_a_ci_run(tmp_path: Path) -> None:
    result = run(tmp_path / "nothing", ci="true")
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("!!! CONFORMANCE SUITES SKIPPED"), result.stdout
    assert "this FAILS the run: CI is set" in last
    assert ", ".join(MODULES) in last
    assert f"checkout {SPEC_COMMIT}" in last and str(tmp_path / "nothing") in last
    # The missing directory itself is named, per module.
    assert f"{tmp_path / 'nothing'}/connection-monitoring-and-pooling" in result.stdout


def test_missing_spec_files_end_a_local_run_loudly(tmp_path: Path) -> None:
    result = run(tmp_path / "nothing", ci=None)
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("!!! CONFORMANCE SUITES SKIPPED")
    assert "CI would fail this run" in last and ", ".join(MODULES) in last


def test_present_spec_files_pass_a_ci_run() -> None:
    if not (SPEC_DIR / "uri-options").is_dir():
        pytest.skip(f"spec tests not found in {SPEC_DIR}")
    result = run(SPEC_DIR, ci="true")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CONFORMANCE SUITES SKIPPED" not in result.stdout
    assert " passed" in result.stdout


def test_the_named_commit_is_the_one_the_files_came_from() -> None:
    source = SPEC_DIR.parent / "SOURCE.md"
    if not source.exists():
        pytest.skip(f"spec tests not found in {SPEC_DIR} (no SOURCE.md beside it)")
    assert f"`{SPEC_COMMIT}`" in source.read_text()
