"""Instructions per ping, counted by Valgrind: the Client against the floor, without noise.

    .venv/bin/python benchmarks/instructions.py [--against DIR] [--ops 1000] [--jobs 2]
                                                [--only client|pool] [--replset]
    .venv/bin/python benchmarks/instructions.py --collection [--against DIR] [--ops 1000]
    .venv/bin/python benchmarks/instructions.py --guard [--record]   # dev.py perf

CPU time per operation on a shared machine moves by 20-40% from run to run
(bench.py's tables). This counts instead the user-space instructions the
contender process executes, which do not depend on the machine's load: counted
twice on the same tree, the pool's cycles differ by under 0.05% and one greenlet's
collection calls by under 0.3%, but the Client's pings by up to about 11% (the order in
which the server's replies meet the waiting greenlets changes from run to run).

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

``--guard`` is the regression guard (``python3 devtools/dev.py perf``): it counts
only the figures the same tree counts alike run after run (:func:`guard`: the pool's three
contenders, and greenpool.Client's four collection calls at one greenlet; the Client's
pings and calls at ten greenlets or more are left out), compares them with
``benchmarks/recorded/instructions.json`` and exits 1 if any grew more than 5%
(GROWTH), or if the guard and the record no longer name the same figures.
``--guard --record`` writes that file anew, with the machine, the versions of Python,
greenlet, gevent and PyMongo, the commit and the date; a comparison on other versions
says so (the counts depend on them) and still compares.

What it does not count: the kernel's side of the system calls (the same
sends and receives for every contender), cache misses and stalls. Its ratios
to the floor are therefore above the CPU-time ratios, whose floor includes
the kernel's work; use it to compare trees and to see what the client adds,
and bench.py for the CPU columns. Needs valgrind (Debian: ``apt install
valgrind``); the runs take about a minute each, ``--jobs`` at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from importlib import metadata
from pathlib import Path
from typing import Any

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


def per_op(chosen: list[tuple[Contender, int]], jobs: int) -> dict[str, float]:
    """Each contender's instructions per op: runs of ``ops`` and ``3 * ops``, ``jobs`` at a
    time, the difference of their counts over the difference of their ops."""
    runs = [(each, n) for each, ops in chosen for n in (ops, 3 * ops)]
    with ThreadPoolExecutor(jobs) as pool:
        counts = dict(zip(runs, pool.map(lambda run: count(*run), runs), strict=True))
    return {each.name: (counts[each, 3 * ops] - counts[each, ops]) / (2 * ops)
            for each, ops in chosen}


#: The recorded figures ``--guard`` compares with (``--guard --record`` writes them).
RECORDED = HERE / "recorded" / "instructions.json"


def shown(path: Path) -> str:
    return os.path.relpath(path, HERE.parent)
#: How much a figure may grow over the recorded one before ``--guard`` fails.
GROWTH = 0.05
#: What the counts depend on besides greenpool's code: a record made with other versions
#: compares unreliably.
VERSIONED = ("greenlet", "gevent", "pymongo")


def guard() -> list[tuple[Contender, int]]:
    """The guard's figures and the ops of each one's shorter run: only those the same tree
    counts alike (the same tree counted twice: the pool's within 0.05%, the calls' within
    0.3%). The pool's contenders (no server), at 10,000 cycles, as a cycle is cheap;
    greenpool.Client's collection calls at one greenlet, at 1,000 calls. The Client's pings
    are left out (they met the server's replies in another order from run to run, by up to
    about 11%), and so are calls at ten greenlets (within 0.9%)."""
    calls = [Contender(f"greenpool {call}, 1 greenlet",
                       ("--client", "greenpool", "--call", call, "--greenlets", "1"),
                       script="collection_calls.py") for call in CALLS]
    return [*((each, 10_000) for each in contenders(None, "pool")),
            *((each, 1_000) for each in calls)]


def circumstances() -> dict[str, Any]:
    """What a record's counts were made with: the machine and the versions they depend on."""
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in
              (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
              if line.startswith("model name")]
    cpu = models[0] if models else platform.processor()
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip()
    return {"machine": f"{platform.machine()}, {cpu}, {platform.system()} {platform.release()}",
            "valgrind": valgrind.stdout.strip(),
            "versions": {"python": platform.python_version(),
                         **{name: metadata.version(name) for name in VERSIONED}},
            "commit": commit, "date": date.today().isoformat()}


def compare(recorded: dict[str, float], now: dict[str, float],
            growth: float = GROWTH) -> tuple[list[str], list[str]]:
    """The table of ``recorded`` and ``now`` figures (Markdown lines) and what fails: each
    figure that grew more than ``growth``, each the record has and the guard no longer
    counts, each the guard counts and the record lacks."""
    rows = ["| figure | recorded | now | ratio |", "|---|---|---|---|"]
    failures = []
    for name in [*recorded, *(name for name in now if name not in recorded)]:
        old, new = recorded.get(name), now.get(name)
        if old is None or new is None:
            rows.append(f"| {name} | {'-' if old is None else f'{old:,.0f}'} | "
                        f"{'-' if new is None else f'{new:,.0f}'} | |")
            failures.append(f"{name}: new, not in the record" if old is None
                            else f"{name}: in the record, no longer counted")
            continue
        ratio = new / old
        grew = ratio > 1 + growth
        rows.append(f"| {name} | {old:,.0f} | {new:,.0f} | {ratio:.3f}{' GREW' * grew} |")
        if grew:
            failures.append(f"{name} grew {100 * (ratio - 1):.1f}% ({old:,.0f} -> {new:,.0f} "
                            f"instructions per op; at most {100 * growth:.0f}%)")
    return rows, failures


def mismatches(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How the circumstances of ``now`` differ from a record's that matter to the counts."""
    found = [f"{name} {recorded['versions'].get(name)} recorded, {version} here"
             for name, version in now["versions"].items()
             if recorded["versions"].get(name) != version]
    if recorded.get("machine") != now["machine"]:
        found.append(f"recorded on {recorded.get('machine')}, running on {now['machine']}")
    return found


def described(circumstances: dict[str, Any]) -> str:
    """A record's versions, commit and date, in a line."""
    versions = ", ".join(f"{name} {version}" for name, version
                         in circumstances.get("versions", {}).items())
    return f"{versions} at {circumstances.get('commit')} on {circumstances.get('date')}"


def run_guard(record: bool, jobs: int) -> int:
    """``--guard``: count :func:`guard`'s figures and compare them with RECORDED (or, with
    ``record``, write them there); the exit status."""
    chosen = guard()
    print(f"counting {len(chosen)} figures with callgrind ({2 * len(chosen)} runs, {jobs} at "
          "a time)", flush=True)
    started = time.monotonic()
    now = per_op(chosen, jobs)
    print(f"counted in {time.monotonic() - started:.0f} s\n", flush=True)
    here = circumstances()
    if record:
        RECORDED.write_text(json.dumps(
            {**here, "written_by": "python3 devtools/dev.py perf --record",
             "ops": {each.name: ops for each, ops in chosen},
             "figures": {name: round(value, 1) for name, value in now.items()}},
            indent=2) + "\n")
        print(f"Instructions per op (callgrind), written to {shown(RECORDED)} "
              f"({described(here)}):\n")
        print("| figure | instructions per op |\n|---|---|")
        for name, value in now.items():
            print(f"| {name} | {value:,.0f} |")
        return 0
    if not RECORDED.exists():
        print(f"no record to compare with ({shown(RECORDED)}): run "
              "python3 devtools/dev.py perf --record")
        return 1
    recorded = json.loads(RECORDED.read_text())
    print(f"Instructions per op (callgrind) against {shown(RECORDED)} "
          f"(recorded with {described(recorded)}; now {described(here)}):\n")
    rows, failures = compare(recorded["figures"], now)
    print("\n".join(rows))
    for line in mismatches(recorded, here):
        print(f"WARNING: {line}: the counts depend on it, so the comparison is unreliable; "
              "compared anyway (--record on this setup to make it the reference)")
    if failures:
        print(f"\nperf: FAILED, {len(failures)} of "
              f"{len(set(recorded['figures']) | set(now))} figures:")
        for line in failures:
            print(f"  {line}")
        print("Find the growth with callgrind_annotate (docs/development.rst), or, if it is "
              "intended, run python3 devtools/dev.py perf --record and say why in the commit.")
        return 1
    print(f"\nperf: passed, no figure grew more than {100 * GROWTH:.0f}%")
    return 0


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
    parser.add_argument("--guard", action="store_true",
                        help=f"the regression guard: the stable figures against {RECORDED.name}")
    parser.add_argument("--record", action="store_true",
                        help=f"with --guard: write the figures to {RECORDED.name} instead")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions.py needs valgrind on PATH (Debian: apt install valgrind)")
    if args.record and not args.guard:
        raise SystemExit("--record goes with --guard")
    if args.guard:
        others = [f"--{name}" for name in ("against", "only", "collection", "replset")
                  if getattr(args, name) not in (None, False)]
        if others or args.ops != parser.get_default("ops"):
            raise SystemExit(f"--guard counts its own figures; it takes no "
                             f"{' '.join(others) or '--ops'}")
        raise SystemExit(run_guard(args.record, args.jobs))
    if args.ops < 1000:
        raise SystemExit(f"--ops must be at least 1000 (one ping per greenlet), not {args.ops}")
    if args.against is not None and not (args.against / "greenpool").is_dir():
        raise SystemExit(f"--against {args.against}: no greenpool package there")
    if args.collection and args.only is not None:
        raise SystemExit("--collection compares with stock PyMongo and the floor; it takes no "
                         "--only")
    chosen = (collection_contenders(args.against) if args.collection
              else contenders(args.against, args.only, args.replset))
    per_ping = per_op([(each, args.ops) for each in chosen], args.jobs)
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
