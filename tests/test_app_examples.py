"""examples/flask_pymongo, examples/flask_pymongo_client and examples/mongoengine (on
PyMongo's client with greenpool's pools, and on greenpool.Client), as written, under
gunicorn's gevent workers against an embedded server.

Each app counts visits with an atomic upsert. After a first visit of each name,
many concurrent requests over two workers must all succeed, both workers must serve,
every reply must come from a client whose pools are greenpool's (GreenPool under
PyMongo's client, Pool under greenpool.Client), and the counts the server ends up with
must be exactly the number of requests per name (no lost or doubled update).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections import Counter
from pathlib import Path
from typing import Any

import gevent
import gevent.pool
import pytest
from pymongo import MongoClient

import greenpool
from tests.gunicorn_run import gunicorn, http_get

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
WORKERS = 2
NAMES = ("ada", "grace", "linus")
REQUESTS = 300
CONCURRENCY = 30

pytest.importorskip("gunicorn")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("example", "uri_variable", "client", "pools"), [
    ("flask_pymongo", "MONGO_URI", "", "GreenPool"),
    ("flask_pymongo_client", "MONGO_URI", "", "Pool"),
    ("mongoengine", "MONGODB_URI", "", "GreenPool"),
    ("mongoengine", "MONGODB_URI", "greenpool", "Pool"),
    ("django", "MONGODB_URI", "", "Pool"),
], ids=["flask_pymongo", "flask_pymongo_client", "mongoengine", "mongoengine-client",
        "django"])
def test_app_example_under_gunicorn_gevent_workers(
        example: str, uri_variable: str, client: str, pools: str, mongodb_uri: str,
        tmp_path: Path) -> None:
    if example == "django":
        pytest.importorskip("django")
    database = f"example_{example}{'_' + client if client else ''}"
    base, _, options = mongodb_uri.partition("?")
    uri = f"{base.rstrip('/')}/{database}" + (f"?{options}" if options else "")
    # greenpool's own deprecations are errors in the app (its messages start "greenpool.");
    # gunicorn's and the frameworks' are theirs.
    env = {uri_variable: uri, "PYTHONWARNINGS": "error:greenpool:DeprecationWarning",
           "MONGOENGINE_CLIENT": client}
    app = "visits.wsgi:application" if example == "django" else "app:app"
    with gunicorn(EXAMPLES / example, env, tmp_path / "gunicorn.log",
                  workers=WORKERS, boot_timeout=60, app=app) as port:
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
    assert {tuple(reply["pools"]) for reply in replies} == {(pools,)}
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


def load_example(example: str, name: str) -> Any:
    """examples/EXAMPLE/app.py imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / example / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flask_pymongo_client_example_views(mongodb_uri: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/flask_pymongo_client's views through Flask's test client: Flask-PyMongo's
    find_one_or_404, save_file and send_file (its ETag, a 304, a 404) on greenpool.Client."""
    database = "example_flask_pymongo_client_views"
    base, _, options = mongodb_uri.partition("?")
    monkeypatch.setenv("MONGO_URI", f"{base.rstrip('/')}/{database}"
                       + (f"?{options}" if options else ""))
    example = load_example("flask_pymongo_client", "flask_pymongo_client_app")
    try:
        assert isinstance(example.mongo.cx, greenpool.Client)
        # connect=False: no monitor has run, so no pool is ready before the first use.
        assert {pool.state for pool in example.mongo.cx.pools.values()} <= {
            greenpool.PoolState.PAUSED}
        web = example.app.test_client()
        assert web.get("/visits/ada").status_code == 404
        assert web.get("/visit/ada").get_json()["count"] == 1
        assert web.get("/visit/ada").get_json()["pools"] == ["Pool"]
        assert web.get("/visits/ada").get_json() == {"_id": "ada", "count": 2}

        body = b"hello, gridfs\n" * 1000
        stored = web.put("/files/hello.txt", data=body)
        assert stored.status_code == 200, stored.data
        sent = web.get("/files/hello.txt")
        assert (sent.status_code, sent.data) == (200, body)
        assert sent.headers["Content-Type"].startswith("text/plain")
        assert sent.headers["Content-Disposition"] == "attachment; filename=hello.txt"
        assert sent.headers["ETag"] == f'"{hashlib.sha1(body).hexdigest()}"'
        again = web.get("/files/hello.txt", headers={"If-None-Match": sent.headers["ETag"]})
        assert again.status_code == 304
        assert web.get("/files/absent.txt").status_code == 404
        # A new version is what send_file sends (version=-1, the latest).
        web.put("/files/hello.txt", data=b"v2")
        assert web.get("/files/hello.txt").data == b"v2"
    finally:
        example.mongo.cx.drop_database(database)
        example.mongo.cx.close()


def test_django_example_views(mongodb_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/django's views through Django's test client: the module-level
    greenpool.Client (connect=False) made when the app is ready, and used by the views."""
    pytest.importorskip("django")
    import django
    from django.test import Client as WebClient

    database = "example_django_views"
    base, _, options = mongodb_uri.partition("?")
    monkeypatch.setenv("MONGODB_URI", f"{base.rstrip('/')}/{database}"
                       + (f"?{options}" if options else ""))
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "visits.settings")
    monkeypatch.syspath_prepend(str(EXAMPLES / "django"))
    django.setup()
    from visits import mongo  # made by django.setup(): VisitsConfig.ready

    try:
        assert isinstance(mongo.client, greenpool.Client) and mongo.db.name == database
        assert {pool.state for pool in mongo.client.pools.values()} <= {
            greenpool.PoolState.PAUSED}  # connect=False: nothing before the first view
        web = WebClient()
        assert web.get("/visits/ada").status_code == 404
        for name in ("ada", "grace", "ada", "linus", "ada", "grace"):
            reply = web.get(f"/visit/{name}")
            assert reply.status_code == 200 and reply.json()["pools"] == ["Pool"]
        assert web.get("/visits/ada").json() == {"_id": "ada", "count": 3}
        assert web.get("/top?n=2").json() == {"top": [{"_id": "ada", "count": 3},
                                                      {"_id": "grace", "count": 2}]}
    finally:
        mongo.client.drop_database(database)
        mongo.client.close()
