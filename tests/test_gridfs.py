"""greenpool.gridfs on a real server: round trips, reading, revisions, the legacy API
beside PyMongo's, bad input, and a greenlet killed in the middle of an upload.

Files written by one library are read by the other (PyMongo's ``gridfs`` on a
MongoClient, greenpool.gridfs on a Client): both follow the spec's data model, so
each is the other's check. The spec's own cases are tests/test_gridfs_spec.py.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.event
import gridfs
import pytest
from bson.objectid import ObjectId
from gridfs.errors import CorruptGridFile, FileExists, NoFile
from pymongo import MongoClient
from pymongo.errors import ConfigurationError, InvalidOperation
from pymongo.write_concern import WriteConcern

import greenpool
from greenpool.gridfs import DEFAULT_CHUNK_SIZE, GridFS, GridFSBucket, GridOut
from tests.failpoints import failpoint

pytestmark = pytest.mark.timeout(60)

CHUNK = 1000


@pytest.fixture
def client(mongodb_uri: str) -> Iterator[greenpool.Client]:
    with greenpool.Client(mongodb_uri) as client:
        yield client


@pytest.fixture
def stock(mongodb_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient(mongodb_uri, directConnection=True) as stock:
        yield stock


@pytest.fixture
def db_name(request: pytest.FixtureRequest,
            stock: MongoClient[dict[str, Any]]) -> Iterator[str]:
    """A database of the test's own, dropped before and after."""
    name = "gridfs_" + request.node.name.translate(str.maketrans("[]-.", "____"))[:50]
    stock.drop_database(name)
    yield name
    stock.drop_database(name)


def data_of(size: int) -> bytes:
    return os.urandom(size)


# -- round trips ---------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 7])
def test_a_file_round_trips_and_pymongo_reads_it(size: int, client: greenpool.Client,
                                                 stock: MongoClient[dict[str, Any]],
                                                 db_name: str) -> None:
    data = data_of(size)
    bucket = GridFSBucket(client[db_name], chunk_size_bytes=CHUNK)
    file_id = bucket.upload_from_stream("f", io.BytesIO(data), metadata={"k": 1})
    with bucket.open_download_stream(file_id) as stream:
        assert (stream.read(), stream.length, stream.chunk_size) == (data, size, CHUNK)
        assert (stream.filename, stream.metadata) == ("f", {"k": 1})
    chunks = list(stock[db_name]["fs.chunks"].find({"files_id": file_id}, sort=[("n", 1)]))
    assert [len(chunk["data"]) for chunk in chunks] == (
        [CHUNK] * (size // CHUNK) + ([size % CHUNK] if size % CHUNK else []))
    assert gridfs.GridFSBucket(stock[db_name]).open_download_stream(file_id).read() == data


def test_a_file_pymongo_wrote_reads_back(client: greenpool.Client,
                                         stock: MongoClient[dict[str, Any]],
                                         db_name: str) -> None:
    data = data_of(3 * DEFAULT_CHUNK_SIZE + 11)
    file_id = gridfs.GridFSBucket(stock[db_name]).upload_from_stream("big", data)
    destination = io.BytesIO()
    GridFSBucket(client[db_name]).download_to_stream(file_id, destination)
    assert destination.getvalue() == data


def test_the_indexes_are_made_before_the_first_upload_only(
        client: greenpool.Client, stock: MongoClient[dict[str, Any]], db_name: str) -> None:
    bucket = GridFSBucket(client[db_name], bucket_name="images")
    bucket.upload_from_stream("a", b"x")
    keys = {name: [dict(index["key"]) for index in stock[db_name][name].list_indexes()]
            for name in ("images.files", "images.chunks")}
    assert {"filename": 1, "uploadDate": 1} in keys["images.files"]
    assert {"files_id": 1, "n": 1} in keys["images.chunks"]
    unique = [index for index in stock[db_name]["images.chunks"].list_indexes()
              if index["name"] == "files_id_1_n_1"]
    assert unique[0]["unique"] is True
    # With a file in it, the files collection's indexes are someone else's business.
    stock[db_name]["images.files"].drop_indexes()
    bucket.upload_from_stream("b", b"y")
    assert len(list(stock[db_name]["images.files"].list_indexes())) == 1


def test_an_upload_stream_writes_in_pieces(client: greenpool.Client, db_name: str) -> None:
    bucket = GridFSBucket(client[db_name], chunk_size_bytes=CHUNK)
    with bucket.open_upload_stream_with_id("my-id", "pieces") as stream:
        stream.write(b"a" * 10)
        stream.writelines([b"b" * CHUNK, io.BytesIO(b"c" * 5)])
        assert (stream._id, stream.filename, stream.closed) == ("my-id", "pieces", False)
    assert stream.closed and stream.length == 10 + CHUNK + 5
    assert bucket.open_download_stream("my-id").read() == b"a" * 10 + b"b" * CHUNK + b"c" * 5


# -- reading -------------------------------------------------------------------------------

@pytest.fixture
def lines(client: greenpool.Client, db_name: str) -> tuple[GridFSBucket, ObjectId, bytes]:
    data = b"".join(b"line %d\n" % n for n in range(400))  # 3 chunks and a bit
    bucket = GridFSBucket(client[db_name], chunk_size_bytes=CHUNK)
    return bucket, bucket.upload_from_stream("lines", data), data


def test_seek_and_tell_read_any_part(lines: tuple[GridFSBucket, ObjectId, bytes]) -> None:
    bucket, file_id, data = lines
    stream = bucket.open_download_stream(file_id)
    for offset, whence, size, at in [(995, os.SEEK_SET, 10, 995), (-3, os.SEEK_END, 10, None),
                                     (0, os.SEEK_SET, 2 * CHUNK + 1, 0),
                                     (-CHUNK, os.SEEK_CUR, 5, None)]:
        position = stream.seek(offset, whence)
        assert at is None or position == at
        assert stream.read(size) == data[position:position + size]
        assert stream.tell() == min(position + size, len(data))
    with pytest.raises(OSError, match="must be positive"):
        stream.seek(-1)
    with pytest.raises(OSError, match="whence"):
        stream.seek(0, 7)


def test_readline_readchunk_and_iteration(lines: tuple[GridFSBucket, ObjectId, bytes]) -> None:
    bucket, file_id, data = lines
    stream = bucket.open_download_stream(file_id)
    assert stream.readline() == b"line 0\n"
    assert stream.readline(3) == b"lin"
    assert stream.readchunk() == data[10:CHUNK]
    assert stream.readchunk() == data[CHUNK:2 * CHUNK]
    stream.seek(0)
    assert list(stream) == data.splitlines(keepends=True)
    assert stream.read() == b"" and stream.readchunk() == b""
    stream.seek(0)
    assert stream.readlines() == data.splitlines(keepends=True)
    stream.close()
    assert stream.closed


def test_a_missing_chunk_is_a_corrupt_file(lines: tuple[GridFSBucket, ObjectId, bytes],
                                           stock: MongoClient[dict[str, Any]],
                                           db_name: str) -> None:
    bucket, file_id, _ = lines
    stock[db_name]["fs.chunks"].delete_one({"files_id": file_id, "n": 1})
    stream = bucket.open_download_stream(file_id)
    assert len(stream.read(CHUNK)) == CHUNK
    with pytest.raises(CorruptGridFile, match="missing chunk #1"):
        stream.read()


def test_an_extra_chunk_with_data_is_a_corrupt_file(
        lines: tuple[GridFSBucket, ObjectId, bytes], stock: MongoClient[dict[str, Any]],
        db_name: str) -> None:
    bucket, file_id, _ = lines
    stock[db_name]["fs.chunks"].insert_one({"files_id": file_id, "n": 4, "data": b"!"})
    with pytest.raises(CorruptGridFile, match="extra chunk #4"):
        bucket.open_download_stream(file_id).read()


# -- revisions -----------------------------------------------------------------------------

def test_revisions_count_from_either_end_as_pymongos(
        client: greenpool.Client, stock: MongoClient[dict[str, Any]], db_name: str) -> None:
    ours, theirs = GridFSBucket(client[db_name]), gridfs.GridFSBucket(stock[db_name])
    for version in (b"v0", b"v1", b"v2"):
        ours.upload_from_stream("doc", version)
        gevent.sleep(0.005)  # distinct uploadDates (milliseconds)
    for revision, expected in [(0, b"v0"), (1, b"v1"), (2, b"v2"), (-1, b"v2"), (-2, b"v1"),
                               (-3, b"v0")]:
        assert ours.open_download_stream_by_name("doc", revision).read() == expected
        assert theirs.open_download_stream_by_name("doc", revision).read() == expected
    assert ours.open_download_stream_by_name("doc").read() == b"v2"
    with pytest.raises(NoFile, match="no version 3 for filename 'doc'"):
        ours.open_download_stream_by_name("doc", 3)
    with pytest.raises(NoFile, match="no file named 'nothing'"):
        ours.open_download_stream_by_name("nothing")
    ours.rename_by_name("doc", "renamed")
    assert [f.filename for f in ours.find({}, sort=[("uploadDate", 1)])] == ["renamed"] * 3
    ours.delete_by_name("renamed")
    assert list(ours.find()) == []


# -- the legacy API, beside PyMongo's ------------------------------------------------------

def legacy_session(fs: Any) -> list[Any]:
    """The same calls on either library's GridFS, and what they gave back (ids and
    dates left out: they differ by nature)."""
    seen: list[Any] = []
    first = fs.put(b"hello world", filename="a.txt", author="ann", chunkSize=4)
    fs.put("h\u00e9llo", filename="a.txt", encoding="utf-8")
    fs.put(io.BytesIO(b"third"), filename="b.txt", metadata={"kind": "x"})
    with fs.new_file(_id="custom", filename="c.txt") as new:
        new.write(b"custom data")
        new.colour = "blue"
    new.size = "large"  # after close: stored at once
    grid_out = fs.get(first)
    seen += [grid_out.read(), grid_out.length, grid_out.chunk_size, grid_out.author,
             grid_out.filename]
    seen += [fs.get_version("a.txt", 0).read(), fs.get_last_version("a.txt").read(),
             fs.get_version("a.txt", -2).read(), fs.get_last_version(author="ann").read()]
    seen += [sorted(fs.list()), fs.exists(first), fs.exists(filename="b.txt"),
             fs.exists({"filename": "zzz"}), fs.exists("custom")]
    seen += [[(f.filename, f.length) for f in fs.find({}, sort=[("filename", 1)])],
             [f.read() for f in fs.find({"filename": "a.txt"}).sort("uploadDate", -1)],
             fs.find_one("custom").read(), fs.find_one({"filename": "b.txt"}).metadata,
             fs.find_one({"filename": "none"})]
    custom = fs.get("custom")
    seen += [custom.colour, custom.size]
    fs.delete(first)
    fs.delete("never-was")
    seen += [fs.exists(first), sorted(fs.list())]
    with pytest.raises(NoFile):
        fs.get(first)
    with pytest.raises(NoFile):
        fs.get_version("a.txt", 5)
    with pytest.raises(FileExists):
        fs.put(b"again", _id="custom")
    return seen


def test_the_legacy_api_gives_what_pymongos_gives(
        client: greenpool.Client, stock: MongoClient[dict[str, Any]], db_name: str) -> None:
    ours = legacy_session(GridFS(client[db_name], collection="ours"))
    theirs = legacy_session(gridfs.GridFS(stock[db_name], collection="theirs"))
    assert ours == theirs
    stored = {name: sorted(
        ({k: v for k, v in document.items() if k not in ("_id", "uploadDate")}
         for document in stock[db_name][f"{name}.files"].find()), key=repr)
        for name in ("ours", "theirs")}
    assert stored["ours"] == stored["theirs"]


# -- bad input -----------------------------------------------------------------------------

def test_bad_input_is_refused_naming_it(client: greenpool.Client,
                                        stock: MongoClient[dict[str, Any]],
                                        db_name: str) -> None:
    db = client[db_name]
    with pytest.raises(TypeError, match=r"greenpool Database.*pymongo"):
        GridFSBucket(stock[db_name])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="greenpool Database"):
        GridFS("shop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_size_bytes must be > 0, not -5"):
        GridFSBucket(db, chunk_size_bytes=-5)
    with pytest.raises(ValueError, match="not 0"):
        GridFSBucket(db).open_upload_stream("f", chunk_size_bytes=0)
    with pytest.raises(TypeError, match="chunk_size_bytes must be an int, not '4'"):
        GridFSBucket(db, chunk_size_bytes="4")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="acknowledged"):
        GridFSBucket(db, write_concern=WriteConcern(w=0))
    bucket = GridFSBucket(db)
    with pytest.raises(TypeError, match="filename must be an instance of str"):
        bucket.open_upload_stream(b"name")  # type: ignore[arg-type]
    stream = bucket.open_upload_stream("f")
    with pytest.raises(TypeError, match="not <class 'int'>"):
        stream.write(42)
    with pytest.raises(TypeError, match="encoding"):
        stream.write("text")
    stream.close()
    with pytest.raises(ValueError, match="closed file"):
        stream.write(b"late")
    with pytest.raises(NoFile, match="with _id 'nope'"):
        bucket.open_download_stream("nope")
    with pytest.raises(NoFile, match="none matched 'nope'"):
        bucket.delete("nope")
    with pytest.raises(NoFile, match="none matched file_id 'nope'"):
        bucket.rename("nope", "new")
    with pytest.raises(TypeError, match="root_collection must be a greenpool Collection"):
        GridOut(stock[db_name].fs)  # type: ignore[arg-type]


def test_an_upload_into_a_transaction_is_refused(replset_uri: str) -> None:
    with greenpool.Client(replset_uri) as client, client.start_session() as session:
        bucket = GridFSBucket(client.gridfs_transactions)
        session.start_transaction()
        with pytest.raises(InvalidOperation, match="transactions"):
            bucket.upload_from_stream("f", b"x", session=session)
        session.abort_transaction()


def test_a_failing_source_aborts_the_upload(client: greenpool.Client,
                                            stock: MongoClient[dict[str, Any]],
                                            db_name: str) -> None:
    """The spec: the chunks stored so far are deleted, and the source's error raised.
    17 MiB come before the error, so the first batch of chunks was inserted."""

    class Failing(io.RawIOBase):
        def __init__(self) -> None:
            self.given = 0

        def read(self, size: int = -1) -> bytes:
            if self.given >= 17 * 1024 * 1024:
                raise ValueError("the disk is on fire")
            self.given += size
            return b"\0" * size

    bucket = GridFSBucket(client[db_name])
    with pytest.raises(ValueError, match="on fire"):
        bucket.upload_from_stream("burnt", Failing())
    assert stock[db_name]["fs.files"].count_documents({}) == 0
    assert stock[db_name]["fs.chunks"].count_documents({}) == 0


# -- a greenlet killed mid-upload ----------------------------------------------------------

def test_a_kill_during_a_source_read_stores_no_file(client: greenpool.Client,
                                                    stock: MongoClient[dict[str, Any]],
                                                    db_name: str) -> None:
    reading = gevent.event.Event()

    class Stalling(io.RawIOBase):
        """Many chunks' worth, then a read that never returns."""

        def __init__(self) -> None:
            self.given = 0

        def read(self, size: int = -1) -> bytes:
            if self.given >= 200 * CHUNK:
                reading.set()
                gevent.sleep(60)
            self.given += size
            return b"\1" * size

    bucket = GridFSBucket(client[db_name], chunk_size_bytes=CHUNK)
    upload = gevent.spawn(bucket.upload_from_stream, "killed", Stalling())
    assert reading.wait(10)
    upload.kill(timeout=10)
    assert upload.dead
    assert_no_files_and_still_working(client, stock, db_name, bucket)


def test_a_kill_during_the_chunks_insert_stores_no_file(
        mongodb_uri: str, client: greenpool.Client, stock: MongoClient[dict[str, Any]],
        db_name: str) -> None:
    bucket = GridFSBucket(client[db_name], chunk_size_bytes=CHUNK)
    bucket.upload_from_stream("first", b"indexes made")  # the upload below only inserts
    blocked = {"configureFailPoint": "failCommand", "mode": {"times": 1},
               "data": {"failCommands": ["insert"], "blockConnection": True,
                        "blockTimeMS": 2000}}
    with failpoint(mongodb_uri, blocked):
        upload = gevent.spawn(bucket.upload_from_stream, "killed", b"\2" * (300 * CHUNK))
        gevent.sleep(0.3)  # inside the blocked insert
        upload.kill(timeout=10)
    assert upload.dead
    assert_no_files_and_still_working(client, stock, db_name, bucket, files=1)


def assert_no_files_and_still_working(client: greenpool.Client,
                                      stock: MongoClient[dict[str, Any]], db_name: str,
                                      bucket: GridFSBucket, files: int = 0) -> None:
    """No files document for the killed upload, no connection left checked out, and
    the next upload and download work."""
    assert stock[db_name]["fs.files"].count_documents({"filename": "killed"}) == 0
    assert stock[db_name]["fs.files"].count_documents({}) == files
    assert client.stats().in_use == 0
    file_id = bucket.upload_from_stream("after", b"fine" * CHUNK)
    assert bucket.open_download_stream(file_id).read() == b"fine" * CHUNK
