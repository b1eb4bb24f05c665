"""PyMongo's result objects as the documents the spec files expect (the format's
"Converting Returned Model Objects to Documents"), read through their public properties.

An unacknowledged write's result is ``{acknowledged: false}`` (its counts raise in
PyMongo). A bulk write error carries a result too: the counts in its ``details``.
"""

from __future__ import annotations

from typing import Any

from pymongo.errors import BulkWriteError, ClientBulkWriteException
from pymongo.results import (
    BulkWriteResult,
    ClientBulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)

from tests.unified import clientbulk_ops


def as_document(result: Any) -> Any:
    """``result`` as the format compares it; anything but a write result is itself."""
    for kind, converter in _CONVERTERS.items():
        if isinstance(result, kind):
            if not result.acknowledged:  # type: ignore[attr-defined]
                return {"acknowledged": False}
            return {"acknowledged": True, **converter(result)}
    return result


def _insert_one(result: InsertOneResult) -> dict[str, Any]:
    return {"insertedId": result.inserted_id}


def _insert_many(result: InsertManyResult) -> dict[str, Any]:
    return {"insertedIds": {str(i): _id for i, _id in enumerate(result.inserted_ids)}}


def _update(result: UpdateResult) -> dict[str, Any]:
    document = {"matchedCount": result.matched_count, "modifiedCount": result.modified_count,
                "upsertedCount": 1 if result.did_upsert else 0}
    if result.did_upsert:
        document["upsertedId"] = result.upserted_id
    return document


def _delete(result: DeleteResult) -> dict[str, Any]:
    return {"deletedCount": result.deleted_count}


def _bulk(result: BulkWriteResult) -> dict[str, Any]:
    return {"insertedCount": result.inserted_count, "matchedCount": result.matched_count,
            "modifiedCount": result.modified_count, "deletedCount": result.deleted_count,
            "upsertedCount": result.upserted_count,
            "upsertedIds": {str(i): _id for i, _id in (result.upserted_ids or {}).items()}}


_CONVERTERS: dict[type, Any] = {
    InsertOneResult: _insert_one,
    InsertManyResult: _insert_many,
    UpdateResult: _update,
    DeleteResult: _delete,
    BulkWriteResult: _bulk,
    ClientBulkWriteResult: clientbulk_ops.result_document,
}


def error_result(error: BaseException) -> dict[str, Any] | None:
    """The partial result a bulk write error reports (``BulkWriteError.details``, a
    client bulk write's partial result); None for any other error."""
    if isinstance(error, ClientBulkWriteException):
        return clientbulk_ops.error_result(error)
    if not isinstance(error, BulkWriteError):
        return None
    details = error.details
    return {"insertedCount": details["nInserted"], "matchedCount": details["nMatched"],
            "modifiedCount": details["nModified"], "deletedCount": details["nRemoved"],
            "upsertedCount": details["nUpserted"],
            "upsertedIds": {str(item["index"]): item["_id"]
                            for item in details.get("upserted", [])}}
