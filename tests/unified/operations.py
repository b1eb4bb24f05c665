"""Entity operations: each one the PyMongo API call it names, on the entity it names.

``insertOne`` on a collection entity is ``collection.insert_one(...)``, with the
arguments as :mod:`tests.unified.arguments` maps them; an operation whose result is a
cursor is iterated to the end (the format's "Iterating Returned Iterables"), its documents
each matched as a root-level document. Nothing
here builds a command: what goes to the server is what the client under test sends.
An operation this table lacks is an error, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pymongo import CursorType
from pymongo.operations import SearchIndexModel

from tests.unified import clientbulk_ops, gridfs_ops
from tests.unified.arguments import keywords
from tests.unified_match import RootDocuments

# Operation -> (PyMongo's method, whether its result is a cursor to iterate).
_CALLS: dict[str, tuple[str, bool]] = {
    "client.listDatabases": ("list_databases", True),
    "client.listDatabaseNames": ("list_database_names", False),
    # For a driver with one way to list databases, listDatabaseObjects is that way.
    "client.listDatabaseObjects": ("list_databases", True),
    "database.aggregate": ("aggregate", True),
    "database.dropCollection": ("drop_collection", False),
    "database.listCollections": ("list_collections", True),
    "database.listCollectionNames": ("list_collection_names", False),
    # For a driver with one way to list collections, listCollectionObjects is that way.
    "database.listCollectionObjects": ("list_collections", True),
    "collection.aggregate": ("aggregate", True),
    "collection.bulkWrite": ("bulk_write", False),
    "collection.countDocuments": ("count_documents", False),
    "collection.estimatedDocumentCount": ("estimated_document_count", False),
    "collection.distinct": ("distinct", False),
    "collection.findOne": ("find_one", False),
    "collection.findOneAndDelete": ("find_one_and_delete", False),
    "collection.findOneAndReplace": ("find_one_and_replace", False),
    "collection.findOneAndUpdate": ("find_one_and_update", False),
    "collection.insertOne": ("insert_one", False),
    "collection.insertMany": ("insert_many", False),
    "collection.replaceOne": ("replace_one", False),
    "collection.updateOne": ("update_one", False),
    "collection.updateMany": ("update_many", False),
    "collection.deleteOne": ("delete_one", False),
    "collection.deleteMany": ("delete_many", False),
    "collection.createIndex": ("create_index", False),
    "collection.dropIndex": ("drop_index", False),
    "collection.dropIndexes": ("drop_indexes", False),
    "collection.listIndexes": ("list_indexes", True),
    "collection.createSearchIndex": ("create_search_index", False),
    "collection.updateSearchIndex": ("update_search_index", False),
    "collection.dropSearchIndex": ("drop_search_index", False),
    "collection.drop": ("drop", False),
    "client.dropDatabase": ("drop_database", False),
    "collection.rename": ("rename", False),
    "client.createChangeStream": ("watch", False),
    "database.createChangeStream": ("watch", False),
    "collection.createChangeStream": ("watch", False),
    "session.startTransaction": ("start_transaction", False),
    "session.commitTransaction": ("commit_transaction", False),
    "session.abortTransaction": ("abort_transaction", False),
    "session.endSession": ("end_session", False),
}


def call(operation: str, target: Any, arguments: dict[str, Any]) -> Any:
    """Run ``operation`` (``<entity kind>.<name>``) on ``target`` with ``arguments``
    (converted already); its result, iterated if it is a cursor."""
    special = _SPECIAL.get(operation)
    if special is not None:
        return special(target, keywords(operation, arguments))
    assert operation in _CALLS, f"{operation} is not an operation this runner supports"
    method, iterate = _CALLS[operation]
    result = getattr(target, method)(**keywords(operation, arguments))
    return RootDocuments(result) if iterate else result


def _run_command(database: Any, kwargs: dict[str, Any]) -> Any:
    command, name = kwargs.pop("command"), kwargs.pop("commandName")
    # The command's name is its first key, whatever order the document came in.
    return database.command({name: command[name], **command}, **kwargs)


def _command_cursor(database: Any, kwargs: dict[str, Any]) -> Any:
    """PyMongo's ``Database.cursor_command``: the command's name first; the format's
    getMore options as its keywords (maxTimeMS is the getMores' maxAwaitTimeMS there,
    batchSize the cursor's, set after the first batch as the spec says)."""
    command, name = kwargs.pop("command"), kwargs.pop("commandName")
    batch_size = kwargs.pop("batch_size", None)
    # PyMongo's cursor_command has no cursorType: a tailable cursor is one whose command
    # says tailable, as the files' commands do.
    if kwargs.pop("cursorType", CursorType.NON_TAILABLE) != CursorType.NON_TAILABLE:
        assert command.get("tailable"), f"cursorType tailable, but the command is {command}"
    cursor = database.cursor_command({name: command[name], **command}, **kwargs)
    if batch_size:
        cursor.batch_size(batch_size)
    return cursor


def _run_cursor_command(database: Any, kwargs: dict[str, Any]) -> Any:
    return RootDocuments(_command_cursor(database, kwargs))


def _create_search_indexes(collection: Any, kwargs: dict[str, Any]) -> Any:
    # PyMongo's create_search_indexes takes SearchIndexModel objects, not documents.
    models = [SearchIndexModel(**model) for model in kwargs.pop("models")]
    return collection.create_search_indexes(models, **kwargs)


def _list_search_indexes(collection: Any, kwargs: dict[str, Any]) -> Any:
    # aggregationOptions are the aggregate's options, PyMongo's keywords as they are.
    return RootDocuments(collection.list_search_indexes(
        **kwargs.pop("aggregationOptions", {}), **kwargs))


def _create_collection(database: Any, kwargs: dict[str, Any]) -> Any:
    # check_exists=False: PyMongo's way to send create alone, without the listCollections
    # it otherwise sends first (the files expect create only).
    return database.create_collection(kwargs.pop("name"), check_exists=False, **kwargs)


class OpenedCursor:
    """A find cursor whose find command went out when it was created (the format's
    createFindCursor): its first document is kept for the first iteration."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self._first: list[Any] = []
        for document in cursor:
            self._first.append(document)
            break

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._first:
            return self._first.pop()
        return next(self.cursor)

    def close(self) -> None:
        self.cursor.close()


def _find(collection: Any, kwargs: dict[str, Any]) -> Any:
    """``find()``, its maxAwaitTimeMS set with the cursor's builder method: PyMongo's
    find takes no such keyword."""
    wait = kwargs.pop("max_await_time_ms", None)
    cursor = collection.find(**kwargs)
    return cursor if wait is None else cursor.max_await_time_ms(wait)


def _create_find_cursor(collection: Any, kwargs: dict[str, Any]) -> Any:
    return OpenedCursor(_find(collection, kwargs))


_SPECIAL: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "database.runCommand": _run_command,
    "database.createCollection": _create_collection,
    "database.runCursorCommand": _run_cursor_command,
    "database.createCommandCursor": _command_cursor,
    "collection.listSearchIndexes": _list_search_indexes,
    "collection.createSearchIndexes": _create_search_indexes,
    "collection.find": lambda collection, kwargs: RootDocuments(_find(collection, kwargs)),
    "collection.createFindCursor": _create_find_cursor,
    **gridfs_ops.OPERATIONS,
    **clientbulk_ops.OPERATIONS,
}
