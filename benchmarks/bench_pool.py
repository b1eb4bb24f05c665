"""Pool-only benchmark with a mock connector (no server, no sockets).

    .venv/bin/python benchmarks/bench_pool.py [--quick] [--repeat N]
    .venv/bin/python benchmarks/bench_pool.py --against DIR [--rounds N] [--quick]

Measures, side by side in one run:

1. uncontended: one greenlet doing checkout+checkin cycles, against a
   ``gevent.lock.Semaphore`` acquire+release pair (the floor for any gevent
   pool) measured the same way;
2. contended: 1000 greenlets over 10 connections, each doing checkout, one
   hub turn of "work" (``gevent.sleep(0)``), checkin: throughput, wait-time
   percentiles, and the spread of greenlet completion times, set against the
   FIFO ideal (a greenlet's wait when the whole queue ahead of it is served at
   the measured throughput); and the same workload on a ``gevent.lock.Semaphore``
   and a list, the ceiling any gevent pool can reach on the machine.

``--against DIR`` compares the uncontended cycle of this tree's greenpool with
the one in DIR (another checkout, e.g. ``git worktree add /tmp/before main``),
side by side: each round runs this tree (a bare pool, as DIR's), the same
with ``acquire_sites=True`` (what recording every acquire site costs), DIR,
and this tree's checkout called through 2 and 15 frames of library code
(the depths of ``Client.command`` and of PyMongo's ``find_one``) without and
with ``acquire_sites``, each in
a fresh interpreter started with ``-S`` and the tree first on ``PYTHONPATH``
(an editable install cannot shadow either), in an order that rotates from
round to round. It times the process's CPU time (best of 7), not the wall
clock, so that other processes on a shared machine weigh less, and prints
each round's times, their ratios and what the acquire site costs.

This is not part of the test suite: timings on shared machines are noisy, so
compare ratios from one run, and repeat (``--repeat``, ``--rounds``) to see
the spread.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import site
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import gevent.lock

from greenpool import Pool

HERE = Path(__file__).resolve().parent


class NullTransport:
    def close(self) -> None:
        pass


def connector(conn: Any) -> NullTransport:
    return NullTransport()


def best_rate(run: Any, cycles: int, rounds: int = 5, clock: Any = time.perf_counter) -> float:
    """Best cycles/second over a few rounds (the least disturbed one)."""
    best = 0.0
    for _ in range(rounds):
        gc.collect()
        started = clock()
        run(cycles)
        best = max(best, cycles / (clock() - started))
    return best


def cpu_us_per_cycle(cycles: int, checkout_via: Any = None, **pool_options: Any) -> float:
    """The checkout+checkin cycle alone, in µs of this process's CPU time
    (what --against compares: time other processes hold the CPU is left out)."""
    pool: Pool[NullTransport] = Pool(("bench", 27017), connector=connector, **pool_options)
    pool.ready()
    pool.checkin(pool.checkout())
    checkout, checkin = pool.checkout, pool.checkin
    if checkout_via is not None:  # no frame of its own: partial is C
        checkout = functools.partial(checkout_via, pool)

    def pool_cycles(n: int) -> None:
        for _ in range(n):
            checkin(checkout())

    rate = best_rate(pool_cycles, cycles, rounds=7, clock=time.process_time)
    pool.close()
    return 1e6 / rate


def uncontended(cycles: int) -> dict[str, float]:
    pool: Pool[NullTransport] = Pool(("bench", 27017), connector=connector)
    pool.ready()
    pool.checkin(pool.checkout())  # create the connection outside the timing

    def pool_cycles(n: int) -> None:
        checkout, checkin = pool.checkout, pool.checkin
        for _ in range(n):
            checkin(checkout())

    def context_cycles(n: int) -> None:
        checkout = pool.checkout
        for _ in range(n):
            with checkout():
                pass

    semaphore = gevent.lock.Semaphore(10)

    def semaphore_cycles(n: int) -> None:
        acquire, release = semaphore.acquire, semaphore.release
        for _ in range(n):
            acquire()
            release()

    pool_rate = best_rate(pool_cycles, cycles)
    with_rate = best_rate(context_cycles, cycles)
    semaphore_rate = best_rate(semaphore_cycles, cycles)
    pool.close()
    return {
        "pool_us": 1e6 / pool_rate,
        "with_us": 1e6 / with_rate,
        "semaphore_us": 1e6 / semaphore_rate,
        "ratio": semaphore_rate / pool_rate,
    }


def contended(greenlets: int, operations: int, pool_size: int) -> dict[str, float]:
    pool: Pool[NullTransport] = Pool(("bench", 27017), {"maxPoolSize": pool_size},
                                     connector=connector)
    pool.ready()
    try:
        return contend(pool.checkout, greenlets, operations, pool_size)
    finally:
        pool.close()


def contended_semaphore(greenlets: int, operations: int, pool_size: int) -> dict[str, float]:
    """:func:`contended`'s workload on the least a gevent pool can be: a
    ``gevent.lock.Semaphore`` and a list of connections, with no events,
    tallies, fork check or fairness. What it reaches is this machine's
    ceiling for the workload (two hub turns per operation)."""
    semaphore = gevent.lock.Semaphore(pool_size)
    free = [NullTransport() for _ in range(pool_size)]

    class Lease:
        __slots__ = ("conn",)

        def __enter__(self) -> NullTransport:
            semaphore.acquire()
            self.conn = free.pop()
            return self.conn

        def __exit__(self, *exc: object) -> None:
            free.append(self.conn)
            semaphore.release()

    return contend(Lease, greenlets, operations, pool_size)


def contend(lease: Any, greenlets: int, operations: int, pool_size: int) -> dict[str, float]:
    """``greenlets`` greenlets each doing ``operations`` times ``with
    lease():`` around one hub turn of work."""
    waits: list[float] = []
    finished: list[float] = []
    started = time.perf_counter()

    def worker() -> None:
        for _ in range(operations):
            asked = time.perf_counter()
            with lease():
                waits.append(time.perf_counter() - asked)
                gevent.sleep(0)
        finished.append(time.perf_counter() - started)

    gevent.joinall([gevent.spawn(worker) for _ in range(greenlets)], raise_error=True)
    elapsed = time.perf_counter() - started
    waits.sort()
    throughput = len(waits) / elapsed
    # With FIFO service every greenlet waits for the others once per round.
    ideal_wait = (greenlets - pool_size) / throughput
    return {
        "ops_per_s": throughput,
        "wait_p50_ms": 1000 * waits[len(waits) // 2],
        "wait_p99_ms": 1000 * waits[int(len(waits) * 0.99)],
        "wait_max_ms": 1000 * waits[-1],
        "ideal_wait_ms": 1000 * ideal_wait,
        "max_over_ideal": waits[-1] / ideal_wait if ideal_wait else 0.0,
        "finish_first_s": min(finished),
        "finish_last_s": max(finished),
        "finish_stdev_s": statistics.pstdev(finished),
    }


# -- this tree against another, side by side ---------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    against: bool  # the other tree, else this one
    sites: bool  # Pool(acquire_sites=True)
    deep: int = 0  # checkout called through this many frames of library code


# A Client.command reaches the pool through two frames of greenpool's
# (Client.command, Operations.checkout); PyMongo's find_one through 15 of
# PyMongo's (greenpool.pymongo's pool: 11 to 16, counted on PyMongo 4.20).
CLIENT_DEPTH, PYMONGO_DEPTH = 2, 15
VARIANTS = (
    Variant("this tree", False, False),
    Variant("acquire_sites=True", False, True),
    Variant("against", True, False),
    Variant(f"{CLIENT_DEPTH} frames deep", False, False, CLIENT_DEPTH),
    Variant(f"{CLIENT_DEPTH} deep, acquire_sites=True", False, True, CLIENT_DEPTH),
    Variant(f"{PYMONGO_DEPTH} frames deep", False, False, PYMONGO_DEPTH),
    Variant(f"{PYMONGO_DEPTH} deep, acquire_sites=True", False, True, PYMONGO_DEPTH),
)


def through_library_frames(depth: int) -> Any:
    """``checkout(pool)`` through ``depth`` frames that count as library
    code (compiled under a file name inside greenpool's package)."""
    import greenpool

    filename = os.path.join(os.path.dirname(greenpool.__file__), "client", "(bench).py")
    lines = ["def frame_0(pool):", "    return pool.checkout()"]
    for n in range(1, depth):
        lines += [f"def frame_{n}(pool):", f"    return frame_{n - 1}(pool)"]
    scope: dict[str, Any] = {}
    exec(compile("\n".join(lines) + "\n", filename, "exec"), scope)
    return scope[f"frame_{depth - 1}"]


def child(sites: bool, deep: int, cycles: int) -> None:
    """One variant's uncontended figures, as JSON on stdout."""
    import greenpool

    options = {"acquire_sites": True} if sites else {}
    via = through_library_frames(deep) if deep else None
    print(json.dumps({"greenpool": greenpool.__file__,
                      "pool_us": cpu_us_per_cycle(cycles, checkout_via=via, **options)}))


def run_variant(tree: Path, variant: Variant, cycles: int) -> float:
    """The variant's checkout+checkin, in µs, from a fresh interpreter."""
    # -S: no site-packages processing, so the venv's editable install of
    # greenpool cannot win over the tree; its packages come from PYTHONPATH.
    path = [str(tree), *site.getsitepackages()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    command = [sys.executable, "-S", str(HERE / "bench_pool.py"), "--child", str(cycles)]
    command += ["--sites"] * variant.sites + ["--deep", str(variant.deep)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(output)
    assert Path(result["greenpool"]).resolve().is_relative_to(tree.resolve()), result
    return float(result["pool_us"])


def compare(against: Path, rounds: int, cycles: int) -> None:
    here = HERE.parent
    print(f"uncontended checkout+checkin, CPU time, best of 7 x {cycles:,} cycles per run; "
          f"against: {against}\n")
    ratios = {"this tree / against": ("this tree", "against"),
              "acquire_sites=True / against": ("acquire_sites=True", "against"),
              f"{CLIENT_DEPTH} deep: sites / none": (
                  f"{CLIENT_DEPTH} deep, acquire_sites=True", f"{CLIENT_DEPTH} frames deep"),
              f"{PYMONGO_DEPTH} deep: sites / none": (
                  f"{PYMONGO_DEPTH} deep, acquire_sites=True", f"{PYMONGO_DEPTH} frames deep")}
    print("| round | " + " | ".join(v.name for v in VARIANTS) + " | "
          + " | ".join(ratios) + " |")
    print("|---" * (1 + len(VARIANTS) + len(ratios)) + "|")
    seen: dict[str, list[float]] = {name: [] for name in ratios}
    pairs = {"bare pool": ("acquire_sites=True", "this tree"),
             f"{CLIENT_DEPTH} deep": (f"{CLIENT_DEPTH} deep, acquire_sites=True",
                                      f"{CLIENT_DEPTH} frames deep"),
             f"{PYMONGO_DEPTH} deep": (f"{PYMONGO_DEPTH} deep, acquire_sites=True",
                                       f"{PYMONGO_DEPTH} frames deep")}
    costs: dict[str, list[float]] = {label: [] for label in pairs}
    for round_ in range(rounds):
        shift = round_ % len(VARIANTS)
        us = {v.name: run_variant(against if v.against else here, v, cycles)
              for v in VARIANTS[shift:] + VARIANTS[:shift]}
        for name, (top, bottom) in ratios.items():
            seen[name].append(us[top] / us[bottom])
        for label, (top, bottom) in pairs.items():
            costs[label].append(us[top] - us[bottom])
        print(f"| {round_ + 1} | " + " | ".join(f"{us[v.name]:.3f} µs" for v in VARIANTS)
              + " | " + " | ".join(f"{seen[name][-1]:.3f}" for name in ratios) + " |")
    print("\nmedian ratios: " + ", ".join(f"{name} {statistics.median(values):.3f}"
                                          for name, values in seen.items()))
    print("median cost of the acquire site: " + ", ".join(
        f"{label} {statistics.median(values) * 1000:.0f} ns" for label, values in costs.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--against", type=Path,
                        help="compare the uncontended cycle with the greenpool tree in DIR")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of --against")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sites", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--deep", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cycles = 20_000 if args.quick else 200_000
    if args.child:
        child(args.sites, args.deep, args.child)
        return
    if args.against is not None:
        compare(args.against, args.rounds, cycles)
        return
    greenlets, operations = (1000, 5) if args.quick else (1000, 50)
    print(f"greenpool pool benchmark: Python {sys.version.split()[0]}, gevent "
          f"{gevent.__version__}\n")
    print("| run | checkout+checkin | with-statement | Semaphore pair | ratio |")
    print("|---|---|---|---|---|")
    for run in range(args.repeat):
        u = uncontended(cycles)
        print(f"| {run + 1} | {u['pool_us']:.2f} µs | {u['with_us']:.2f} µs | "
              f"{u['semaphore_us']:.2f} µs | {u['ratio']:.1f}x |")
    print(f"\n{greenlets} greenlets x {operations} checkouts over 10 connections:\n")
    print("| run | contender | ops/s | wait p50 | wait p99 | wait max | FIFO ideal | max/ideal | "
          "finished (first-last, stdev) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in range(args.repeat):
        for name, measure in (("greenpool", contended),
                              ("Semaphore and list", contended_semaphore)):
            c = measure(greenlets, operations, 10)
            print(f"| {run + 1} | {name} | {c['ops_per_s']:,.0f} | {c['wait_p50_ms']:.1f} ms | "
                  f"{c['wait_p99_ms']:.1f} ms | {c['wait_max_ms']:.1f} ms | "
                  f"{c['ideal_wait_ms']:.1f} ms | {c['max_over_ideal']:.2f} | "
                  f"{c['finish_first_s']:.2f}-{c['finish_last_s']:.2f} s, "
                  f"{c['finish_stdev_s'] * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
