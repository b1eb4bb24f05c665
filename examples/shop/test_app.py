"""The shop's tests, on each client the app can be given.

    .venv/bin/python -m pytest examples/shop/test_app.py

Every test runs on ``greenpool.Client`` and on ``pymongo.MongoClient`` (``SHOP_CLIENT=
greenpool`` or ``pymongo`` runs one of them): the app is the same, only ``make_client``
differs. The server is ``$MONGODB_URI``, or an embedded SecantusDB started for the run;
each test has a database of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pymongo
import pytest
from flask.testing import FlaskClient

import greenpool
from examples.shop.app import create_app

CLIENTS: dict[str, Callable[..., Any]] = {"greenpool": greenpool.Client,
                                          "pymongo": pymongo.MongoClient}
CHOSEN = [os.environ["SHOP_CLIENT"]] if os.environ.get("SHOP_CLIENT") else list(CLIENTS)


@pytest.fixture(scope="session")
def uri() -> Iterator[str]:
    if os.environ.get("MONGODB_URI"):
        yield os.environ["MONGODB_URI"]
        return
    from greenpool.cli.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        yield server.uri


@pytest.fixture(params=CHOSEN)
def shop(request: pytest.FixtureRequest, uri: str) -> Iterator[FlaskClient]:
    """The app's test client, on a client of the kind the test is for."""
    database = f"shop_test_{uuid.uuid4().hex[:12]}"
    app = create_app(uri, database, make_client=CLIENTS[request.param])
    client = app.extensions["mongo_client"]
    try:
        yield app.test_client()
    finally:
        client.drop_database(database)
        client.close()


def add(shop: FlaskClient, sku: str, category: str = "tea", price: float = 4.5,
        name: str | None = None) -> Any:
    return shop.post("/products", json={"sku": sku, "name": name or sku.title(),
                                        "category": category, "price": price})


def test_a_product_is_added_and_a_second_one_with_its_sku_is_a_conflict(
        shop: FlaskClient) -> None:
    assert add(shop, "sencha").status_code == 201
    again = add(shop, "sencha", name="Another sencha")
    assert again.status_code == 409
    assert again.json == {"error": "a product with sku 'sencha' exists"}
    assert shop.get("/products/sencha").json == {
        "sku": "sencha", "name": "Sencha", "category": "tea", "price": 4.5}


def test_bad_products_are_refused_with_the_reason(shop: FlaskClient) -> None:
    missing = shop.post("/products", json={"sku": "x"})
    assert missing.status_code == 400 and b"missing name, category, price" in missing.data
    negative = add(shop, "x", price=-1)
    assert negative.status_code == 400 and b"not -1" in negative.data
    assert shop.get("/products?sort=colour").status_code == 400


def test_the_catalogue_is_filtered_sorted_and_limited(shop: FlaskClient) -> None:
    for sku, category, price in [("assam", "tea", 3.0), ("darjeeling", "tea", 7.5),
                                 ("mocha", "coffee", 6.0), ("gyokuro", "tea", 12.0),
                                 ("kenya", "coffee", 5.0)]:
        assert add(shop, sku, category, price).status_code == 201
    dearest = shop.get("/products?category=tea&sort=price&order=desc&limit=2").json
    assert [p["sku"] for p in dearest["products"]] == ["gyokuro", "darjeeling"]
    by_sku = shop.get("/products").json
    assert [p["sku"] for p in by_sku["products"]] == [
        "assam", "darjeeling", "gyokuro", "kenya", "mocha"]
    assert all("_id" not in p for p in by_sku["products"])


def test_a_new_price_answers_the_product_as_it_is_now(shop: FlaskClient) -> None:
    add(shop, "oolong", price=8)
    assert shop.patch("/products/oolong", json={"price": 9.25}).json["price"] == 9.25
    assert shop.get("/products/oolong").json["price"] == 9.25
    assert shop.patch("/products/nothing", json={"price": 1}).status_code == 404


def test_stock_is_created_at_the_first_delivery_then_counted(shop: FlaskClient) -> None:
    add(shop, "rooibos")
    assert shop.get("/stock/rooibos").json == {"sku": "rooibos", "units": 0}
    first = shop.post("/stock/rooibos", json={"quantity": 10})
    assert first.json == {"sku": "rooibos", "created": True}
    second = shop.post("/stock/rooibos", json={"quantity": 5})
    assert second.json == {"sku": "rooibos", "created": False}
    assert shop.get("/stock/rooibos").json == {"sku": "rooibos", "units": 15}
    assert shop.post("/stock/nothing", json={"quantity": 1}).status_code == 404
    assert shop.post("/stock/rooibos", json={"quantity": 0}).status_code == 400


def test_concurrent_deliveries_are_each_counted_once(shop: FlaskClient) -> None:
    add(shop, "matcha")
    shop.post("/stock/matcha", json={"quantity": 1})
    deliveries = [gevent.spawn(shop.post, "/stock/matcha", json={"quantity": 2})
                  for _ in range(50)]
    gevent.joinall(deliveries, timeout=60, raise_error=True)
    assert all(d.value.status_code == 200 for d in deliveries)
    assert shop.get("/stock/matcha").json["units"] == 101


def test_a_deleted_product_is_gone_with_its_stock(shop: FlaskClient) -> None:
    add(shop, "earl-grey")
    shop.post("/stock/earl-grey", json={"quantity": 3})
    assert shop.delete("/products/earl-grey").status_code == 204
    assert shop.get("/products/earl-grey").status_code == 404
    assert shop.get("/stock/earl-grey").json["units"] == 0
    assert shop.delete("/products/earl-grey").status_code == 404


def test_the_report_groups_the_catalogue_by_category(shop: FlaskClient) -> None:
    for sku, category, price in [("assam", "tea", 3.0), ("sencha", "tea", 6.0),
                                 ("mocha", "coffee", 6.5)]:
        add(shop, sku, category, price)
    shop.post("/stock/assam", json={"quantity": 4})
    shop.post("/stock/sencha", json={"quantity": 6})
    assert shop.get("/report").json == {"categories": [
        {"category": "coffee", "products": 1, "mean_price": 6.5, "units": 0},
        {"category": "tea", "products": 2, "mean_price": 4.5, "units": 10}]}
