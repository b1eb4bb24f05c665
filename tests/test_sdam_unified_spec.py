"""The SDAM spec's unified format files (``server-discovery-and-monitoring/tests/unified``),
each by name and deployment (``<file>[<topology>]``), against greenpool.Client through the
project's unified runner (tests/unified/).

A file runs on every deployment its runOnRequirements name that the tests have:
``single`` is a standalone SecantusDB (``single-auth`` the one with ``--auth``, as the
admin user, for the files and cases that require authentication), ``replicaset`` the
replica set emulator (:class:`greenpool.testing.ReplicaSet`, three members in front of
one SecantusDB, as the files expect: its members answer hello, with its fail points,
and relay the rest; it has no authentication), ``load-balanced`` the load balancer
fixture. Nothing here presents a sharded cluster (no mongos): a file that runs on
``sharded`` alone is skipped, saying so. The files' own heartbeatFrequencyMS,
connectTimeoutMS and appName are used as given; a client of a test that sets a fail
point and names no heartbeatFrequencyMS gets FAIL_POINT_HEARTBEAT_MS; a ``waitForEvent``
waits 10 s. The ``logging-*`` files, which check log messages, run through
tests/logging_unified.py.

The files that other modules run are listed in COVERED, the cases that cannot run here
in NOT_RUN, each with the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from greenpool.testing import ReplicaSet
from tests.cmap_runner import SPEC_DIR
from tests.lb_proxy import LBCluster
from tests.logging_unified import LoggingRunner
from tests.servers import AuthServer
from tests.spec_files import MISSING_MARK
from tests.unified.deployment import Deployment
from tests.unified.files import load_file
from tests.unified.suite import NotRun, greenpool_client, report_cases, run_file, spec_files

pytestmark = pytest.mark.timeout(120)

UNIFIED_DIR = SPEC_DIR / "server-discovery-and-monitoring" / "tests" / "unified"
FILES = spec_files(UNIFIED_DIR)

#: The files another module runs, by name, with that module.
COVERED = {
    "logging-loadbalanced": "tests/test_sdam_logging.py",
    "serverMonitoringMode": "tests/test_monitoring_spec.py",
}
#: The files that check log messages (``expectLogMessages``): tests/logging_unified.py's
#: runner, which captures greenpool's loggers.
LOGGING = {"logging-replicaset", "logging-sharded", "logging-standalone"}
#: The heartbeatFrequencyMS of a client whose test sets a fail point, when the file names
#: none: the least the URI spec allows. The format lets a runner reduce it for such a
#: test (and forbids it for a client that names its own). At the default 10 s, a
#: failure waits for the monitor's streamed hello, which the server answers when that
#: wait ends: logging's "Failing heartbeat" sees its fail point only then, and
#: auth-shutdown-error's second insert waits that long for the server to be known again.
FAIL_POINT_HEARTBEAT_MS = 500
#: The deployments the tests have (the format's topology names).
TOPOLOGIES = ("single", "replicaset", "load-balanced")
_NO_WHERE = ("SecantusDB has no JavaScript engine: a $where filter (the file's "
             "sleep(2000), which keeps the connection in use while the monitor's check "
             "times out) fails at once with 'no globalScriptEngine in $where parsing'")
#: What is not run here, and why (suite.NotRun: by file, or ``file[description]``).
NOT_RUN: dict[str, NotRun] = {
    # The find fails at once (the expected error, but the wrong one), its connection is
    # back in the pool before the check times out: nothing in use to interrupt.
    "interruptInUse-pool-clear[Connection pool clear uses interruptInUseConnections=true "
    "after monitor timeout]": NotRun(_NO_WHERE),
    "interruptInUse-pool-clear[Error returned from connection pool clear with "
    "interruptInUseConnections=true is retryable]": NotRun(_NO_WHERE, "no globalScriptEngine"),
    "interruptInUse-pool-clear[Error returned from connection pool clear with "
    "interruptInUseConnections=true is retryable for write]": NotRun(
        _NO_WHERE, "no globalScriptEngine"),
}


def _deployments(name: str) -> list[str]:
    """The deployments a file runs on: those its runOnRequirements name that the tests
    have; ``single-auth`` (the standalone with authentication) where the file or one
    of its tests requires authentication, instead of ``single`` if the file does."""
    spec = load_file(UNIFIED_DIR / f"{name}.json")
    requirements = spec.get("runOnRequirements") or [{}]
    named = {topology for requirement in requirements
             for topology in requirement.get("topologies", TOPOLOGIES)}
    found = [topology for topology in TOPOLOGIES if topology in named] or ["sharded"]
    if "single" in found and any(requirement.get("auth") is True
                                 for requirement in requirements):
        return [("single-auth" if t == "single" else t) for t in found]
    if "single" in found and any(requirement.get("auth") is True
                                 for test in spec["tests"]
                                 for requirement in test.get("runOnRequirements") or []):
        found.insert(found.index("single") + 1, "single-auth")
    return found


CASES = [(name, deployment) for name in FILES if name not in COVERED
         for deployment in _deployments(name)]


def test_spec_files_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    if not FILES:
        pytest.skip(f"SDAM unified {MISSING_MARK} in {UNIFIED_DIR}")
    assert len(FILES) == 36, FILES
    assert set(COVERED) <= set(FILES)


@pytest.mark.parametrize("name", sorted(COVERED))
def test_sdam_unified_file_covered_elsewhere(name: str) -> None:
    """Each file another module runs shows on the conformance page, naming it."""
    pytest.skip(f"{name}.json runs in {COVERED[name]}")


@pytest.fixture(scope="module")
def replica_set() -> Iterator[ReplicaSet]:
    with ReplicaSet(3) as members:
        members.wait_for_primary()
        yield members


@contextlib.contextmanager
def _deployment(uri: str, *, auth: bool, load_balanced: bool = False) -> Iterator[Deployment]:
    admin: MongoClient[dict[str, Any]]
    with MongoClient(uri, serverSelectionTimeoutMS=10_000) as admin:
        yield Deployment.of(admin, auth=auth, load_balanced=load_balanced)


@pytest.fixture(scope="module")
def single(mongodb_uri: str) -> Iterator[tuple[str, Deployment]]:
    with _deployment(mongodb_uri, auth=False) as deployment:
        yield mongodb_uri, deployment


@pytest.fixture(scope="module")
def single_auth(auth_server: AuthServer) -> Iterator[tuple[str, Deployment]]:
    uri = auth_server.uri_for(auth_server.admin)
    with _deployment(uri, auth=True) as deployment:
        yield uri, deployment


@pytest.fixture(scope="module")
def replicaset(replica_set: ReplicaSet) -> Iterator[tuple[str, Deployment]]:
    with _deployment(replica_set.uri, auth=False) as deployment:
        yield replica_set.uri, deployment


@pytest.fixture
def load_balanced(lb: LBCluster) -> Iterator[tuple[str, Deployment]]:
    with _deployment(lb.uri, auth=False, load_balanced=True) as deployment:
        yield lb.uri, deployment


def _server(request: pytest.FixtureRequest, name: str, deployment: str
            ) -> tuple[str, Deployment]:
    if deployment == "sharded":
        pytest.skip(f"{name}.json runs on sharded clusters only; the tests have none "
                    f"(SecantusDB and the replica set emulator present no mongos)")
    spec = load_file(UNIFIED_DIR / f"{name}.json")
    if deployment != "single-auth" and any(requirement.get("auth") is True for requirement
                                           in spec.get("runOnRequirements") or []):
        pytest.skip(f"{name}.json needs authentication, which the replica set emulator "
                    f"does not have (it runs on the standalone with --auth)")
    return request.getfixturevalue(deployment.replace("-", "_"))  # type: ignore[no-any-return]


@pytest.mark.parametrize(("name", "where"), CASES,
                         ids=[f"{name}[{where}]" for name, where in CASES])
def test_sdam_unified(name: str, where: str, request: pytest.FixtureRequest) -> None:
    uri, deployment = _server(request, name, where)
    if name in LOGGING:
        _run_logging_file(name, uri, deployment, request)
        return
    run_file(UNIFIED_DIR / f"{name}.json", greenpool_client, uri, deployment, NOT_RUN,
             request, fail_point_heartbeat_ms=FAIL_POINT_HEARTBEAT_MS)


def _run_logging_file(name: str, uri: str, deployment: Deployment,
                      request: pytest.FixtureRequest) -> None:
    """As suite.run_file does: every case, each failure named, the cases shown."""
    spec = load_file(UNIFIED_DIR / f"{name}.json")
    reason = deployment.unmet(spec.get("runOnRequirements"))
    if reason is not None:
        pytest.skip(reason)

    def fail_point_client() -> MongoClient[dict[str, Any]]:
        return MongoClient(uri, serverSelectionTimeoutMS=10_000)

    cases = []
    for test in spec["tests"]:
        try:
            LoggingRunner(uri, fail_point_client,
                          fail_point_heartbeat_ms=FAIL_POINT_HEARTBEAT_MS).run(spec, test)
        except Exception as error:  # each case's failure is reported, whatever it is
            cases.append([test["description"], "failed", f"{type(error).__name__}: {error}"])
        else:
            cases.append([test["description"], "passed", ""])
    report_cases(cases, request)
