"""The client bulk write in the unified format: ``client.clientBulkWrite``, its
``models`` as PyMongo's operation classes with ``namespace=``, its result and its
error as the documents the files expect (the format's "clientBulkWrite").

Each model is a one-key document (``{insertOne: {namespace, document}}``...); the call
is the client's ``bulk_write`` (PyMongo's MongoClient's or greenpool's Client's). A
ClientBulkWriteException's top-level ``error`` is what ``errorCode``,
``errorContains`` and the other assertions about one error look at; its
``writeErrors`` and ``writeConcernErrors`` are for the ``expectError`` fields of those
names, and its partial result for ``expectResult``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pymongo.errors import ClientBulkWriteException
from pymongo.operations import (
    DeleteMany,
    DeleteOne,
    InsertOne,
    ReplaceOne,
    UpdateMany,
    UpdateOne,
)
from pymongo.results import ClientBulkWriteResult

_OPTIONS = {"collation": "collation", "hint": "hint"}
_UPDATE = {**_OPTIONS, "filter": "filter", "update": "update", "upsert": "upsert",
           "arrayFilters": "array_filters"}

# Each model's arguments and its class's keywords (namespace= on every one).
_MODELS: dict[str, tuple[Callable[..., Any], dict[str, str]]] = {
    "insertOne": (InsertOne, {"document": "document"}),
    "updateOne": (UpdateOne, {**_UPDATE, "sort": "sort"}),
    "updateMany": (UpdateMany, _UPDATE),
    "replaceOne": (ReplaceOne, {**_OPTIONS, "filter": "filter", "replacement": "replacement",
                                "upsert": "upsert", "sort": "sort"}),
    "deleteOne": (DeleteOne, {**_OPTIONS, "filter": "filter"}),
    "deleteMany": (DeleteMany, {**_OPTIONS, "filter": "filter"}),
}

#: The operation's arguments and the bulk_write keywords they are
#: (tests/unified/arguments.py reads this table).
KEYWORDS: dict[str, dict[str, str]] = {
    "client.clientBulkWrite": {"models": "models", "session": "session", "ordered": "ordered",
                               "verboseResults": "verbose_results",
                               "bypassDocumentValidation": "bypass_document_validation",
                               "comment": "comment", "let": "let",
                               "writeConcern": "write_concern"},
}


def models(documents: list[Mapping[str, Any]]) -> list[Any]:
    """The ``models`` argument as PyMongo's operation objects."""
    operations = []
    for model in documents:
        ((kind, fields),) = model.items()
        assert kind in _MODELS, f"clientBulkWrite model {kind!r} is not supported"
        make, names = _MODELS[kind]
        given = dict(fields)
        namespace = given.pop("namespace")
        unknown = sorted(set(given) - set(names))
        assert not unknown, f"clientBulkWrite {kind}: argument(s) {unknown} are not supported"
        operations.append(make(**{names[key]: value for key, value in given.items()},
                               namespace=namespace))
    return operations


def _client_bulk_write(client: Any, kwargs: dict[str, Any]) -> Any:
    return client.bulk_write(models(kwargs.pop("models")), **kwargs)


#: The operation, for tests/unified/operations.py's table.
OPERATIONS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "client.clientBulkWrite": _client_bulk_write,
}


def result_document(result: ClientBulkWriteResult) -> dict[str, Any]:
    """An acknowledged result's counts, and its verbose results if it has them."""
    document: dict[str, Any] = {
        "insertedCount": result.inserted_count, "upsertedCount": result.upserted_count,
        "matchedCount": result.matched_count, "modifiedCount": result.modified_count,
        "deletedCount": result.deleted_count}
    if result.has_verbose_results:
        document["insertResults"] = {str(index): {"insertedId": each.inserted_id}
                                     for index, each in result.insert_results.items()}
        document["updateResults"] = {str(index): _update(each)
                                     for index, each in result.update_results.items()}
        document["deleteResults"] = {str(index): {"deletedCount": each.deleted_count}
                                     for index, each in result.delete_results.items()}
    return document


def _update(result: Any) -> dict[str, Any]:
    document = {"matchedCount": result.matched_count, "modifiedCount": result.modified_count}
    if result.did_upsert:
        document["upsertedId"] = result.upserted_id
    return document


def error_result(error: ClientBulkWriteException) -> dict[str, Any] | None:
    """The partial result the error carries (None when nothing was written)."""
    partial = error.partial_result
    return None if partial is None else result_document(partial)


def top_level(error: BaseException) -> BaseException:
    """The error the assertions about one error look at: a ClientBulkWriteException's
    top-level ``error`` if it has one, else ``error`` itself."""
    if isinstance(error, ClientBulkWriteException) and isinstance(error.error, BaseException):
        return error.error
    return error


def write_errors(error: BaseException) -> dict[str, Any]:
    """The write errors by index, as ``expectError.writeErrors`` has them."""
    assert isinstance(error, ClientBulkWriteException), (
        f"writeErrors: {error!r} is not a ClientBulkWriteException")
    return {str(each["idx"]): each for each in error.write_errors or []}


def write_concern_errors(error: BaseException) -> list[dict[str, Any]]:
    """The write concern errors, each with its ``errmsg`` as ``message`` too."""
    assert isinstance(error, ClientBulkWriteException), (
        f"writeConcernErrors: {error!r} is not a ClientBulkWriteException")
    return [{**each, "message": each.get("errmsg")} for each in error.write_concern_errors or []]
