"""What a replica set emulator member costs per round trip, against SecantusDB directly.

    .venv/bin/python benchmarks/bench_relay.py [--ops 5000] [--rounds 3] [--threads 1,8]

Starts a :class:`greenpool.testing.replset.ReplicaSet` of three members and measures, side
by side in each round, stock PyMongo (no gevent) running the same operations on the
shared SecantusDB directly and through the primary member (``directConnection=true``
both, each going first in every other round): ``ping``, ``find`` of one document by
``_id`` and ``insert_one``, from one thread and from several. It prints, per workload,
the median over the rounds of the wall time per operation on each route, the difference
(the relay's cost per round trip as the client sees it) and the member process's CPU
time per operation (user + system, from ``/proc``: what the relay costs the machine).

A quick check, not a benchmark for the record: nothing is pinned to a CPU, and on a
shared machine the figures move with the load (the header gives the load average).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pymongo import MongoClient

from greenpool.testing.replset import ReplicaSet

Workload = Callable[[MongoClient], None]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(client: MongoClient, workload: Workload, ops: int, threads: int) -> float:
    """Seconds for ``ops`` operations shared among ``threads`` threads."""
    per_thread = ops // threads

    def loop() -> None:
        for _ in range(per_thread):
            workload(client)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,8")
    args = parser.parse_args()
    workloads: dict[str, Workload] = {
        "ping": lambda c: c.admin.command("ping"),
        "find one": lambda c: c.bench.relay.find_one({"_id": 1}),
        "insert one": lambda c: c.bench.relay.insert_one({}),
    }
    with ReplicaSet(3) as rs:
        member_pid = rs.status()[0].pid
        assert member_pid is not None
        direct = MongoClient(rs.backend_uri, directConnection=True, maxPoolSize=16)
        relayed = MongoClient(rs.member_uri(0), maxPoolSize=16)
        direct.bench.relay.insert_one({"_id": 1, "payload": "x" * 100})
        print(f"load average {os.getloadavg()[0]:.1f}; {args.ops} operations a run, "
              f"median of {args.rounds} rounds")
        print(f"{'workload':<22}{'direct µs/op':>14}{'member µs/op':>14}"
              f"{'relay µs':>10}{'member CPU µs/op':>18}")
        for threads in (int(n) for n in args.threads.split(",")):
            for name, workload in workloads.items():
                times: dict[str, list[float]] = {"direct": [], "member": [], "cpu": []}
                for client in (direct, relayed):
                    run(client, workload, 200, threads)  # warm the pools
                for round_ in range(args.rounds):
                    # Each route goes first in every other round: the collection grows.
                    for route in (("direct", "member"), ("member", "direct"))[round_ % 2]:
                        if route == "direct":
                            times["direct"].append(run(direct, workload, args.ops, threads))
                            continue
                        before = cpu_seconds(member_pid)
                        times["member"].append(run(relayed, workload, args.ops, threads))
                        times["cpu"].append(cpu_seconds(member_pid) - before)
                per_op = {key: statistics.median(values) / args.ops * 1e6
                          for key, values in times.items()}
                print(f"{name + f' ({threads} thr)':<22}{per_op['direct']:>14.0f}"
                      f"{per_op['member']:>14.0f}{per_op['member'] - per_op['direct']:>10.0f}"
                      f"{per_op['cpu']:>18.0f}")
        direct.close()
        relayed.close()
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
