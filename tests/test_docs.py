"""The documentation builds without a warning, its examples run, and it covers the API.

The spec test modules run once (JUnit XML into a temporary directory); the conformance
page is rendered from that report by ``docs/_ext/conformance.py``.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import greenpool
from greenpool.cli.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import conformance  # noqa: E402

# The first test's time includes the spec_report fixture, a run of every spec test
# module (servers included): minutes on a loaded machine. Each Sphinx build keeps its
# own limit below.
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def spec_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    report = tmp_path_factory.mktemp("spec") / "spec-junit.xml"
    conformance.run_spec_tests(report)
    return report


def sphinx(builder: str, out: Path, report: Path,
           **variables: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GREENPOOL_SPEC_JUNIT=str(report), **variables)
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder,
         str(DOCS), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


# The first test to ask for spec_report pays for the spec modules' run
# (several minutes on a loaded 2-core machine), on top of its own build.
SPEC_RUN_TIMEOUT = 900


@pytest.mark.timeout(SPEC_RUN_TIMEOUT)
def test_html_builds_without_warnings(spec_report: Path, tmp_path: Path) -> None:
    result = sphinx("html", tmp_path, spec_report)
    assert result.returncode == 0, result.stdout + result.stderr
    api = (tmp_path / "api.html").read_text()
    for name in greenpool.__all__:
        if name != "__version__":
            assert f'id="greenpool.{name}"' in api, name
    assert 'id="greenpool.cli.embedded.EmbeddedServer"' in api
    page = (tmp_path / "conformance.html").read_text()
    assert "tests/test_cmap_spec.py" in page
    assert "pool-checkout-connection" in page  # one of the CMAP spec's own tests
    # Only modules that run the specs' own files: test_uri.py holds greenpool's own tests.
    assert "tests/test_uri.py" not in page
    # The CMAP logging files, the prose tests and SDAM's load-balanced logging file.
    text = re.sub(r"<[^>]+>", "", page)
    assert "test_connection_logging[Create a client, run a command, and close the client]" in text
    assert "test_prose_5_a_failed_connection_set_up_is_a_connection_error" in text
    assert "test_logging_loadbalanced[Topology lifecycle]" in text
    # The CRUD spec's files, each on both clients, with their cases.
    assert "test_crud[insertOne-greenpool]" in text
    assert "test_crud[insertOne-pymongo]" in text


@pytest.mark.timeout(SPEC_RUN_TIMEOUT)
def test_doctest_examples_pass(spec_report: Path, tmp_path: Path) -> None:
    # The server the quick start has the reader start (python -m greenpool server --replset)
    # and point MONGODB_URI at.
    with EmbeddedServer(replica_set=True) as server:
        result = sphinx("doctest", tmp_path, spec_report, MONGODB_URI=server.uri)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = (tmp_path / "output.txt").read_text()
    assert "0 failures in tests" in summary
    assert " 0 tests" not in summary


def test_conformance_renders_outcomes(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_cmap_spec" name="test_cmap_unit[a]"/>'
        '<testcase classname="tests.test_cmap_spec" name="test_cmap_unit[b]">'
        '<skipped message="needs a *replica set*"/></testcase>'
        '<testcase classname="tests.test_cmap_spec" name="test_cmap_unit[c]">'
        '<skipped type="pytest.xfail" message="a known gap"/></testcase>'
        '<testcase classname="tests.test_uri_options" name="test_x"><failure message="boom"/>'
        "</testcase></testsuite></testsuites>")
    text = "\n".join(conformance.render(report))
    assert "- ``test_cmap_unit[a]``: **passed**" in text
    assert "- ``test_cmap_unit[b]``: **skipped**: needs a \\*replica set\\*" in text
    assert "- ``test_x``: **failed**: boom" in text
    assert "- ``test_cmap_unit[c]``: **expected failure**: a known gap" in text
    # CMAP: 3 tests: 1 passed, 1 skipped, 1 expected failure, 0 failed.
    assert "     - 3\n     - 1\n     - 1\n     - 1\n     - 0" in text


def test_conformance_shows_a_spec_files_cases(tmp_path: Path) -> None:
    """A test that runs a whole spec file (tests/unified/suite.py) shows how many of its
    cases passed, and each one that did not, with why."""
    cases = ('[["a case", "passed", ""], ["an old one", "not run", "requires '
             'maxServerVersion=&apos;4.2&apos;"]]')
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_crud_spec" name="test_crud[find-greenpool]">'
        f'<properties><property name="cases" value="{cases.replace(chr(34), "&quot;")}"/>'
        "</properties></testcase></testsuite></testsuites>")
    text = "\n".join(conformance.render(report))
    assert "- ``test_crud[find-greenpool]``: **passed**\n\n  1 of 2 cases passed" in text
    assert "  - an old one: **not run**: requires maxServerVersion='4.2'" in text


def _public_members(cls: type) -> list[str]:
    names = []
    for attr, value in vars(cls).items():
        if attr.startswith("_"):
            continue
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if (inspect.isfunction(value) or isinstance(value, property)) and not (
                value.__doc__ or "").strip():
            names.append(f"{cls.__name__}.{attr}")
    return names


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for name in greenpool.__all__:
        if name == "__version__":
            continue
        obj = getattr(greenpool, name)
        # A class's own docstring, not one inherited (from enum.Enum, say).
        own = obj.__dict__.get("__doc__") if inspect.isclass(obj) else inspect.getdoc(obj)
        if not (own or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            missing += _public_members(obj)
    assert missing == []
