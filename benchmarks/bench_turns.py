"""What fair turns (``greenpool.pool.waitqueue.Turns``) cost on the uncontended path.

    .venv/bin/python benchmarks/bench_turns.py [--rounds N] [--cycles N]

One greenlet does checkout+checkin cycles on greenpool's pool with a mock
connector (benchmarks/bench_pool.py's ``uncontended``), alternately with fair
turns as shipped and with ``Turns.take`` replaced by a no-op, in one process.
A lone greenlet always had the previous turn, so this is the path that pays
most: ``take`` looks at the hub's callback queue on every checkout (and
finds it empty: nothing else is ready to run). Prints each round and the
median ratio; on a shared machine only the ratio means anything.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_pool

from greenpool.pool.waitqueue import Turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cycles", type=int, default=50_000)
    args = parser.parse_args()
    shipped = Turns.take
    ratios = []
    print("| round | with turns | without | ratio |")
    print("|---|---|---|---|")
    try:
        for round_ in range(args.rounds):
            Turns.take = shipped  # type: ignore[method-assign]
            with_turns = bench_pool.uncontended(args.cycles)["pool_us"]
            Turns.take = lambda self: None  # type: ignore[method-assign]
            without = bench_pool.uncontended(args.cycles)["pool_us"]
            ratios.append(with_turns / without)
            print(f"| {round_ + 1} | {with_turns:.2f} µs | {without:.2f} µs | "
                  f"{with_turns / without:.3f} |", flush=True)
    finally:
        Turns.take = shipped  # type: ignore[method-assign]
    print(f"\nmedian ratio (with / without fair turns): {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
