"""The views: each reads and writes MongoDB through the module-level client."""

import os

from django.http import Http404, HttpRequest, JsonResponse
from pymongo.errors import DuplicateKeyError

from greenpool import ReturnDocument
from visits.mongo import client, db


def count_visit(name: str) -> dict:
    """One more visit of ``name``, atomically; the updated document."""
    return db.visits.find_one_and_update({"_id": name}, {"$inc": {"count": 1}},
                                         upsert=True, return_document=ReturnDocument.AFTER)


def visit(request: HttpRequest, name: str) -> JsonResponse:
    """``GET /visit/<name>``: count a visit; the new count, the worker's pid and the
    class of the client's pools."""
    try:
        counter = count_visit(name)
    except DuplicateKeyError:
        # Two first visits of a name can race: both upserts find nothing, both
        # insert, and one insert fails on the unique _id. MongoDB's advice is to
        # retry: the document exists now, and the retry increments it.
        counter = count_visit(name)
    return JsonResponse({"name": name, "count": counter["count"], "pid": os.getpid(),
                         "pools": sorted({type(p).__name__ for p in client.pools.values()})})


def visits(request: HttpRequest, name: str) -> JsonResponse:
    """``GET /visits/<name>``: the stored document, or 404."""
    found = db.visits.find_one({"_id": name})
    if found is None:
        raise Http404(f"no visit of {name}")
    return JsonResponse(found)


def top(request: HttpRequest) -> JsonResponse:
    """``GET /top?n=3``: the most visited names, most first."""
    limit = int(request.GET.get("n", "3"))
    names = list(db.visits.find({}, sort=[("count", -1), ("_id", 1)], limit=limit))
    return JsonResponse({"top": names})
