"""A small shop: a Flask app that does its work through PyMongo's collection API.

Run it with gunicorn's gevent workers::

    MONGODB_URI='mongodb://127.0.0.1:27017/?maxPoolSize=10' \
        gunicorn -k gevent -w 2 'app:create_app()'

Products have a unique ``sku`` (a second product with the same sku is a 409), stock is
counted per sku with atomic upserts, and a report groups the catalogue by category.

The app runs unchanged on ``greenpool.Client`` or on ``pymongo.MongoClient``: the client
comes from ``make_client``, and :data:`MAKE_CLIENT` is the one line that chooses
(examples/shop/test_app.py runs every test on both).

Routes:

* ``POST /products``: a new product (``sku``, ``name``, ``category``, ``price``);
* ``GET /products?category=&sort=price&order=desc&limit=10``: the catalogue, sorted;
* ``GET /products/<sku>``: one product; ``PATCH /products/<sku>``: a new ``price``,
  answering the product as it is now; ``DELETE /products/<sku>``: remove it;
* ``POST /stock/<sku>``: add ``{"quantity": n}`` to the stock (created at the first
  delivery); ``GET /stock/<sku>``: the stock;
* ``GET /report``: per category, the number of products, their mean price and the
  units in stock.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from flask import Flask, abort, request
from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

import greenpool

#: How the app gets its client: ``greenpool.Client``, or ``pymongo.MongoClient``.
MAKE_CLIENT: Callable[..., Any] = greenpool.Client

SORTABLE = ("sku", "name", "price")
#: A product as the API shows it (no _id).
PUBLIC = {"_id": False}


def create_app(uri: str | None = None, database: str = "shop",
               make_client: Callable[..., Any] = MAKE_CLIENT) -> Flask:
    """The app, on a client ``make_client(uri)`` makes (``$MONGODB_URI`` by default)."""
    client = make_client(uri or os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017/"))
    db = client[database]
    products, stock = db.products, db.stock
    products.create_index([("sku", ASCENDING)], unique=True)
    products.create_index([("category", ASCENDING), ("price", ASCENDING)])

    app = Flask(__name__)
    app.extensions["mongo_client"] = client

    @app.post("/products")
    def add_product() -> tuple[dict[str, Any], int]:
        product = _product(request.get_json(silent=True))
        try:
            products.insert_one(product)
        except DuplicateKeyError:
            return {"error": f"a product with sku {product['sku']!r} exists"}, 409
        return {"sku": product["sku"]}, 201

    @app.get("/products")
    def list_products() -> dict[str, Any]:
        field = request.args.get("sort", "sku")
        if field not in SORTABLE:
            abort(400, f"sort must be one of {', '.join(SORTABLE)}, not {field!r}")
        direction = DESCENDING if request.args.get("order") == "desc" else ASCENDING
        limit = request.args.get("limit", 20, type=int)
        query = {"category": request.args["category"]} if "category" in request.args else {}
        cursor = products.find(query, PUBLIC).sort([(field, direction), ("sku", ASCENDING)])
        return {"products": list(cursor.limit(limit))}

    @app.get("/products/<sku>")
    def get_product(sku: str) -> dict[str, Any]:
        product = products.find_one({"sku": sku}, PUBLIC)
        if product is None:
            abort(404, f"no product {sku!r}")
        return dict(product)

    @app.patch("/products/<sku>")
    def reprice(sku: str) -> dict[str, Any]:
        price = _price((request.get_json(silent=True) or {}).get("price"))
        product = products.find_one_and_update({"sku": sku}, {"$set": {"price": price}},
                                               projection=PUBLIC,
                                               return_document=ReturnDocument.AFTER)
        if product is None:
            abort(404, f"no product {sku!r}")
        return dict(product)

    @app.delete("/products/<sku>")
    def delete_product(sku: str) -> tuple[str, int]:
        if products.delete_one({"sku": sku}).deleted_count == 0:
            abort(404, f"no product {sku!r}")
        stock.delete_one({"_id": sku})
        return "", 204

    @app.post("/stock/<sku>")
    def deliver(sku: str) -> dict[str, Any]:
        quantity = (request.get_json(silent=True) or {}).get("quantity")
        if not isinstance(quantity, int) or quantity <= 0:
            abort(400, f"quantity must be a positive integer, not {quantity!r}")
        if products.find_one({"sku": sku}, {"_id": True}) is None:
            abort(404, f"no product {sku!r}")
        result = stock.update_one({"_id": sku}, {"$inc": {"units": quantity}}, upsert=True)
        return {"sku": sku, "created": result.upserted_id is not None}

    @app.get("/stock/<sku>")
    def units(sku: str) -> dict[str, Any]:
        found = stock.find_one({"_id": sku})
        return {"sku": sku, "units": found["units"] if found else 0}

    @app.get("/report")
    def report() -> dict[str, Any]:
        pipeline = [
            {"$lookup": {"from": "stock", "localField": "sku", "foreignField": "_id",
                         "as": "stock"}},
            # At most one stock document per product (its _id is the sku).
            {"$unwind": {"path": "$stock", "preserveNullAndEmptyArrays": True}},
            {"$group": {"_id": "$category", "products": {"$sum": 1},
                        "mean_price": {"$avg": "$price"},
                        "units": {"$sum": "$stock.units"}}},
            {"$sort": {"_id": 1}},
        ]
        return {"categories": [{"category": row["_id"], "products": row["products"],
                                "mean_price": round(row["mean_price"], 2),
                                "units": row["units"]}
                               for row in products.aggregate(pipeline)]}

    return app


def _product(body: Any) -> dict[str, Any]:
    """A product from a request's JSON body; a 400 naming what is wrong."""
    if not isinstance(body, dict):
        abort(400, "the body must be a JSON object")
    missing = [field for field in ("sku", "name", "category", "price") if field not in body]
    if missing:
        abort(400, f"missing {', '.join(missing)}")
    return {"sku": str(body["sku"]), "name": str(body["name"]),
            "category": str(body["category"]), "price": _price(body["price"])}


def _price(price: Any) -> int | float:
    if not isinstance(price, int | float) or isinstance(price, bool) or price < 0:
        abort(400, f"price must be a non-negative number, not {price!r}")
    return price
