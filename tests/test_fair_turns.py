"""Fair turns on both routes against a real server: 300 greenlets spawned
together, 30 pings each, over maxPoolSize 5.

A fast local server often answers before the pinging greenlet blocks, so a
greenlet could check in and straight out again before the greenlets spawned
with it reached the pool (greenpool.pool.waitqueue.Turns). The bounds count
turns, never time: the greenlets' last turns spread over at most a quarter of
all turns (served in turn, they all end in the last round: 1/30 of the turns),
and no greenlet takes more than two turns in a row. The figures go to
``$GREENPOOL_TURNS_FILE`` (default: greenpool-turns.json in the temp dir).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest

import greenpool
from tests.turns import take_turns

GREENLETS, PINGS, POOL_SIZE = 300, 30, 5
TURNS_FILE = Path(os.environ.get(
    "GREENPOOL_TURNS_FILE", Path(tempfile.gettempdir()) / "greenpool-turns.json"))


def client_route(uri: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    joiner = "&" if "?" in uri else ("?" if uri.endswith("/") else "/?")
    client = greenpool.Client(f"{uri}{joiner}maxPoolSize={POOL_SIZE}")
    return (lambda: client.command("admin", {"ping": 1})), client.close


def pymongo_route(uri: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    from greenpool.pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(uri, maxPoolSize=POOL_SIZE)
    return (lambda: client.admin.command("ping")), client.close


@pytest.mark.timeout(300)
@pytest.mark.parametrize("route", [client_route, pymongo_route],
                         ids=["greenpool.Client", "greenpool.pymongo"])
def test_greenlets_spawned_together_are_served_in_turn(
        mongodb_uri: str, route: Callable[[str], Any]) -> None:
    ping, close = route(mongodb_uri)
    try:
        # The connections exist before the run: every turn is a checkout.
        gevent.joinall([gevent.spawn(ping) for _ in range(POOL_SIZE)], raise_error=True)
        result = take_turns(ping, GREENLETS, PINGS)
    finally:
        close()
    figures = {key: value for key, value in result.items() if key != "order"}
    line = json.dumps({"route": route.__name__, "greenlets": GREENLETS, "pings": PINGS,
                       "maxPoolSize": POOL_SIZE, **figures})
    with TURNS_FILE.open("a") as out:
        out.write(line + "\n")
    print(line)
    assert result["spread"] <= 0.25, line
    assert result["longest_run"] <= 2, line
