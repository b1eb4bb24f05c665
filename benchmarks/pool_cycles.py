"""Checkout+checkin cycles on a bare pool, for instructions.py: no server, no sockets.

    .venv/bin/python benchmarks/pool_cycles.py [--greenlets 1] [--ops 20000] [--listener]

A :class:`greenpool.Pool` with maxPoolSize 10 and a connector whose transports do
nothing, warmed up, then ``--ops`` checkout+checkin cycles in total over
``--greenlets`` greenlets. One greenlet is the uncontended cycle (every checkout
finds an idle connection); more than ten wait in the queue, each doing one hub turn
of "work" (``gevent.sleep(0)``) while it holds its connection, so checkins hand
connections straight to waiters. ``--listener`` attaches a listener that implements
all 11 CMAP methods, so the events are built and delivered. It prints the
greenpool package it ran (instructions.py checks it) and the CPU µs per cycle.
"""

from __future__ import annotations

import argparse
import os
import resource
from typing import Any


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class NullTransport:
    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greenlets", type=int, default=1)
    parser.add_argument("--ops", type=int, default=20_000, help="cycles in total")
    parser.add_argument("--listener", action="store_true",
                        help="attach a listener of all 11 CMAP methods")
    args = parser.parse_args()

    import gevent
    from pymongo import monitoring

    import greenpool

    class EveryMethod(monitoring.ConnectionPoolListener):  # records nothing: the cost of events
        def _ignore(self, event: Any) -> None:
            pass

        pool_created = pool_ready = pool_cleared = pool_closed = _ignore
        connection_created = connection_ready = connection_closed = _ignore
        connection_check_out_started = connection_check_out_failed = _ignore
        connection_checked_out = connection_checked_in = _ignore

    pool: greenpool.Pool[NullTransport] = greenpool.Pool(
        ("bench", 27017), {"maxPoolSize": 10}, connector=lambda conn: NullTransport(),
        listeners=[EveryMethod()] if args.listener else [])
    pool.ready()
    contended = args.greenlets > 1
    per = args.ops // args.greenlets

    def worker(count: int) -> None:
        checkout, checkin = pool.checkout, pool.checkin
        for _ in range(count):
            conn = checkout()
            if contended:
                gevent.sleep(0)
            checkin(conn)

    gevent.joinall([gevent.spawn(worker, 100) for _ in range(10)])  # warm up: 10 connections
    cpu = cpu_seconds()
    gevent.joinall([gevent.spawn(worker, per) for _ in range(args.greenlets)],
                   raise_error=True)
    cpu = cpu_seconds() - cpu
    pool.close()
    print(f"greenpool: {os.path.dirname(greenpool.__file__)}")
    print(f"{args.greenlets} greenlets, {per * args.greenlets} cycles: "
          f"CPU {1e6 * cpu / (per * args.greenlets):.2f} µs/cycle")


if __name__ == "__main__":
    main()
