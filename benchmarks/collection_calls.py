"""Collection API calls in a loop, on greenpool.Client or on stock PyMongo: the workload
``instructions.py --collection`` counts.

    .venv/bin/python benchmarks/collection_calls.py --client greenpool --call find_one \
        [--ops 2000] [--greenlets 10]

Starts its own SecantusDB on 127.0.0.1 (pinned to one CPU and this process to
another when there are two, as bench.py does), patches the standard library
with gevent, seeds a collection, warms the client (maxPoolSize 10) up, then
runs ``--ops`` calls over ``--greenlets`` greenlets and prints the CPU µs per
call. The calls are bench.py's collection workloads: ``insert_one`` of a new
document, ``find_one`` by ``_id``, ``update_one`` by ``_id`` (``$inc``), and
``find100`` (a ``find`` whose one batch holds the collection's 100 documents).
"""

from __future__ import annotations

import argparse
import os
import resource
from collections.abc import Callable
from typing import Any

CALLS = ("insert_one", "find_one", "update_one", "find100")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("greenpool", "pymongo"), required=True)
    parser.add_argument("--call", choices=CALLS, required=True)
    parser.add_argument("--ops", type=int, default=2000, help="calls in total")
    parser.add_argument("--greenlets", type=int, default=10)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[0]})  # the server inherits it
    from greenpool.cli.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[1]})
        from gevent import monkey

        monkey.patch_all()
        run(server.uri, args)


def call_of(collection: Any, name: str) -> Callable[[], Any]:
    if name == "insert_one":
        return lambda: collection.insert_one({"x": 1})
    if name == "find_one":
        return lambda: collection.find_one({"_id": 7})
    if name == "update_one":
        return lambda: collection.update_one({"_id": 7}, {"$inc": {"n": 1}})
    return lambda: collection.find({}).to_list()


def run(uri: str, args: argparse.Namespace) -> None:
    import gevent
    from pymongo import MongoClient

    import greenpool

    uri = f"{uri}{'&' if '?' in uri else '?'}maxPoolSize=10"
    client: Any = greenpool.Client(uri) if args.client == "greenpool" else MongoClient(uri)
    with client:
        collection = client.bench.calls
        collection.drop()
        collection.insert_many([{"_id": i, "n": 0} for i in range(100)])
        call = call_of(collection, args.call)
        per = args.ops // args.greenlets
        total = per * args.greenlets

        def worker(count: int) -> None:
            for _ in range(count):
                call()

        gevent.joinall([gevent.spawn(worker, 20) for _ in range(args.greenlets)])  # warm up
        cpu = cpu_seconds()
        gevent.joinall([gevent.spawn(worker, per) for _ in range(args.greenlets)],
                       raise_error=True)
        cpu = cpu_seconds() - cpu
    print(f"greenpool: {os.path.dirname(greenpool.__file__)}")
    print(f"{args.client} {args.call}, {args.greenlets} greenlets, {total} calls; "
          f"CPU {1e6 * cpu / total:.1f} µs/call")


if __name__ == "__main__":
    main()
