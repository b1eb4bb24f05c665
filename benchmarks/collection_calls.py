"""Collection API calls in a loop, on greenpool.Client, on stock PyMongo or on the floor:
the workload ``instructions.py --collection`` counts.

    .venv/bin/python benchmarks/collection_calls.py --client greenpool --call find_one \
        [--ops 2000] [--greenlets 10]
    .venv/bin/python benchmarks/collection_calls.py --client floor --call find_one [--ops 2000]

Starts its own SecantusDB on 127.0.0.1 (pinned to one CPU and this process to
another when there are two, as bench.py does), patches the standard library
with gevent, seeds a collection, warms the client (maxPoolSize 10) up, then
runs ``--ops`` calls over ``--greenlets`` greenlets and prints the CPU µs per
call. The calls are bench.py's collection workloads: ``insert_one`` of a new
document, ``find_one`` by ``_id``, ``update_one`` by ``_id`` (``$inc``), and
``find100`` (a ``find`` whose one batch holds the collection's 100 documents).

``--client floor`` sends the commands those calls send, built by hand, on ten
raw links (:mod:`greenpool.wire.link`), one greenlet each, as bench.py's floor
(it takes no ``--greenlets``): no pool, no session, no collection API, the
least a call can cost.
"""

from __future__ import annotations

import argparse
import os
import resource
from collections.abc import Callable
from typing import Any

CALLS = ("insert_one", "find_one", "update_one", "find100")
POOL = 10  # maxPoolSize, and the floor's raw links


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("greenpool", "pymongo", "floor"), required=True)
    parser.add_argument("--call", choices=CALLS, required=True)
    parser.add_argument("--ops", type=int, default=2000, help="calls in total")
    parser.add_argument("--greenlets", type=int,
                        help="greenlets sharing the calls (default 10; not with the floor)")
    args = parser.parse_args()
    if args.client == "floor" and args.greenlets is not None:
        parser.error(f"--greenlets {args.greenlets}: the floor runs one greenlet per raw "
                     f"link, {POOL}")
    if args.greenlets is None:
        args.greenlets = 10
    elif args.greenlets < 1:
        parser.error(f"--greenlets must be at least 1, not {args.greenlets}")
    least = POOL if args.client == "floor" else args.greenlets
    if args.ops < least:
        parser.error(f"--ops must be at least {least} (one call per greenlet), not {args.ops}")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[0]})  # the server inherits it
    from greenpool.testing import EmbeddedServer

    with EmbeddedServer() as server:
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[1]})
        from gevent import monkey

        monkey.patch_all()
        run(server.uri, args)


def floor_call_of(link: Any, name: str) -> Callable[[], Any]:
    """The command the Client's ``name`` call sends, built by hand and sent on a
    raw link (no pool, no session, no collection API): the least a call costs."""
    from bson import ObjectId

    commands: dict[str, Callable[[], dict[str, Any]]] = {
        "insert_one": lambda: {"insert": "calls", "ordered": True,
                               "documents": [{"_id": ObjectId(), "x": 1}]},
        "find_one": lambda: {"find": "calls", "filter": {"_id": 7}, "limit": 1,
                             "singleBatch": True},
        "update_one": lambda: {"update": "calls", "ordered": True,
                               "updates": [{"q": {"_id": 7}, "u": {"$inc": {"n": 1}}}]},
        "find100": lambda: {"find": "calls", "filter": {}},
    }
    command = commands[name]

    def call() -> Any:
        reply = link.command("bench", command())
        if reply.get("ok") != 1 or "writeErrors" in reply:
            raise RuntimeError(f"the floor's {name} failed: {reply!r}")
        return reply
    return call


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
    from greenpool import parse_uri
    from greenpool.wire.connector import connect
    from greenpool.wire.link import LinkOptions

    uri = f"{uri}{'&' if '?' in uri else '?'}maxPoolSize={POOL}"
    client: Any = MongoClient(uri) if args.client == "pymongo" else greenpool.Client(uri)
    with client:
        collection = client.bench.calls
        collection.drop()
        collection.insert_many([{"_id": i, "n": 0} for i in range(100)])
        if args.client == "floor":
            # As bench.py's floor: ten raw links, one greenlet each.
            greenlets = POOL
            address = parse_uri(uri).hosts[0]
            links = [connect(address, LinkOptions()) for _ in range(POOL)]
            calls = [floor_call_of(link, args.call) for link in links]
        else:
            greenlets = args.greenlets
            calls = [call_of(collection, args.call)] * greenlets
        per = args.ops // greenlets
        total = per * greenlets

        def worker(call: Callable[[], Any], count: int) -> None:
            for _ in range(count):
                call()

        gevent.joinall([gevent.spawn(worker, call, 20) for call in calls])  # warm up
        cpu = cpu_seconds()
        gevent.joinall([gevent.spawn(worker, call, per) for call in calls], raise_error=True)
        cpu = cpu_seconds() - cpu
        if args.client == "floor":
            for link in links:
                link.close()
    print(f"greenpool: {os.path.dirname(greenpool.__file__)}")
    print(f"{args.client} {args.call}, {greenlets} greenlets, {total} calls; "
          f"CPU {1e6 * cpu / total:.1f} µs/call")


if __name__ == "__main__":
    main()
