"""greenpool.Client's classes have PyMongo's public surface, or say what they lack.

PyMongo's MongoClient, Database, Collection, Cursor and CommandCursor are walked, and
its gridfs classes beside greenpool.gridfs's:
every public name must be on greenpool's counterpart (a property where PyMongo's
is one, a method taking PyMongo's arguments in the same places), or listed with
its reason in :data:`greenpool.client.api.surface.NOT_HERE`, which the porting
guide prints.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import gridfs
import pymongo
import pytest
from pymongo.synchronous.collection import Collection as PyMongoCollection
from pymongo.synchronous.command_cursor import CommandCursor as PyMongoCommandCursor
from pymongo.synchronous.cursor import Cursor as PyMongoCursor
from pymongo.synchronous.database import Database as PyMongoDatabase

import greenpool
import greenpool.gridfs
from greenpool.client.api.surface import NOT_HERE

PORTING = Path(__file__).resolve().parents[1] / "docs" / "guides" / "porting.rst"

PAIRS: dict[str, tuple[type, type]] = {
    "MongoClient": (pymongo.MongoClient, greenpool.Client),
    "Database": (PyMongoDatabase, greenpool.Database),
    "Collection": (PyMongoCollection, greenpool.Collection),
    "Cursor": (PyMongoCursor, greenpool.FindCursor),
    "CommandCursor": (PyMongoCommandCursor, greenpool.CommandCursor),
    **{name: (getattr(gridfs, name), getattr(greenpool.gridfs, name))
       for name in ("GridFSBucket", "GridFS", "GridIn", "GridOut", "GridOutCursor")},
}


def public_names() -> list[str]:
    return [f"{label}.{name}" for label, (theirs, _) in PAIRS.items()
            for name in sorted(dir(theirs)) if not name.startswith("_")]


def mismatch(theirs: Any, ours: Any) -> str | None:
    """Why ``ours`` cannot stand in for ``theirs`` (attributes of the classes), or None."""
    if isinstance(theirs, property) != isinstance(ours, property):
        return f"PyMongo's is a {type(theirs).__name__}, ours a {type(ours).__name__}"
    if isinstance(theirs, property) or not callable(theirs):
        return None
    try:
        their_params = list(inspect.signature(theirs).parameters.values())[1:]
        our_params = list(inspect.signature(ours).parameters.values())[1:]
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    their_positional = [p.name for p in their_params if p.kind in kinds]
    our_positional = [p.name for p in our_params if p.kind in kinds]
    takes_any_position = any(p.kind is p.VAR_POSITIONAL for p in our_params)
    takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in our_params)
    if not takes_any_position and our_positional[:len(their_positional)] != their_positional:
        return f"positional parameters {our_positional}, PyMongo's {their_positional}"
    named = {p.name for p in our_params}
    missing = [p.name for p in their_params
               if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in named]
    if missing and not takes_any_keyword:
        return f"no parameter {missing}"
    return None


@pytest.mark.parametrize("qualified", public_names())
def test_every_public_name_of_pymongo_is_here_or_listed(qualified: str) -> None:
    label, name = qualified.split(".")
    theirs, ours = PAIRS[label]
    if qualified in NOT_HERE:
        assert not hasattr(ours, name), f"{qualified} is listed as missing, but it is here"
        return
    assert hasattr(ours, name), f"{ours.__name__} lacks {name}, and NOT_HERE does not say why"
    problem = mismatch(inspect.getattr_static(theirs, name), inspect.getattr_static(ours, name))
    assert problem is None, f"{ours.__name__}.{name}: {problem}"


def test_every_entry_of_the_list_is_a_pymongo_name_and_in_the_porting_guide() -> None:
    text = PORTING.read_text()
    for qualified in NOT_HERE:
        assert qualified in public_names(), qualified
        assert re.search(rf"``{re.escape(qualified)}``", text), (
            f"docs/guides/porting.rst does not name {qualified}")


def test_the_checker_finds_a_signature_that_differs() -> None:
    class Theirs:
        def find(self, filter: Any = None, projection: Any = None) -> None: ...

    class Ours:
        def find(self, projection: Any = None, filter: Any = None) -> None: ...

    class Narrow:
        def find(self, filter: Any = None) -> None: ...

    assert mismatch(Theirs.find, Ours.find) is not None
    assert mismatch(Theirs.find, Narrow.find) is not None
    assert mismatch(Theirs.find, Theirs.find) is None


@pytest.fixture
def clients() -> Any:
    ours = greenpool.Client(connect=False)
    theirs: pymongo.MongoClient[Any] = pymongo.MongoClient(connect=False)
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.mark.parametrize("call", ["db.insert()", "db.coll.insert()", "db.coll.sub.update()"])
def test_a_missing_method_raises_pymongos_type_error(clients: Any, call: str) -> None:
    ours, theirs = clients
    messages = []
    for client in (ours, theirs):
        with pytest.raises(TypeError) as failure:
            eval(call, {"db": client.shop})
        messages.append(str(failure.value))
    assert messages[0] == messages[1].replace("'MongoClient' object", "'Client' object")


@pytest.mark.parametrize("expression", ["client._secret", "client.shop._secret",
                                        "client.shop.orders._secret"])
def test_an_underscore_name_is_an_attribute_error(clients: Any, expression: str) -> None:
    ours, theirs = clients
    for client in (ours, theirs):
        with pytest.raises(AttributeError):
            eval(expression, {"client": client})


@pytest.mark.parametrize("expression", ["iter(client)", "iter(client.shop)",
                                        "iter(client.shop.orders)"])
def test_clients_databases_and_collections_are_not_iterable(clients: Any,
                                                            expression: str) -> None:
    ours, theirs = clients
    for client in (ours, theirs):
        with pytest.raises(TypeError, match="not iterable"):
            next(eval(expression, {"client": client}))


def test_clients_are_equal_as_pymongos_are() -> None:
    a = greenpool.Client(["db1", "db2"], connect=False)
    b = greenpool.Client("mongodb://db2,db1/", connect=False)
    c = greenpool.Client("mongodb://db1/", connect=False)
    try:
        assert a == b and hash(a) == hash(b) and a != c
        assert a.eq_props() == pymongo.MongoClient(["db1", "db2"], connect=False).eq_props()
    finally:
        for client in (a, b, c):
            client.close()
