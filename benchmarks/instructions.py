"""Instructions per ping, counted by Valgrind: the Client against the floor, without noise.

    .venv/bin/python benchmarks/instructions.py [--against DIR] [--ops 1000] [--jobs 2]
                                                [--replset]

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
methods (as bench.py's). ``--against DIR`` runs the Client contenders again
with DIR's greenpool (``git worktree add /tmp/before main``), in an
interpreter started with ``-S`` and DIR first on ``PYTHONPATH``. ``--replset``
runs every contender against a one-node replica set instead of a standalone
(the Client discovers it: primary reads, cluster time gossiped).

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

    def command(self, ops: int) -> tuple[list[str], dict[str, str]]:
        python = [sys.executable]
        env = dict(os.environ, PYTHONHASHSEED="0")
        if self.tree is not None:
            # -S: the venv's editable install of greenpool cannot win over the tree.
            python.append("-S")
            env["PYTHONPATH"] = os.pathsep.join([str(self.tree), *site.getsitepackages()])
        else:
            env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
        return (["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *python,
                 str(HERE / "profile_client.py"), "--plain", "--ops", str(ops),
                 *self.arguments], env)


def contenders(against: Path | None, replset: bool = False) -> list[Contender]:
    deployment = ("--replset",) if replset else ()
    client = [Contender(f"greenpool, {g} greenlets{', listener' * listener}",
                        ("--greenlets", str(g), *(("--listener", "--all-methods") * listener),
                         *deployment))
              for listener in (False, True) for g in (10, 1000)]
    chosen = [Contender("floor", ("--floor", *deployment)), *client]
    if against is not None:
        chosen += [Contender(f"{each.name} @against", each.arguments, against)
                   for each in client]
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
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions.py needs valgrind on PATH (Debian: apt install valgrind)")
    if args.ops < 1000:
        raise SystemExit(f"--ops must be at least 1000 (one ping per greenlet), not {args.ops}")
    if args.against is not None and not (args.against / "greenpool").is_dir():
        raise SystemExit(f"--against {args.against}: no greenpool package there")
    chosen = contenders(args.against, args.replset)
    runs = [(each, ops) for each in chosen for ops in (args.ops, 3 * args.ops)]
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(zip(runs, pool.map(lambda run: count(*run), runs), strict=True))
    per_ping = {each.name: (counts[each, 3 * args.ops] - counts[each, args.ops]) / (2 * args.ops)
                for each in chosen}
    floor = per_ping["floor"]
    print(f"Instructions per ping (callgrind, user space; runs of {args.ops:,} and "
          f"{3 * args.ops:,} pings){f'; against: {args.against}' if args.against else ''}\n")
    print("| contender | instructions per ping | vs floor | over the floor |")
    print("|---|---|---|---|")
    for name, value in per_ping.items():
        print(f"| {name} | {value:,.0f} | {value / floor:.2f}x | {value - floor:+,.0f} |")
    if args.against is not None:
        print("\n| contender | this tree / against |")
        print("|---|---|")
        for each in chosen:
            if each.tree is None and each.name != "floor":
                other = per_ping[f"{each.name} @against"]
                print(f"| {each.name} | {per_ping[each.name] / other:.3f} |")


if __name__ == "__main__":
    main()
