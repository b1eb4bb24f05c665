"""A Sphinx extension: ``.. spec-conformance::`` renders which spec tests ran, passed and
were skipped (with reasons), from a JUnit XML report of a pytest run. A test that runs a
whole spec file (tests/unified/suite.py) carries its cases in a ``cases`` property; the
page shows how many passed and each case that did not run or failed, with the reason.

The report is ``$GREENPOOL_SPEC_JUNIT`` when set (the docs test runs the spec test modules
once and passes it); otherwise the extension runs those modules itself at the start of the
build, with ``--junitxml`` into the build directory. Nothing on the page is typed by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[2]

#: The test modules that run the MongoDB specifications' own tests, with their spec's name.
SPEC_MODULES = {
    "tests/test_cmap_spec.py": "Connection Monitoring and Pooling (CMAP)",
    "tests/test_uri_options.py": "URI Options",
    "tests/test_dns_seedlist_lb.py": "Initial DNS Seedlist Discovery (load-balanced)",
    "tests/test_dns_seedlist.py": "Initial DNS Seedlist Discovery (replica-set, sharded)",
    "tests/test_srvpoll.py": "Polling SRV Records for mongos Discovery (prose tests)",
    "tests/test_selection_spec.py": "Server Selection and Max Staleness",
    "tests/test_load_balancers.py": "Load Balancer (unified format)",
    "tests/test_csot_spec.py": "Client Side Operations Timeout (unified format)",
    "tests/test_retryable_spec.py": "Retryable Reads and Retryable Writes (unified format)",
    "tests/test_crud_spec.py": "CRUD and Read/Write Concern operations (unified format, "
                               "PyMongo and greenpool.Client)",
    "tests/test_cmap_logging.py": "CMAP logging (unified format) and prose tests",
    "tests/test_sdam_logging.py": "SDAM Logging and Monitoring (load-balanced, unified format)",
    "tests/test_read_write_concern_spec.py": "Read and Write Concern (connection-string and "
                                             "document files)",
    "tests/test_sdam_spec.py": "Server Discovery and Monitoring (rs, sharded, single, errors, "
                               "monitoring)",
    "tests/test_sdam_unified_spec.py": "Server Discovery and Monitoring (unified format)",
    "tests/test_backpressure_spec.py": "Client Backpressure (unified format)",
    "tests/test_monitoring_spec.py": "Server Monitoring (unified format) and RTT averages",
    "tests/test_versioned_api_spec.py": "Versioned API (unified format, PyMongo and "
                                        "greenpool.Client)",
    "tests/test_gridfs_spec.py": "GridFS (unified format, PyMongo's gridfs and "
                                 "greenpool.gridfs)",
    "tests/test_change_streams_spec.py": "Change Streams (unified format, PyMongo and "
                                         "greenpool.Client)",
    "tests/test_otel_spec.py": "OpenTelemetry (unified format, greenpool.Client)",
    "tests/test_driver_specs.py": "Transactions, Convenient Transactions API, Sessions, Causal "
                                  "Consistency, Command Monitoring, Collection and Index "
                                  "Management, Run Command (unified format, PyMongo and "
                                  "greenpool.Client)",
}


def run_spec_tests(report: Path) -> None:
    """Run the spec test modules with pytest, writing a JUnit XML ``report``."""
    report.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         f"--junitxml={report}", *SPEC_MODULES],
        cwd=ROOT, check=False, stdout=subprocess.DEVNULL, env=dict(os.environ),
    )
    if not report.exists():
        raise RuntimeError(f"the spec test run wrote no report at {report}")


def _outcome(case: ET.Element) -> tuple[str, str]:
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        child = case.find(tag)
        if child is not None:
            if child.get("type") == "pytest.xfail":
                outcome = "expected failure"  # a known gap, with its reason
            return outcome, " ".join((child.get("message") or "").split())
    return "passed", ""


def _file_cases(case: ET.Element) -> list[str]:
    """The lines that show a whole-file test's cases: how many passed, then each case that
    did not pass, with why."""
    for prop in case.iter("property"):
        if prop.get("name") == "cases":
            cases = json.loads(prop.get("value") or "[]")
            break
    else:
        return []
    passed = sum(1 for _, outcome, _ in cases if outcome == "passed")
    lines = ["", f"  {passed} of {len(cases)} cases passed", ""]
    for description, outcome, why in cases:
        if outcome != "passed":
            lines.append(f"  - {_escape(description)}: **{outcome}**: {_escape(why)}")
    return [*lines, ""]


def render(report: Path) -> list[str]:
    """The reStructuredText lines for ``report``."""
    modules: dict[str, list[tuple[str, str, str, list[str]]]] = defaultdict(list)
    for case in ET.parse(report).getroot().iter("testcase"):
        module = (case.get("classname") or "").split(".")[-1]
        outcome, message = _outcome(case)
        modules[f"tests/{module}.py"].append((case.get("name") or "?", outcome, message,
                                              _file_cases(case)))
    lines = [".. list-table::", "   :header-rows: 1", "",
             "   * - Specification", "     - Test module", "     - Tests", "     - Passed",
             "     - Skipped", "     - Expected failures", "     - Failed"]
    for path, spec in SPEC_MODULES.items():
        counts = Counter(outcome for _, outcome, _, _ in modules.get(path, []))
        lines += [f"   * - {spec}", f"     - ``{path}``", f"     - {sum(counts.values())}",
                  f"     - {counts['passed']}", f"     - {counts['skipped']}",
                  f"     - {counts['expected failure']}",
                  f"     - {counts['failed'] + counts['error']}"]
    lines.append("")
    for path, spec in SPEC_MODULES.items():
        cases = modules.get(path, [])
        title = f"{spec} (``{path}``)"
        lines += [title, "-" * len(title), ""]
        if not cases:
            lines += ["No test of this module ran.", ""]
            continue
        for name, outcome, message, file_cases in cases:
            detail = f": {message}" if message else ""
            lines.append(f"- ``{name}``: **{outcome}**{_escape(detail)}")
            if outcome != "skipped":  # a skipped file's message names its cases already
                lines += file_cases
        lines.append("")
    return lines


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`").replace("_", "\\_")


class SpecConformance(SphinxDirective):
    """``.. spec-conformance::``: the table and the per-test outcomes."""

    def run(self) -> list[nodes.Node]:
        report = Path(self.env.app.config.greenpool_spec_junit)
        self.env.note_dependency(str(report))
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(render(report), source=str(report)),
                                 container)
        return list(container.children)


def _prepare(app: Sphinx, config: Config) -> None:
    # At config-inited, before the pickled environment's configuration is compared with
    # this one: builds from the same report (html, then doctest) share their doctrees
    # instead of reading every source again.
    given = os.environ.get("GREENPOOL_SPEC_JUNIT")
    if given:
        config.greenpool_spec_junit = given
        return
    report = Path(app.outdir).parent / "spec-junit.xml"
    run_spec_tests(report)
    config.greenpool_spec_junit = str(report)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("greenpool_spec_junit", "", "env")
    app.add_directive("spec-conformance", SpecConformance)
    app.connect("config-inited", _prepare)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
