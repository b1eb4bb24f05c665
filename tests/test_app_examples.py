"""examples/flask_pymongo and examples/mongoengine, as written, under gunicorn's gevent
workers against an embedded server.

Each app counts visits with an atomic upsert. After a first visit of each name,
many concurrent requests over two workers must all succeed, both workers must serve,
every reply must come from a client whose pools are greenpool's, and the counts the
server ends up with must be exactly the number of requests per name (no lost or
doubled update).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import gevent
import gevent.pool
import pytest
from pymongo import MongoClient

from tests.gunicorn_run import gunicorn, http_get

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
WORKERS = 2
NAMES = ("ada", "grace", "linus")
REQUESTS = 300
CONCURRENCY = 30

pytest.importorskip("gunicorn")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("example", "uri_variable"), [
    ("flask_pymongo", "MONGO_URI"),
    ("mongoengine", "MONGODB_URI"),
])
def test_app_example_under_gunicorn_gevent_workers(
        example: str, uri_variable: str, mongodb_uri: str, tmp_path: Path) -> None:
    database = f"example_{example}"
    base, _, options = mongodb_uri.partition("?")
    uri = f"{base.rstrip('/')}/{database}" + (f"?{options}" if options else "")
    # greenpool's own deprecations are errors in the app (its messages start "greenpool.");
    # gunicorn's and the frameworks' are theirs.
    env = {uri_variable: uri, "PYTHONWARNINGS": "error:greenpool:DeprecationWarning"}
    with gunicorn(EXAMPLES / example, env, tmp_path / "gunicorn.log",
                  workers=WORKERS, boot_timeout=60) as port:
        replies: list[dict[str, Any]] = []
        failures: list[str] = []

        def one(index: int) -> None:
            try:
                status, body = http_get(port, f"/visit/{NAMES[index % len(NAMES)]}")
            except Exception as error:  # counted, and shown if any
                failures.append(repr(error))
                return
            if status != 200:
                failures.append(f"{status} {body[:500]!r}")
            else:
                replies.append(json.loads(body))

        # The first visit of each name goes alone: SecantusDB has answered one of two
        # concurrent first upserts of a new _id with no document (value: null),
        # which MongoDB never does. Every later visit is concurrent.
        for index in range(len(NAMES)):
            one(index)
        gevent.pool.Pool(CONCURRENCY).map(one, range(len(NAMES), REQUESTS))

    log = (tmp_path / "gunicorn.log").read_text(errors="replace")
    assert failures == [], f"{len(failures)} failed, e.g. {failures[:3]}\n{log[-6000:]}"
    assert len(replies) == REQUESTS
    assert {tuple(reply["pools"]) for reply in replies} == {("GreenPool",)}
    assert len({reply["pid"] for reply in replies}) == WORKERS
    wanted = Counter(NAMES[index % len(NAMES)] for index in range(REQUESTS))
    # Each reply's count is unique per name: every increment was applied exactly once.
    for name, number in wanted.items():
        counts = sorted(reply["count"] for reply in replies if reply["name"] == name)
        assert counts == list(range(1, number + 1)), name
    with MongoClient(mongodb_uri) as client:
        stored = {doc["_id"]: doc["count"] for doc in client[database].visits.find()}
        client.drop_database(database)
    assert stored == dict(wanted)
