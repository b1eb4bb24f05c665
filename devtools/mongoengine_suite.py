#!/usr/bin/env python3
"""MongoEngine's shipped tests, on stock PyMongo's MongoClient and on greenpool.Client.

    python3 devtools/dev.py mongoengine-suite [--replset | --emulator] [pytest arguments]

1. Fetches the ``tests/`` folder of MongoEngine (the release in ``.venv``) from its
   sdist on PyPI (``pip download --no-binary :all:``) into
   ``~/.cache/greenpool/mongoengine-suite/VERSION/`` (shared by the user's clones,
   never part of this repository).
2. Starts SecantusDB on a free port of 127.0.0.1: a standalone, or with ``--replset``
   a one-node replica set; or with ``--emulator`` greenpool's replica set emulator
   (``greenpool.testing.ReplicaSet``: three member processes, ``rs0``, in front of one
   SecantusDB). It stops exactly what it started.
3. Runs the tests twice, each in its own pytest process under gevent's ``patch_all()``
   (devtools/mongoengine_route.py): route ``stock``, MongoEngine's default
   ``pymongo.MongoClient``; route ``greenpool``, ``greenpool.Client`` in its place, as
   ``connect(..., mongo_client_class=greenpool.Client)`` puts it. On both, the clients
   MongoEngine makes for its default ``localhost:27017`` go to the started server (on
   the emulator, to its primary, from which both clients discover the other two
   members), and nothing may connect beyond 127.0.0.1.
4. Prints each route's counts and every test whose outcome differs, and writes them as
   JSON to ``.cache/mongoengine-suite/outcomes-MODE.json``.

Exit status 1 when a test that passed on the stock route did not pass on greenpool's,
unless :data:`EXPECTED` names it with its reason.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from importlib.metadata import version as installed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / ".cache" / "mongoengine-suite"
SHARED = Path(os.environ.get("GREENPOOL_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "greenpool"
) / "mongoengine-suite"
ROUTES = ("stock", "greenpool")

_NOT_PYMONGOS = ("asserts isinstance(client, pymongo.MongoClient) or isinstance(db, "
                 "pymongo.database.Database): greenpool.Client and its Database are "
                 "greenpool's classes, not subclasses of PyMongo's")
#: The outcomes known to differ, by test, and why; any other difference fails the run.
EXPECTED: dict[str, str] = {
    f"tests.test_connection.ConnectionTest::{name}": _NOT_PYMONGOS
    for name in ("test_connect", "test_connect_uri_default_db", "test_connect_uri_without_db",
                 "test_connect_with_db_name_external", "test_connect_with_replicaset_via_kwargs",
                 "test_connect_with_replicaset_via_uri", "test_register_connection",
                 "test_register_connection_defaults")
}


def fetch_tests(release: str) -> Path:
    """``SHARED/RELEASE/tests``, from the sdist, downloaded once."""
    where = SHARED / release
    if (where / ".complete").exists():
        return where / "tests"
    with tempfile.TemporaryDirectory(prefix="mongoengine-sdist-") as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"mongoengine=={release}", "-d", scratch],
                       check=True)
        archives = list(Path(scratch).glob("mongoengine-*.tar.gz"))
        if len(archives) != 1:
            sys.exit(f"pip download mongoengine=={release}: expected one sdist, got {archives}")
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        top = f"mongoengine-{release}/"
        with tarfile.open(archives[0]) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(top + "tests/")]
            if not members:
                sys.exit(f"{archives[0].name} has no {top}tests/ folder")
            for member in members:
                member.name = member.name[len(top):]
            archive.extractall(where, members=members, filter="data")
    (where / ".complete").write_text(release)
    return where / "tests"


def run_route(route: str, tests: Path, port: int, pytest_args: list[str],
              report: Path) -> dict[str, str]:
    """One pytest process of the suite on ``route``; each test's outcome, by id."""
    made = report.with_suffix(".made")
    made.unlink(missing_ok=True)
    env = dict(os.environ, GREENPOOL_PEER_ROUTE=route, GREENPOOL_PEER_PORT=str(port),
               GREENPOOL_PEER_MADE=str(made),
               PYTHONPATH=str(ROOT / "devtools"),  # greenpool: the venv's install of ROOT
               PYTHONDONTWRITEBYTECODE="1")
    # The sdist lacks tests/__init__.py and tests/utils.py, which three of its modules
    # import: they fail to collect on both routes alike; the others run.
    command = [sys.executable, "-m", "pytest", "-q", "-p", "mongoengine_route",
               "--continue-on-collection-errors",
               "-p", "no:cacheprovider", "-o", "addopts=", f"--junitxml={report}",
               "--rootdir", str(tests.parent), str(tests), *pytest_args]
    print(f"+ route {route}: pytest {tests}", flush=True)
    subprocess.run(command, env=env, cwd=tests.parent, check=False,
                   stdout=subprocess.DEVNULL)
    # A route that never made its client proves nothing: MongoEngine did not take it.
    if not made.exists() or int(made.read_text()) == 0:
        sys.exit(f"route {route}: MongoEngine made no client of the route's class")
    return outcomes(report)


def outcomes(report: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        found[name] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                       else "skipped" if "skipped" in kinds else "passed")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--replset", action="store_true",
                       help="SecantusDB's one-node replica set instead of a standalone")
    where.add_argument("--emulator", action="store_true",
                       help="greenpool's replica set emulator, three members, instead")
    options, pytest_args = parser.parse_known_args()
    from greenpool.testing import EmbeddedServer, ReplicaSet

    release = installed("mongoengine")
    tests = fetch_tests(release)
    mode = "emulator" if options.emulator else "replset" if options.replset else "standalone"
    RUNS.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, str]] = {}
    started = ReplicaSet(3) if options.emulator else EmbeddedServer(
        replica_set=options.replset)
    with started as server:
        if isinstance(server, ReplicaSet):
            primary = server.primary
            assert primary is not None, "the emulator started without a primary"
            port = int(primary.rpartition(":")[2])
        else:
            port = server.port
        for route in ROUTES:
            results[route] = run_route(route, tests, port, pytest_args,
                                       RUNS / f"junit-{mode}-{route}.xml")
    names = sorted(set().union(*results.values()))
    differing = [(name, results["stock"].get(name, "absent"),
                  results["greenpool"].get(name, "absent")) for name in names
                 if results["stock"].get(name) != results["greenpool"].get(name)]
    print(f"\nMongoEngine {release}'s shipped tests, {mode}:")
    for route in ROUTES:
        counts = Counter(results[route].values())
        print(f"  {route:9}: " + ", ".join(f"{counts[k]} {k}" for k in
                                            ("passed", "failed", "error", "skipped")))
    print(f"  outcomes that differ: {len(differing)}")
    for name, stock, green in differing:
        why = " (expected)" if name in EXPECTED else ""
        print(f"    {name}: stock {stock}, greenpool {green}{why}")
    for reason in sorted({EXPECTED[name] for name, _, _ in differing if name in EXPECTED}):
        print(f"  expected, because the test {reason}")
    (RUNS / f"outcomes-{mode}.json").write_text(json.dumps(
        {"release": release, "mode": mode, "outcomes": results, "differing": differing},
        indent=1))
    broken = [name for name, stock, _ in differing if stock == "passed" and name not in EXPECTED]
    print(f"  stock passes that greenpool does not, unexpected: {len(broken)}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
