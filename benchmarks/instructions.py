"""Instructions per ping, counted by Valgrind: the Client against the floor, without noise.

    .venv/bin/python benchmarks/instructions.py [--against DIR] [--ops 1000] [--jobs 2]
                                                [--only client|pool] [--replset]
    .venv/bin/python benchmarks/instructions.py --collection [--against DIR] [--ops 1000]

CPU time per operation on a shared machine moves by 20-40% from run to run
(bench.py's tables). This counts instead the user-space instructions the
contender process executes, which do not depend on the machine's load: the
same run twice differs by about 0.003%.

Each contender is ``benchmarks/profile_client.py --plain`` (its own
SecantusDB on 127.0.0.1, not traced) run under ``valgrind --tool=callgrind``
twice, with ``--ops`` and three times as many pings, with PYTHONHASHSEED=0.
The difference of the two counts over the difference of the pings is the
instructions per ping: start-up, imports and warm-up cancel out.

Contenders: the floor (10 raw ``greenpool.wire.link`` connections, as
bench.py's), and greenpool.Client with maxPoolSize 10 at 10 and at 1000
greenlets, without a listener and with one that implements all 11 CMAP
methods (as bench.py's). The pool alone (``benchmarks/pool_cycles.py``: a
checkout+checkin cycle on a bare pool, no server) is counted the same way, per
cycle: uncontended without and with that listener, and 1000 greenlets over 10
connections. ``--only`` keeps the Client's or the pool's contenders.
``--against DIR`` runs the greenpool contenders again with DIR's greenpool
(``git worktree add /tmp/before main``), in an interpreter started with ``-S``
and DIR first on ``PYTHONPATH``.
``--replset`` runs every Client contender and the floor against a one-node
replica set instead of a standalone (the Client discovers it: primary reads,
cluster time gossiped).

``--collection`` counts the collection API instead: instructions per call of
``insert_one``, ``find_one`` by ``_id``, ``update_one`` and a ``find`` of 100
documents (``benchmarks/collection_calls.py``, 10 greenlets, maxPoolSize 10),
on greenpool.Client, on stock PyMongo's MongoClient under gevent's
patch_all, and on the floor (the same commands built by hand on ten raw
links: ``collection_calls.py --client floor``), side by side; with ``--against DIR``,
greenpool.Client's calls again with DIR's greenpool, and the ratios of the two trees.

What it does not count: the kernel's side of the system calls (the same
sends and receives for every contender), cache misses and stalls. Its ratios
to the floor are therefore above the CPU-time ratios, whose floor includes
the kernel's work; use it to compare trees and to see what the client adds,
and bench.py for the CPU columns. Needs valgrind (Debian: ``apt install
valgrind``); the runs take about a minute each, ``--jobs`` at a time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import site
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLLECTED = re.compile(r"Collected : (\d+)")


@dataclass(frozen=True)
class Contender:
    name: str
    arguments: tuple[str, ...]
    tree: Path | None = None  # another tree's greenpool, else this one's
    script: str = "profile_client.py"

    def command(self, ops: int) -> tuple[list[str], dict[str, str]]:
        python = [sys.executable]
        env = dict(os.environ, PYTHONHASHSEED="0")
        if self.tree is not None:
            # -S: the venv's editable install of greenpool cannot win over the tree.
            python.append("-S")
            env["PYTHONPATH"] = os.pathsep.join([str(self.tree), *site.getsitepackages()])
        else:
            env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
        plain = ("--plain",) if self.script == "profile_client.py" else ()
        return (["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *python,
                 str(HERE / self.script), *plain, "--ops", str(ops), *self.arguments], env)


def contenders(against: Path | None, only: str | None = None,
               replset: bool = False) -> list[Contender]:
    deployment = ("--replset",) if replset else ()
    client = [Contender(f"greenpool, {g} greenlets{', listener' * listener}",
                        ("--greenlets", str(g), *(("--listener", "--all-methods") * listener),
                         *deployment))
              for listener in (False, True) for g in (10, 1000)]
    pool = [Contender(f"pool, {g} greenlet{'s' * (g > 1)}{', listener' * listener}",
                      ("--greenlets", str(g), *("--listener",) * listener), script="pool_cycles.py")
            for g, listener in ((1, False), (1, True), (1000, False))]
    floor = Contender("floor", ("--floor", *deployment))
    chosen = {"client": [floor, *client], "pool": pool, None: [floor, *client, *pool]}[only]
    if against is not None:
        chosen += [Contender(f"{each.name} @against", each.arguments, against, each.script)
                   for each in chosen if each.name != "floor"]
    return chosen


#: The collection API calls ``--collection`` counts (collection_calls.py's).
CALLS = ("insert_one", "find_one", "update_one", "find100")
CLIENTS = ("greenpool", "pymongo", "floor")


def collection_contenders(against: Path | None = None) -> list[Contender]:
    chosen = [Contender(f"{client} {call}", ("--client", client, "--call", call),
                        script="collection_calls.py")
              for call in CALLS for client in CLIENTS]
    if against is not None:
        chosen += [Contender(f"{each.name} @against", each.arguments, against, each.script)
                   for each in chosen if each.name.startswith("greenpool ")]
    return chosen


def count(contender: Contender, ops: int) -> int:
    """The instructions of one run of ``ops`` pings."""
    command, env = contender.command(ops)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{contender.name}, {ops} pings failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    tree = (contender.tree or HERE.parent).resolve()
    if f"greenpool: {tree / 'greenpool'}\n" not in done.stdout:
        raise SystemExit(f"{contender.name} did not run {tree}'s greenpool:\n{done.stdout}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="also the Client with DIR's greenpool")
    parser.add_argument("--ops", type=int, default=1000,
                        help="pings in the shorter run (the longer has three times as many)")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time")
    parser.add_argument("--replset", action="store_true",
                        help="against a one-node replica set instead of a standalone")
    parser.add_argument("--collection", action="store_true",
                        help="the collection API's calls: the Client, stock PyMongo, the floor")
    parser.add_argument("--only", choices=("client", "pool"),
                        help="only the Client's contenders (with the floor), or the pool's")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions.py needs valgrind on PATH (Debian: apt install valgrind)")
    if args.ops < 1000:
        raise SystemExit(f"--ops must be at least 1000 (one ping per greenlet), not {args.ops}")
    if args.against is not None and not (args.against / "greenpool").is_dir():
        raise SystemExit(f"--against {args.against}: no greenpool package there")
    if args.collection and args.only is not None:
        raise SystemExit("--collection compares with stock PyMongo and the floor; it takes no "
                         "--only")
    chosen = (collection_contenders(args.against) if args.collection
              else contenders(args.against, args.only, args.replset))
    runs = [(each, ops) for each in chosen for ops in (args.ops, 3 * args.ops)]
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(zip(runs, pool.map(lambda run: count(*run), runs), strict=True))
    per_ping = {each.name: (counts[each, 3 * args.ops] - counts[each, args.ops]) / (2 * args.ops)
                for each in chosen}
    if args.collection:
        print_collection(per_ping, args.ops, args.against)
        return
    floor = per_ping.get("floor")
    print(f"Instructions per ping or pool cycle (callgrind, user space; runs of {args.ops:,} "
          f"and {3 * args.ops:,}){f'; against: {args.against}' if args.against else ''}\n")
    print("| contender | instructions per op | vs floor | over the floor |")
    print("|---|---|---|---|")
    for name, value in per_ping.items():
        if floor is None or name.startswith("pool"):
            print(f"| {name} | {value:,.0f} | | |")
        else:
            print(f"| {name} | {value:,.0f} | {value / floor:.2f}x | {value - floor:+,.0f} |")
    if args.against is not None:
        print("\n| contender | this tree / against |")
        print("|---|---|")
        for each in chosen:
            if each.tree is None and each.name != "floor":
                other = per_ping[f"{each.name} @against"]
                print(f"| {each.name} | {per_ping[each.name] / other:.3f} |")


def print_collection(per_call: dict[str, float], ops: int, against: Path | None) -> None:
    print(f"Instructions per collection API call (callgrind, user space; runs of {ops:,} and "
          f"{3 * ops:,} calls, 10 greenlets, maxPoolSize 10)\n")
    print("| call | greenpool.Client | PyMongo (patch_all) | greenpool / PyMongo | floor | "
          "floor / PyMongo | greenpool / floor |")
    print("|---|---|---|---|---|---|---|")
    for call in CALLS:
        ours, stock = per_call[f"greenpool {call}"], per_call[f"pymongo {call}"]
        floor = per_call[f"floor {call}"]
        print(f"| {call} | {ours:,.0f} | {stock:,.0f} | {ours / stock:.2f}x | {floor:,.0f} | "
              f"{floor / stock:.2f}x | {ours / floor:.2f}x |")
    if against is not None:
        print(f"\n| call | greenpool.Client, this tree / against ({against}) |")
        print("|---|---|")
        for call in CALLS:
            ratio = per_call[f"greenpool {call}"] / per_call[f"greenpool {call} @against"]
            print(f"| {call} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
