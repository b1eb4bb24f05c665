"""greenpool.flask_pymongo: Flask-PyMongo's PyMongo building a greenpool.Client, its
helpers (find_one_or_404, save_file, send_file) on the Client's classes.

examples/flask_pymongo_client runs it whole (tests/test_app_examples.py)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from importlib.metadata import version

import pytest

pytest.importorskip("flask_pymongo")

from bson import ObjectId
from flask import Flask
from pymongo import ReadPreference
from pymongo.driver_info import DriverInfo
from werkzeug.exceptions import NotFound

import greenpool
from greenpool.flask_pymongo import PyMongo

DATABASE = "flask_pymongo_tests"


def with_database(uri: str, name: str) -> str:
    base, _, options = uri.partition("?")
    return f"{base.rstrip('/')}/{name}" + (f"?{options}" if options else "")


@pytest.fixture
def mongo(mongodb_uri: str) -> Iterator[PyMongo]:
    app = Flask(__name__)
    app.config["MONGO_URI"] = with_database(mongodb_uri, DATABASE)
    mongo = PyMongo(app)
    mongo.app = app  # type: ignore[attr-defined]
    try:
        yield mongo
    finally:
        assert mongo.cx is not None
        mongo.cx.drop_database(DATABASE)
        mongo.cx.close()


def test_the_app_config_uri_builds_a_client_and_its_database(mongo: PyMongo) -> None:
    assert isinstance(mongo.cx, greenpool.Client)
    assert isinstance(mongo.db, greenpool.Database) and mongo.db.name == DATABASE
    # Flask-PyMongo's name in the handshake, as its own PyMongo gives it.
    assert mongo.cx.options.pool_options.driver == DriverInfo(
        "Flask-PyMongo", version("Flask-PyMongo"))


def test_every_way_to_a_collection_has_find_one_or_404(mongo: PyMongo) -> None:
    assert mongo.cx is not None and mongo.db is not None
    reached = [mongo.db.users, mongo.db["users"], mongo.db.get_collection("users"),
               mongo.db.with_options(read_preference=ReadPreference.PRIMARY).users,
               mongo.db.users.with_options(read_preference=ReadPreference.PRIMARY),
               mongo.cx[DATABASE].users, mongo.cx.get_database(DATABASE).users]
    (kind,) = {type(collection) for collection in reached}
    assert issubclass(kind, greenpool.Collection) and hasattr(kind, "find_one_or_404")
    assert type(mongo.db.users.archive) is kind
    assert mongo.db.users.archive.full_name == f"{DATABASE}.users.archive"
    mongo.db.users.insert_one({"_id": "ada"})
    with mongo.app.test_request_context():  # type: ignore[attr-defined]
        assert mongo.db.users.find_one_or_404({"_id": "ada"}) == {"_id": "ada"}
        with pytest.raises(NotFound):
            mongo.db.users.find_one_or_404({"_id": "bob"})


def test_no_database_in_the_uri_leaves_db_none(mongodb_uri: str) -> None:
    mongo = PyMongo(Flask(__name__), mongodb_uri)
    assert mongo.db is None and isinstance(mongo.cx, greenpool.Client)
    mongo.cx.close()


def test_no_uri_is_flask_pymongos_error() -> None:
    with pytest.raises(ValueError, match="MONGO_URI"):
        PyMongo(Flask(__name__))


def test_gridfs_helpers_take_another_database_and_base(mongo: PyMongo) -> None:
    assert mongo.cx is not None
    other = f"{DATABASE}_files"
    try:
        file_id = mongo.save_file("report.csv", io.BytesIO(b"a,b\n1,2\n"), base="reports",
                                  db=other, metadata={"by": "ada"})
        assert isinstance(file_id, ObjectId)
        stored = mongo.cx[other]["reports.files"].find_one({"_id": file_id})
        assert stored is not None
        assert (stored["filename"], stored["contentType"], stored["metadata"]) == (
            "report.csv", "text/csv", {"by": "ada"})
        app = mongo.app  # type: ignore[attr-defined]
        with app.test_request_context():
            response = mongo.send_file("report.csv", base="reports", db=other)
            response.direct_passthrough = False
            assert response.get_data() == b"a,b\n1,2\n"
            with pytest.raises(NotFound):
                mongo.send_file("report.csv")  # not in the default database's fs
            with pytest.raises(TypeError, match="base"):
                mongo.send_file("report.csv", base=1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="read"):
            mongo.save_file("x", b"bytes")
    finally:
        mongo.cx.drop_database(other)


def test_send_file_hashes_a_file_stored_without_sha1(mongo: PyMongo) -> None:
    """A file another program stored (no sha1 field) still gets an ETag: its sha1."""
    import hashlib

    from greenpool.gridfs import GridFS

    assert mongo.db is not None
    GridFS(mongo.db).put(b"plain", filename="plain.bin")
    with mongo.app.test_request_context():  # type: ignore[attr-defined]
        response = mongo.send_file("plain.bin")
        assert response.get_etag() == (hashlib.sha1(b"plain").hexdigest(), False)
        assert response.headers["Content-Type"] == "application/octet-stream"
