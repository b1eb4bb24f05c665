"""greenpool's demo: many greenlets sharing a small pool, fairly.

Run it with ``python3 tools/dev.py demo`` (or ``python -m greenpool.demo``).
It spawns a few thousand greenlets that each check out a connection, hold it
for a simulated round trip and check it back in, then prints what happened:
operations per second, the CMAP events the pool emitted, and how long the
greenlets waited (the FIFO queue keeps the slowest wait close to the fair
share: the whole queue ahead of you at the measured throughput).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Any

import gevent
from pymongo import monitoring

from greenpool import Connection, Pool


class SimulatedTransport:
    """A pretend connection: a round trip is a cooperative sleep."""

    def __init__(self, rtt: float) -> None:
        self.rtt = rtt

    def round_trip(self) -> None:
        gevent.sleep(self.rtt)

    def close(self) -> None:
        pass


class EventCounter(monitoring.ConnectionPoolListener):
    """Counts CMAP events by type."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def _count(self, event: object) -> None:
        self.counts[type(event).__name__] += 1

    pool_created = pool_ready = pool_cleared = pool_closed = _count
    connection_created = connection_ready = connection_closed = _count
    connection_check_out_started = connection_check_out_failed = _count
    connection_checked_out = connection_checked_in = _count


def run(greenlets: int, operations: int, pool_size: int, rtt: float) -> dict[str, Any]:
    counter = EventCounter()

    def connect(conn: Connection[SimulatedTransport]) -> SimulatedTransport:
        gevent.sleep(rtt * 3)  # a handshake costs a few round trips
        return SimulatedTransport(rtt)

    pool = Pool(("demo.invalid", 27017), {"maxPoolSize": pool_size}, connector=connect,
                listeners=[counter])
    pool.ready()
    waits: list[float] = []
    finished: list[float] = []
    start = time.monotonic()

    def worker() -> None:
        for _ in range(operations):
            asked = time.monotonic()
            with pool.checkout() as conn:
                waits.append(time.monotonic() - asked)
                assert conn.transport is not None
                conn.transport.round_trip()
        finished.append(time.monotonic() - start)

    gevent.joinall([gevent.spawn(worker) for _ in range(greenlets)], raise_error=True)
    elapsed = time.monotonic() - start
    stats = pool.stats()
    pool.close()
    waits.sort()
    return {
        "operations": len(waits),
        "seconds": elapsed,
        "ops_per_second": len(waits) / elapsed,
        "wait_p50_ms": 1000 * waits[len(waits) // 2],
        "wait_p99_ms": 1000 * waits[int(len(waits) * 0.99)],
        "wait_max_ms": 1000 * waits[-1],
        "finish_spread_ms": 1000 * (max(finished) - min(finished)),
        "finish_stdev_ms": 1000 * statistics.pstdev(finished),
        "connections_opened": stats.total,
        "events": dict(counter.counts),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greenlets", type=int, default=2000)
    parser.add_argument("--operations", type=int, default=20, help="per greenlet")
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--rtt-ms", type=float, default=0.2, help="simulated round trip")
    args = parser.parse_args(argv)
    result = run(args.greenlets, args.operations, args.pool_size, args.rtt_ms / 1000)
    print(f"{args.greenlets} greenlets x {args.operations} operations over "
          f"maxPoolSize={args.pool_size} (simulated {args.rtt_ms} ms round trips)")
    for key, value in result.items():
        if key == "events":
            print("CMAP events:")
            for name, count in sorted(value.items()):
                print(f"  {name:32} {count}")
        elif isinstance(value, float):
            print(f"{key:20} {value:,.2f}")
        else:
            print(f"{key:20} {value}")


if __name__ == "__main__":
    main()
