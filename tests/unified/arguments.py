"""The spec's argument names and values, in PyMongo's API.

Test files name an operation's arguments as the specifications do (camelCase, options
flattened beside the required parameters). Each operation below maps every argument it
accepts to PyMongo's keyword for it; an argument an operation does not list is an error
(the format's "Executing an Operation"), never dropped. Where PyMongo takes a
command option as a keyword of its own spelling (``aggregate(pipeline, allowDiskUse=...)``,
``count_documents(filter, maxTimeMS=...)``), the table says so, as PyMongo documents it.

Values the format says to convert before the call are converted here: ``session`` to the
session entity, ``readConcern`` / ``writeConcern`` / ``readPreference`` documents to
PyMongo's objects, ``returnDocument`` to :class:`~pymongo.ReturnDocument`, a bulk
write's requests to PyMongo's operation classes, ``cursorType`` to
:class:`~pymongo.CursorType`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pymongo import CursorType, ReturnDocument
from pymongo.operations import (
    DeleteMany,
    DeleteOne,
    InsertOne,
    ReplaceOne,
    UpdateMany,
    UpdateOne,
)
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import make_read_preference, read_pref_mode_from_name
from pymongo.write_concern import WriteConcern

from tests.unified import clientbulk_ops, gridfs_ops

# Arguments many operations share, and what PyMongo calls them.
_SESSION = {"session": "session"}
_COMMENT = {"comment": "comment"}
_WRITE = {**_SESSION, **_COMMENT, "let": "let", "hint": "hint", "collation": "collation"}
_FIND = {**_SESSION, **_COMMENT, "filter": "filter", "sort": "sort", "skip": "skip",
         "projection": "projection", "hint": "hint", "collation": "collation",
         "maxTimeMS": "max_time_ms", "allowDiskUse": "allow_disk_use", "let": "let",
         "min": "min", "max": "max", "returnKey": "return_key",
         "showRecordId": "show_record_id", "noCursorTimeout": "no_cursor_timeout",
         "allowPartialResults": "allow_partial_results"}
_CURSOR = {"limit": "limit", "batchSize": "batch_size", "cursorType": "cursor_type",
           "maxAwaitTimeMS": "max_await_time_ms"}
_FIND_AND_MODIFY = {**_WRITE, "filter": "filter", "projection": "projection", "sort": "sort",
                    "maxTimeMS": "maxTimeMS"}
_UPDATE = {**_WRITE, "filter": "filter", "upsert": "upsert",
           "bypassDocumentValidation": "bypass_document_validation"}

_CHANGE_STREAM = {**_SESSION, **_COMMENT, "pipeline": "pipeline",
                  "fullDocument": "full_document",
                  "fullDocumentBeforeChange": "full_document_before_change",
                  "resumeAfter": "resume_after", "startAfter": "start_after",
                  "startAtOperationTime": "start_at_operation_time",
                  "maxAwaitTimeMS": "max_await_time_ms", "batchSize": "batch_size",
                  "collation": "collation", "showExpandedEvents": "show_expanded_events"}

#: For each operation (``<entity kind>.<name>``), its arguments and PyMongo's keywords.
KEYWORDS: dict[str, dict[str, str]] = {
    "client.createChangeStream": _CHANGE_STREAM,
    "database.createChangeStream": _CHANGE_STREAM,
    "collection.createChangeStream": _CHANGE_STREAM,
    "collection.rename": {**_SESSION, **_COMMENT, "to": "new_name", "dropTarget": "dropTarget"},
    # Client
    "client.listDatabases": {**_SESSION, **_COMMENT, "filter": "filter"},
    "client.listDatabaseNames": {**_SESSION, **_COMMENT, "filter": "filter"},
    "client.listDatabaseObjects": {**_SESSION, **_COMMENT, "filter": "filter"},
    "client.dropDatabase": {**_SESSION, **_COMMENT, "database": "name_or_database"},
    # Database
    "database.aggregate": {**_SESSION, **_COMMENT, "pipeline": "pipeline", "let": "let",
                           "allowDiskUse": "allowDiskUse", "batchSize": "batchSize",
                           "maxTimeMS": "maxTimeMS", "maxAwaitTimeMS": "maxAwaitTimeMS",
                           "collation": "collation", "hint": "hint"},
    "database.runCommand": {**_SESSION, "command": "command", "commandName": "commandName",
                            "readPreference": "read_preference"},
    "database.runCursorCommand": {**_SESSION, **_COMMENT, "command": "command",
                                  "commandName": "commandName",
                                  "readPreference": "read_preference",
                                  "batchSize": "batch_size", "maxTimeMS": "max_await_time_ms"},
    "database.createCommandCursor": {**_SESSION, **_COMMENT, "command": "command",
                                     "commandName": "commandName",
                                     "readPreference": "read_preference",
                                     "batchSize": "batch_size", "cursorType": "cursorType",
                                     "maxTimeMS": "max_await_time_ms"},
    "database.createCollection": {**_SESSION, "collection": "name", "viewOn": "viewOn",
                                  "pipeline": "pipeline", "capped": "capped", "size": "size",
                                  "max": "max", "validator": "validator",
                                  "expireAfterSeconds": "expireAfterSeconds",
                                  "timeseries": "timeseries",
                                  "clusteredIndex": "clusteredIndex",
                                  "changeStreamPreAndPostImages":
                                      "changeStreamPreAndPostImages"},
    "database.dropCollection": {**_SESSION, **_COMMENT, "collection": "name_or_collection"},
    "database.listCollections": {**_SESSION, **_COMMENT, "filter": "filter"},
    "database.listCollectionNames": {**_SESSION, **_COMMENT, "filter": "filter"},
    "database.listCollectionObjects": {**_SESSION, **_COMMENT, "filter": "filter"},
    # Collection
    "collection.aggregate": {**_SESSION, **_COMMENT, "pipeline": "pipeline", "let": "let",
                             "allowDiskUse": "allowDiskUse", "batchSize": "batchSize",
                             "bypassDocumentValidation": "bypassDocumentValidation",
                             "maxTimeMS": "maxTimeMS", "maxAwaitTimeMS": "maxAwaitTimeMS",
                             "collation": "collation", "hint": "hint"},
    "collection.bulkWrite": {**_SESSION, **_COMMENT, "requests": "requests",
                             "ordered": "ordered", "let": "let",
                             "bypassDocumentValidation": "bypass_document_validation"},
    "collection.countDocuments": {**_SESSION, **_COMMENT, "filter": "filter", "skip": "skip",
                                  "limit": "limit", "collation": "collation", "hint": "hint",
                                  "maxTimeMS": "maxTimeMS"},
    "collection.estimatedDocumentCount": {**_COMMENT, "maxTimeMS": "maxTimeMS"},
    "collection.distinct": {**_SESSION, **_COMMENT, "fieldName": "key", "filter": "filter",
                            "collation": "collation", "hint": "hint",
                            "maxTimeMS": "maxTimeMS"},
    "collection.find": {**_FIND, **_CURSOR},
    "collection.createFindCursor": {**_FIND, **_CURSOR},
    "collection.findOne": _FIND,
    "collection.findOneAndDelete": _FIND_AND_MODIFY,
    "collection.findOneAndReplace": {**_FIND_AND_MODIFY, "replacement": "replacement",
                                     "upsert": "upsert", "returnDocument": "return_document",
                                     "bypassDocumentValidation": "bypassDocumentValidation"},
    "collection.findOneAndUpdate": {**_FIND_AND_MODIFY, "update": "update", "upsert": "upsert",
                                    "returnDocument": "return_document",
                                    "arrayFilters": "array_filters",
                                    "bypassDocumentValidation": "bypassDocumentValidation"},
    "collection.insertOne": {**_SESSION, **_COMMENT, "document": "document",
                             "bypassDocumentValidation": "bypass_document_validation"},
    "collection.insertMany": {**_SESSION, **_COMMENT, "documents": "documents",
                              "ordered": "ordered",
                              "bypassDocumentValidation": "bypass_document_validation"},
    "collection.replaceOne": {**_UPDATE, "replacement": "replacement", "sort": "sort"},
    "collection.updateOne": {**_UPDATE, "update": "update", "arrayFilters": "array_filters",
                             "sort": "sort"},
    "collection.updateMany": {**_UPDATE, "update": "update", "arrayFilters": "array_filters"},
    "collection.deleteOne": {**_WRITE, "filter": "filter"},
    "collection.deleteMany": {**_WRITE, "filter": "filter"},
    "collection.createIndex": {**_SESSION, **_COMMENT, "keys": "keys", "name": "name",
                               "unique": "unique", "sparse": "sparse",
                               "expireAfterSeconds": "expireAfterSeconds",
                               "partialFilterExpression": "partialFilterExpression",
                               "hidden": "hidden", "collation": "collation",
                               "maxTimeMS": "maxTimeMS"},
    "collection.dropIndex": {**_SESSION, **_COMMENT, "name": "index_or_name",
                             "maxTimeMS": "maxTimeMS"},
    "collection.dropIndexes": {**_SESSION, **_COMMENT, "maxTimeMS": "maxTimeMS"},
    "collection.listIndexes": {**_SESSION, **_COMMENT},
    "collection.createSearchIndex": {"model": "model"},
    "collection.createSearchIndexes": {"models": "models"},
    "collection.listSearchIndexes": {"name": "name", "aggregationOptions": "aggregationOptions"},
    "collection.updateSearchIndex": {"name": "name", "definition": "definition"},
    "collection.dropSearchIndex": {"name": "name"},
    "collection.drop": {**_SESSION, **_COMMENT},
    # Session
    "session.startTransaction": {"readConcern": "read_concern",
                                 "writeConcern": "write_concern",
                                 "readPreference": "read_preference",
                                 "maxCommitTimeMS": "max_commit_time_ms"},
    "session.commitTransaction": {},
    "session.abortTransaction": {},
    "session.endSession": {},
    # GridFS buckets
    **gridfs_ops.KEYWORDS,
    **clientbulk_ops.KEYWORDS,
}

# The arguments of each model of a bulk write, in PyMongo's operation classes.
_MODELS: dict[str, tuple[Callable[..., Any], dict[str, str]]] = {
    "insertOne": (InsertOne, {"document": "document"}),
    "updateOne": (UpdateOne, {"filter": "filter", "update": "update", "upsert": "upsert",
                              "collation": "collation", "arrayFilters": "array_filters",
                              "hint": "hint", "sort": "sort"}),
    "updateMany": (UpdateMany, {"filter": "filter", "update": "update", "upsert": "upsert",
                                "collation": "collation", "arrayFilters": "array_filters",
                                "hint": "hint"}),
    "replaceOne": (ReplaceOne, {"filter": "filter", "replacement": "replacement",
                                "upsert": "upsert", "collation": "collation", "hint": "hint",
                                "sort": "sort"}),
    "deleteOne": (DeleteOne, {"filter": "filter", "collation": "collation", "hint": "hint"}),
    "deleteMany": (DeleteMany, {"filter": "filter", "collation": "collation",
                                "hint": "hint"}),
}


def keywords(operation: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` (already converted) as PyMongo's keywords for ``operation``
    (``collection.insertOne``...); an AssertionError names any argument it does not take."""
    names = KEYWORDS.get(operation)
    assert names is not None, f"{operation} is not an operation this runner supports"
    unknown = sorted(set(arguments) - set(names))
    assert not unknown, f"{operation}: argument(s) {unknown} are not supported by this runner"
    return {names[key]: value for key, value in arguments.items()}


def convert(arguments: Mapping[str, Any], entities: Mapping[str, Any]) -> dict[str, Any]:
    """The values the format says to convert before the call (see the module's docstring)."""
    converted = dict(arguments)
    if "session" in converted:
        converted["session"] = entities[converted["session"]]
    for key, make in _VALUES.items():
        if key in converted:
            converted[key] = make(converted[key])
    return converted


def read_concern(document: Mapping[str, Any]) -> ReadConcern:
    return ReadConcern(**document)


def write_concern(document: Mapping[str, Any]) -> WriteConcern:
    unknown = set(document) - {"w", "journal", "wtimeoutMS"}
    assert not unknown, f"writeConcern fields {sorted(unknown)} are not in the format"
    return WriteConcern(w=document.get("w"), j=document.get("journal"),
                        wtimeout=document.get("wtimeoutMS"))


def read_preference(document: Mapping[str, Any]) -> Any:
    unknown = set(document) - {"mode", "tagSets", "maxStalenessSeconds"}
    assert not unknown, f"readPreference fields {sorted(unknown)} are not supported"
    mode = read_pref_mode_from_name(document["mode"][0].lower() + document["mode"][1:])
    return make_read_preference(mode, document.get("tagSets"),
                                document.get("maxStalenessSeconds", -1))


def return_document(value: str) -> bool:
    choices = {"before": ReturnDocument.BEFORE, "after": ReturnDocument.AFTER}
    assert isinstance(value, str) and value.lower() in choices, (
        f"returnDocument {value!r} is neither Before nor After")
    return choices[value.lower()]


def cursor_type(value: str) -> int:
    choices = {"nonTailable": CursorType.NON_TAILABLE, "tailable": CursorType.TAILABLE,
               "tailableAwait": CursorType.TAILABLE_AWAIT}
    assert value in choices, f"cursorType {value!r} is not one of {sorted(choices)}"
    return choices[value]


def requests(models: list[Mapping[str, Any]]) -> list[Any]:
    """A bulk write's requests, each a one-key document, as PyMongo's operation objects."""
    operations = []
    for model in models:
        ((kind, fields),) = model.items()
        assert kind in _MODELS, f"bulkWrite model {kind!r} is not a collection bulk write model"
        make, names = _MODELS[kind]
        unknown = sorted(set(fields) - set(names))
        assert not unknown, f"bulkWrite {kind}: argument(s) {unknown} are not supported"
        operations.append(make(**{names[key]: value for key, value in fields.items()}))
    return operations


_VALUES: dict[str, Callable[[Any], Any]] = {
    "readConcern": read_concern,
    "writeConcern": write_concern,
    "readPreference": read_preference,
    "returnDocument": return_document,
    "cursorType": cursor_type,
    "requests": requests,
}
