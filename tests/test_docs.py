"""The documentation builds without a warning, its examples run, and it covers the API.

The conformance page is rendered by ``docs/_ext/conformance.py`` from a JUnit XML report
of the spec test modules. The builds here give it a small sample report (what they check
does not depend on the outcomes); the long run (``python3 devtools/dev.py slow``) runs
the spec test modules once and checks the page shows their outcomes.
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
from greenpool.testing import EmbeddedServer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import conformance  # noqa: E402

# Each Sphinx build keeps its own limit below.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One passed test per spec test module, as a spec run would report it."""
    report = tmp_path_factory.mktemp("spec") / "spec-junit.xml"
    cases = "".join(f'<testcase classname="{module[:-3].replace("/", ".")}" name="test_sample"/>'
                    for module in conformance.SPEC_MODULES)
    report.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return report


@pytest.fixture(scope="module")
def sample_doctrees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The doctrees of the builds from ``sample_report``, shared as a Makefile's builders
    share theirs: the first build reads the sources (and warns, failing under -W), the
    next one reuses what it read. Only builds from that same report share it: the
    conformance page is read from the report."""
    return tmp_path_factory.mktemp("doctrees")


def sphinx(builder: str, out: Path, report: Path, doctrees: Path | None = None,
           **variables: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GREENPOOL_SPEC_JUNIT=str(report), **variables)
    shared = ["-d", str(doctrees)] if doctrees is not None else []
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder, *shared,
         str(DOCS), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def test_html_builds_without_warnings(sample_report: Path, sample_doctrees: Path,
                                      tmp_path: Path) -> None:
    result = sphinx("html", tmp_path, sample_report, sample_doctrees)
    assert result.returncode == 0, result.stdout + result.stderr
    api = (tmp_path / "api.html").read_text()
    for name in greenpool.__all__:
        if name != "__version__":
            assert f'id="greenpool.{name}"' in api, name
    assert 'id="greenpool.testing.EmbeddedServer"' in api
    page = re.sub(r"<[^>]+>", "", (tmp_path / "conformance.html").read_text())
    for module in conformance.SPEC_MODULES:
        assert module in page


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_conformance_page_shows_the_spec_run(tmp_path: Path) -> None:
    report = tmp_path / "spec-junit.xml"
    conformance.run_spec_tests(report)
    result = sphinx("html", tmp_path / "html", report)
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "html" / "conformance.html").read_text()
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


def test_doctest_examples_pass(sample_report: Path, sample_doctrees: Path,
                               tmp_path: Path) -> None:
    # The server the quick start has the reader start (python -m greenpool server --replset)
    # and point MONGODB_URI at.
    with EmbeddedServer(replica_set=True) as server:
        result = sphinx("doctest", tmp_path, sample_report, sample_doctrees,
                        MONGODB_URI=server.uri)
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
