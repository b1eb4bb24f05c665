"""greenpool's demo: a few thousand greenlets sharing one small pool, fairly.

Rules of this module: the demo's workload and report; nothing in the library imports it.

Run it with ``python3 devtools/dev.py demo`` (or ``.venv/bin/python -m greenpool.cli.demo``
once that made ``.venv``).
It connects to ``$MONGODB_URI`` (or ``--uri``), or, when neither is given,
starts an embedded SecantusDB on 127.0.0.1 for the run. Then a few thousand
greenlets each run a series of commands (``ping``, and now and then a
``find`` of 20 small documents in two batches) through one :class:`greenpool.Client`, and it prints
what happened: operations per second, the CMAP events the pool emitted, and
how long checkouts waited. The FIFO queue keeps the slowest wait close to
the fair share: the time the whole queue ahead needs at the measured
throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import gevent
from pymongo import monitoring

from greenpool.client.api.client import Client
from greenpool.pool.monitoring import EventCounter
from greenpool.testing.embedded import EmbeddedServer


class PoolWatcher(EventCounter):
    """Counts CMAP events by type and keeps every checkout's wait."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def connection_checked_out(self, event: monitoring.ConnectionCheckedOutEvent) -> None:
        self._count(event)
        self.waits.append(event.duration or 0.0)


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def run(client: Client, watcher: PoolWatcher, greenlets: int,
        operations: int) -> dict[str, Any]:
    collection = f"demo_{os.getpid()}"
    finished: list[float] = []
    finds = 0
    start = time.monotonic()

    client.command("demo", {"insert": collection,
                            "documents": [{"_id": n, "n": n} for n in range(20)]})

    def worker(number: int) -> None:
        nonlocal finds
        for step in range(operations):
            if (step + number) % 20 == 0:  # now and then a small query
                finds += 1
                list(client.find("demo", collection, {}, batch_size=10))
            else:
                client.command("admin", {"ping": 1})
        finished.append(time.monotonic() - start)

    gevent.joinall([gevent.spawn(worker, n) for n in range(greenlets)], raise_error=True)
    elapsed = time.monotonic() - start
    client.command("demo", {"drop": collection})
    waits = sorted(watcher.waits)
    done = greenlets * operations
    return {
        "operations": done,
        "finds": finds,
        "seconds": elapsed,
        "ops_per_second": done / elapsed,
        "wait_p50_ms": 1000 * percentile(waits, 0.50),
        "wait_p99_ms": 1000 * percentile(waits, 0.99),
        "wait_max_ms": 1000 * waits[-1],
        # FIFO's promise: nobody waits much longer than the whole line ahead
        # (every other greenlet's checkout, at the measured checkout rate).
        "fifo_ideal_max_wait_ms": 1000 * greenlets / (len(waits) / elapsed),
        "finish_spread_ms": 1000 * (max(finished) - min(finished)),
        "connections_opened": watcher.counts["ConnectionCreatedEvent"],
    }


@contextlib.contextmanager
def server_uri(uri: str | None) -> Iterator[str]:
    if uri:
        yield uri
        return
    print("no MONGODB_URI given: starting an embedded SecantusDB on 127.0.0.1", flush=True)
    with EmbeddedServer() as server:
        print(f"embedded server at {server.uri}", flush=True)
        yield server.uri


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=os.environ.get("MONGODB_URI"),
                        help="the server to use (default: $MONGODB_URI, else an embedded one)")
    parser.add_argument("--greenlets", type=int, default=2000)
    parser.add_argument("--operations", type=int, default=20, help="per greenlet")
    parser.add_argument("--pool-size", type=int, default=10, help="maxPoolSize")
    args = parser.parse_args(argv)
    for name in ("greenlets", "operations", "pool_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, "
                         f"not {getattr(args, name)}")
    with server_uri(args.uri) as uri:
        watcher = PoolWatcher()
        separator = "&" if "?" in uri else ("?" if uri.endswith("/") else "/?")
        with Client(f"{uri}{separator}maxPoolSize={args.pool_size}",
                    event_listeners=[watcher]) as client:
            result = run(client, watcher, args.greenlets, args.operations)
    print(f"{args.greenlets} greenlets x {args.operations} operations over one "
          f"greenpool.Client with maxPoolSize={args.pool_size}")
    for key, value in result.items():
        print(f"  {key:24} {value:,.2f}" if isinstance(value, float) else f"  {key:24} {value}")
    print("CMAP events:")
    for name, count in sorted(watcher.counts.items()):
        print(f"  {name:32} {count}")
    checkouts = watcher.counts["ConnectionCheckedOutEvent"]
    ratio = result["wait_max_ms"] / result["fifo_ideal_max_wait_ms"]
    print("Reading the numbers:")
    print(f"  {checkouts} checkouts for {result['operations']} operations: every round trip "
          f"checks out a connection, and each of the {result['finds']} finds makes three "
          "(find, getMore for the second batch of 10, getMore that finds the end); "
          "the setup's insert and drop and close()'s endSessions add 3")
    print(f"  wait_max_ms is {ratio:.1f}x fifo_ideal_max_wait_ms, the time one turn of the "
          "whole queue takes at the measured checkout rate (the longest a fair wait should "
          "be): FIFO keeps the slowest wait near 1x (scheduling noise adds a little); a pool "
          "that lets newcomers jump the queue shows 10x or more")


if __name__ == "__main__":
    main()
