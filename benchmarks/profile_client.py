"""Where a greenpool.Client's ping spends its CPU: a cProfile of bench.py's workloads.

    .venv/bin/python benchmarks/profile_client.py [--greenlets 10] [--ops 2000]
                                                   [--listener [--all-methods]] [--top 25]

Starts its own SecantusDB on 127.0.0.1 (:class:`greenpool.testing.EmbeddedServer`),
pinned to one CPU and this process to another when there are two (as bench.py
does), warms a Client with maxPoolSize 10 up, then profiles ``--greenlets``
greenlets running ``--ops`` pings each in total and prints the functions by
own time (``tottime``), with the CPU µs per operation each takes. The
profiler inflates small functions most: read the shares, not the totals.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import sys
import time
from typing import Any


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greenlets", type=int, default=10)
    parser.add_argument("--ops", type=int, default=20_000, help="pings in total")
    parser.add_argument("--listener", action="store_true",
                        help="attach a CMAP listener (of connection_checked_out only)")
    parser.add_argument("--all-methods", action="store_true",
                        help="with --listener: one that implements all 11 CMAP methods, "
                             "as bench.py's")
    parser.add_argument("--floor", action="store_true",
                        help="profile bench.py's floor instead: 10 raw links, no pool")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--plain", action="store_true",
                        help="no profiler: the CPU µs per operation alone")
    parser.add_argument("--replset", action="store_true",
                        help="the server presents a one-node replica set, which the Client "
                             "discovers (topology ReplicaSetWithPrimary, cluster time gossiped)")
    parser.add_argument("--direct", action="store_true",
                        help="connect with directConnection=true (with --replset: the member "
                             "as a single server, topology Single)")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[0]})  # the server inherits it
    try:
        from greenpool.testing import EmbeddedServer
    except ImportError:  # the greenpool of an older tree (instructions.py --against)
        from greenpool.cli.embedded import EmbeddedServer  # type: ignore[attr-defined,no-redef]

    with EmbeddedServer(replica_set=args.replset) as server:
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[1]})
        from gevent import monkey

        monkey.patch_all()
        profile(server.uri, args)


def profile(uri: str, args: argparse.Namespace) -> None:
    import gevent
    from pymongo import monitoring

    # Public names: --against runs this script with another tree's greenpool.
    from greenpool import Client, parse_uri
    from greenpool.wire.connector import connect
    from greenpool.wire.link import LinkOptions

    class Listener(monitoring.ConnectionPoolListener):  # records nothing: the cost of events
        def connection_checked_out(self, event: Any) -> None:
            pass

    class EveryMethod(Listener):
        pool_created = pool_ready = pool_cleared = pool_closed = Listener.connection_checked_out
        connection_created = connection_ready = connection_closed = pool_created
        connection_check_out_started = connection_check_out_failed = pool_created
        connection_checked_in = pool_created

    listeners = [(EveryMethod if args.all_methods else Listener)()] if args.listener else []
    per = args.ops // args.greenlets
    total = per * args.greenlets
    options = "maxPoolSize=10" + ("&directConnection=true" if args.direct else "")
    with Client(f"{uri}{'&' if '?' in uri else '?'}{options}",
                event_listeners=listeners) as client:
        def worker(count: int = per) -> None:
            for _ in range(count):
                client.command("admin", {"ping": 1})

        if args.floor:
            # The server's own address: no server selection, no monitor.
            address = parse_uri(uri).hosts[0]
            links = [connect(address, LinkOptions()) for _ in range(10)]
            per = args.ops // len(links)
            total = per * len(links)

            def floor(link: Any) -> None:  # as bench.py's run_floor
                for _ in range(per):
                    link.command("admin", {"ping": 1})

            greenlets: list[tuple[Any, Any]] = [(floor, link) for link in links]
        else:
            gevent.joinall([gevent.spawn(worker, 100) for _ in range(10)])  # warm up
            greenlets = [(worker, per) for _ in range(args.greenlets)]
        profiler = cProfile.Profile(time.process_time)  # CPU, not the wall clock
        cpu = cpu_seconds()
        if not args.plain:
            profiler.enable()
        gevent.joinall([gevent.spawn(*each) for each in greenlets], raise_error=True)
        profiler.disable()
        cpu = cpu_seconds() - cpu
    import greenpool

    print(f"greenpool: {os.path.dirname(greenpool.__file__)}")
    what = "the floor (10 raw links)" if args.floor else f"{args.greenlets} greenlets"
    listener = ("all 11 methods" if args.all_methods else "1 method") if args.listener else "none"
    deployment = "a one-node replica set" if args.replset else "a standalone"
    if args.direct:
        deployment += ", directly"
    print(f"{what}, {total} pings to {deployment}, listener: {listener}; "
          f"CPU{'' if args.plain else ' under the profiler'} {1e6 * cpu / total:.1f} µs/op\n")
    if args.plain:
        return
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{os.path.basename(path)}:{line}({name})" if line else name
        rows.append((tottime, cumtime, calls, where))
    rows.sort(reverse=True)
    print("| function | calls/op | own µs/op | cumulative µs/op |")
    print("|---|---|---|---|")
    for tottime, cumtime, calls, where in rows[:args.top]:
        print(f"| `{where}` | {calls / total:.2f} | {1e6 * tottime / total:.2f} | "
              f"{1e6 * cumtime / total:.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
