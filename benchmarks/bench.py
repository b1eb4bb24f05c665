"""greenpool against PyMongo under gevent, and against a no-pool floor.

    python3 devtools/dev.py bench [--quick] [--runs 3] [--png waits.png] [--uri URI]
                                  [--only NAME,...] [--against DIR]

The plot goes to ``--png``, by default ``benchmarks/results/bench-waits.png`` (ignored by git).

Starts its own SecantusDB on 127.0.0.1 (:class:`greenpool.testing.EmbeddedServer`)
unless ``--uri`` is given, and measures, side by side in one run:

1. ``greenpool``: a :class:`greenpool.Client`, no listener;
2. ``greenpool+listener``: the same with a CMAP listener attached (the one that
   records every checkout's wait: the Client's wait columns come from it);
3. ``greenpool.pymongo``: PyMongo's MongoClient on greenpool's pools
   (``greenpool.pymongo.MongoClient``), when that module is importable;
4. ``pymongo``: stock PyMongo's MongoClient under ``gevent.monkey.patch_all()``;
5. ``floor``: no pool at all: as many raw :mod:`greenpool.wire.link` connections as
   the pool size, one greenlet each, commands back to back (for the Collection API
   workloads, the command each call sends, built by hand).

The two PyMongo contenders carry the CMAP listener too (their waits come from it).

Measure the client, not the server: on a machine with two CPUs or more, the
server (and its watchdog) runs pinned to one CPU and every contender to
another (``os.sched_setaffinity``), so the server never takes the
contender's CPU and the contender's CPU time per operation is what the
client costs; the header says which CPUs. The columns the goals are judged on
are ``CPU µs/op`` (the contender process's user+sys time per operation) and
``CPU vs floor``. Each contender and workload runs ``--runs`` times (3 by
default), the contenders alternating within each round; the tables show the
median of each column, and a table of goals closes the run, with the load
average at its start and end.

``--replset N[,M...]`` adds ``greenpool@rsN`` for each size: greenpool's Client on a
fresh replica set of N members (:class:`greenpool.testing.ReplicaSet`, pinned with the
server; the primary's reads and writes, every member monitored), in the same rounds,
and a table of its CPU per operation against the same contender on the standalone
server and on the smallest set (the members relay to a SecantusDB of their own, so
sets of different sizes differ only in the topology the Client keeps).

``--only`` runs the named contenders alone (the floor is always run);
``--against DIR`` adds ``greenpool@against`` and ``greenpool+listener@against``:
the same contenders with the greenpool of another tree (``git worktree add
/tmp/before main``), in the same rounds, for side-by-side ratios.

Workloads: (a) 1000 greenlets running ``ping``, maxPoolSize 10; (b) 10
greenlets, maxPoolSize 10; (c) ``find`` returning 100 small documents, 200
greenlets, maxPoolSize 20 (greenpool's Client through its command API); (d) the pool
alone with a mock connector against a ``gevent.lock.Semaphore`` pair (from
bench_pool.py); and a wait-queue check: 10,000 waiting greenlets' memory, and
``clear()`` failing them all.

The Collection API workloads run the same calls on every contender (PyMongo's
collection API, which greenpool's Client offers too), 1000 greenlets, maxPoolSize 10:
(e) ``insert_one``, (f) ``find_one`` by ``_id``, (g) ``update_one`` by ``_id``, (h)
``find`` of 100 documents. Their goal is greenpool's CPU per operation against stock
PyMongo's; their floor shows what of it is the round trip's own.

Each contender and workload runs in its own subprocess (monkey-patching does
not leak, CPU time is that process's ``getrusage``), the ``@against`` ones in an
interpreter started with ``-S`` and DIR first on ``PYTHONPATH``. A checkout's
wait is the CMAP ``ConnectionCheckedOutEvent.duration``. Prints a Markdown table and
writes a PNG of wait-time distributions (log scale) when matplotlib is there.
Timings on shared machines are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import resource
import site
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONTENDERS = ("greenpool", "greenpool+listener", "greenpool.pymongo", "pymongo", "floor")
#: The contenders ``--against DIR`` runs with DIR's greenpool.
AGAINST = ("greenpool", "greenpool+listener")
WORKLOADS: dict[str, dict[str, Any]] = {
    "a": {"title": "(a) ping, 1000 greenlets, pool 10", "op": "ping", "greenlets": 1000,
          "ops": 200, "quick_ops": 10, "pool": 10},
    "b": {"title": "(b) ping, 10 greenlets, pool 10", "op": "ping", "greenlets": 10,
          "ops": 2000, "quick_ops": 200, "pool": 10},
    "c": {"title": "(c) find 100 docs, 200 greenlets, pool 20", "op": "find", "greenlets": 200,
          "ops": 25, "quick_ops": 3, "pool": 20},
    "e": {"title": "(e) insert_one, 1000 greenlets, pool 10", "op": "insert_one",
          "greenlets": 1000, "ops": 50, "quick_ops": 3, "pool": 10},
    "f": {"title": "(f) find_one by _id, 1000 greenlets, pool 10", "op": "find_one",
          "greenlets": 1000, "ops": 50, "quick_ops": 3, "pool": 10},
    "g": {"title": "(g) update_one by _id, 1000 greenlets, pool 10", "op": "update_one",
          "greenlets": 1000, "ops": 50, "quick_ops": 3, "pool": 10},
    "h": {"title": "(h) find 100 docs (collection API), 1000 greenlets, pool 10",
          "op": "find_100", "greenlets": 1000, "ops": 10, "quick_ops": 2, "pool": 10},
}
DB, COLLECTION, INSERTS = "bench", "docs", "inserts"
SAMPLES = 400  # wait quantiles kept for the plot


# -- children: one contender, one workload ----------------------------------------------


def with_options(uri: str, **options: Any) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    separator = "&" if "?" in uri else ("?" if uri.endswith("/") else "/?")
    return f"{uri}{separator}{query}"


def cpu_seconds() -> tuple[float, float]:
    """(user + system, system) CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


def cpu_since(start: tuple[float, float]) -> tuple[float, float]:
    now = cpu_seconds()
    return now[0] - start[0], now[1] - start[1]


def make_listener() -> tuple[Any, list[float]]:
    from pymongo import monitoring

    waits: list[float] = []

    class Waits(monitoring.ConnectionPoolListener):
        def connection_checked_out(self, event: Any) -> None:
            waits.append(event.duration or 0.0)

        def _nothing(self, event: Any) -> None:
            pass

        pool_created = pool_ready = pool_cleared = pool_closed = _nothing
        connection_created = connection_ready = connection_closed = _nothing
        connection_check_out_started = connection_check_out_failed = _nothing
        connection_checked_in = _nothing

    return Waits(), waits


def collection_operations(client: Any) -> dict[str, Callable[[], Any]]:
    """The Collection API workloads' calls: the same code on every contender's client
    (none for a Client from before the collection API, as ``--against`` may run)."""
    if not hasattr(type(client), "__getitem__"):
        return {}
    docs, inserts = client[DB][COLLECTION], client[DB][INSERTS]
    keys = itertools.cycle(range(100))  # the seeded documents' _ids
    return {
        "insert_one": lambda: inserts.insert_one({"n": 1, "name": "item"}),
        "find_one": lambda: docs.find_one({"_id": next(keys)}),
        "update_one": lambda: docs.update_one({"_id": next(keys)}, {"$inc": {"n": 1}}),
        "find_100": lambda: list(docs.find({})),
    }


@contextlib.contextmanager
def contender(name: str, uri: str, pool_size: int,
              listener: Any) -> Iterator[dict[str, Callable[[], Any]]]:
    """One contender's operations by workload ``op``; ``listener`` None: none attached."""
    listeners = [] if listener is None else [listener]
    if name.startswith("greenpool") and not name.startswith("greenpool.pymongo"):
        from greenpool import Client

        with Client(with_options(uri, maxPoolSize=pool_size),
                    event_listeners=listeners) as client:
            yield {"ping": lambda: client.command("admin", {"ping": 1}),
                   "find": lambda: list(client.find(DB, COLLECTION, {})),
                   **collection_operations(client)}
        return
    if name == "greenpool.pymongo":
        from greenpool.pymongo import MongoClient  # type: ignore[import-not-found,unused-ignore]
    else:
        from pymongo import MongoClient  # type: ignore[assignment,unused-ignore]
    client = MongoClient(uri, maxPoolSize=pool_size, event_listeners=listeners)
    try:
        admin, docs = client.admin, client[DB][COLLECTION]
        yield {"ping": lambda: admin.command("ping"), "find": lambda: list(docs.find({})),
               **collection_operations(client)}
    finally:
        client.close()


def run_child(name: str, workload: str, uri: str, quick: bool,
              ops: int | None = None) -> dict[str, Any]:
    import gevent
    import gevent.pool

    spec = WORKLOADS[workload]
    greenlets, pool_size = spec["greenlets"], spec["pool"]
    if ops is None:
        ops = spec["quick_ops"] if quick else spec["ops"]
    total = greenlets * ops
    if name == "floor":
        return run_floor(uri, spec, total)
    listener, waits = make_listener()
    if name.split("@")[0] == "greenpool":
        listener = None  # the Client alone: its waits are greenpool+listener's
    with contender(name, uri, pool_size, listener) as operations:
        operation = operations[spec["op"]]
        for _ in range(pool_size):  # warm up: connections exist before timing
            operation()
        warm = gevent.pool.Pool(pool_size)
        warm.map(lambda _: operation(), range(pool_size * 5))
        del waits[:]
        finished: list[float] = []
        gc.collect()
        cpu = cpu_seconds()
        started = time.perf_counter()

        def worker() -> None:
            for _ in range(ops):
                operation()
            finished.append(time.perf_counter() - started)

        gevent.joinall([gevent.spawn(worker) for _ in range(greenlets)], raise_error=True)
        elapsed = time.perf_counter() - started
        cpu = cpu_since(cpu)
    return summarize(total, elapsed, cpu, waits, finished)


def floor_command(op: str) -> tuple[str, Callable[[], dict[str, Any]]]:
    """The floor's database, and a maker of the command a call of ``op`` sends
    (acknowledged writes, as the clients' default write concern is)."""
    from bson import ObjectId

    keys = itertools.cycle(range(100))  # the seeded documents' _ids
    makers: dict[str, Callable[[], dict[str, Any]]] = {
        "ping": lambda: {"ping": 1},
        "find": lambda: {"find": COLLECTION, "filter": {}},
        "find_100": lambda: {"find": COLLECTION, "filter": {}},
        "insert_one": lambda: {"insert": INSERTS, "ordered": True,
                               "documents": [{"n": 1, "name": "item", "_id": ObjectId()}]},
        "find_one": lambda: {"find": COLLECTION, "filter": {"_id": next(keys)}, "limit": 1,
                             "singleBatch": True},
        "update_one": lambda: {"update": COLLECTION, "ordered": True,
                               "updates": [{"q": {"_id": next(keys)},
                                            "u": {"$inc": {"n": 1}}}]},
    }
    return ("admin" if op == "ping" else DB), makers[op]


def run_floor(uri: str, spec: dict[str, Any], total: int) -> dict[str, Any]:
    """No pool: pool-size raw links, one greenlet each, back-to-back commands."""
    import gevent

    from greenpool import parse_uri
    from greenpool.wire.connector import connect
    from greenpool.wire.link import LinkOptions

    address = parse_uri(uri).hosts[0]
    links = [connect(address, LinkOptions()) for _ in range(spec["pool"])]
    dbname, command = floor_command(spec["op"])
    share = [total // len(links) + (i < total % len(links)) for i in range(len(links))]
    finished: list[float] = []
    gc.collect()
    cpu = cpu_seconds()
    started = time.perf_counter()

    def worker(link: Any, n: int) -> None:
        for _ in range(n):
            reply = link.command(dbname, command())
            assert reply["ok"] == 1 and "writeErrors" not in reply, reply
        finished.append(time.perf_counter() - started)

    gevent.joinall([gevent.spawn(worker, link, n) for link, n in zip(links, share, strict=True)],
                   raise_error=True)
    elapsed = time.perf_counter() - started
    cpu = cpu_since(cpu)
    for link in links:
        link.close()
    return summarize(total, elapsed, cpu, [], finished)


def summarize(total: int, elapsed: float, cpu: tuple[float, float], waits: list[float],
              finished: list[float]) -> dict[str, Any]:
    """``cpu``: (user + system, system) seconds the operations took."""
    waits.sort()
    result: dict[str, Any] = {
        "ops": total, "seconds": elapsed, "ops_per_s": total / elapsed,
        "cpu_us_per_op": 1e6 * cpu[0] / total, "sys_us_per_op": 1e6 * cpu[1] / total,
        "finish_spread_ms": 1000 * (max(finished) - min(finished)),
        "finish_stdev_ms": 1000 * statistics.pstdev(finished),
        "checkouts": len(waits),
    }
    if waits:
        result.update(
            wait_p50_ms=1000 * waits[len(waits) // 2],
            wait_p99_ms=1000 * waits[min(len(waits) - 1, int(len(waits) * 0.99))],
            wait_max_ms=1000 * waits[-1],
            wait_quantiles_ms=[1000 * waits[min(len(waits) - 1, i * len(waits) // SAMPLES)]
                               for i in range(SAMPLES)])
    return result


def run_pool_only(quick: bool) -> dict[str, Any]:
    """(d): bench_pool.py's uncontended and contended runs (mock connector)."""
    sys.path.insert(0, str(HERE))
    import bench_pool

    cycles = 20_000 if quick else 200_000
    uncontended = bench_pool.uncontended(cycles)
    operations = 5 if quick else 50
    contended = bench_pool.contended(1000, operations, 10)
    ceiling = bench_pool.contended_semaphore(1000, operations, 10)
    return {"uncontended": uncontended, "contended": contended, "ceiling": ceiling}


def run_waiters(count: int) -> dict[str, Any]:
    """10,000 greenlets waiting on a full pool: memory per waiter, and clear().

    Each waiter notes when it woke (raised); the clock stops at the last of
    them. Waiters keep no error: one kept would keep its waiter's frames alive
    (through the traceback), and the run would time the garbage collector's
    scans of 10,000 dead stacks rather than the pool.
    """
    import gevent
    import gevent.event

    from greenpool import Pool, PoolClearedError

    class Transport:
        def close(self) -> None:
            pass

    def measure(block: Callable[[], Any]) -> tuple[float, list[Any]]:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        greenlets = [gevent.spawn(block) for _ in range(count)]
        gevent.sleep(0)  # every greenlet runs until it blocks
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        return used / count, greenlets

    woke: list[float] = []

    # Baseline: a greenlet blocked on an Event (what any waiting greenlet costs).
    event = gevent.event.Event()

    def event_waiter() -> None:
        event.wait()
        woke.append(time.perf_counter())

    baseline, parked = measure(event_waiter)
    started = time.perf_counter()
    event.set()
    gevent.joinall(parked)
    event_wake = woke[-1] - started
    del parked, woke[:]

    pool: Pool[Transport] = Pool(("bench", 27017), {"maxPoolSize": 1},
                                 connector=lambda conn: Transport())
    pool.ready()
    held = pool.checkout()

    def waiter() -> None:
        try:
            pool.checkout()
        except PoolClearedError:
            woke.append(time.perf_counter())

    per_waiter, waiting = measure(waiter)
    assert pool.stats().waiting == count
    started = time.perf_counter()
    pool.clear()
    clear_call = time.perf_counter() - started
    gevent.joinall(waiting)
    all_failed = woke[-1] - started
    assert len(woke) == count
    pool.checkin(held)
    pool.close()
    return {"waiters": count, "bytes_per_waiter": per_waiter,
            "bytes_per_event_waiter": baseline,
            "pool_bytes_per_waiter": per_waiter - baseline,
            "clear_call_ms": 1000 * clear_call, "all_failed_ms": 1000 * all_failed,
            "event_wake_ms": 1000 * event_wake}


def child_main(args: argparse.Namespace) -> None:
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    from gevent import monkey

    monkey.patch_all()
    if args.child == "d":
        result = run_pool_only(args.quick)
    elif args.child == "waiters":
        result = run_waiters(10_000)
    else:
        name, workload = args.child.split(":")
        if name.startswith("greenpool.pymongo"):
            try:
                import greenpool.pymongo
            except ImportError as error:
                print(json.dumps({"unavailable": str(error)}))
                return
        result = run_child(name, workload, args.uri, args.quick, args.ops)
    import greenpool

    result["greenpool"] = greenpool.__file__
    print(json.dumps(result))


# -- parent ---------------------------------------------------------------------------

#: The goals the run is judged on: CPU per operation against the floor
#: (greenpool) or against stock PyMongo (greenpool.pymongo), medians of the runs.
CPU_GOALS = (
    ("greenpool", "a", "floor", 1.5),
    ("greenpool", "b", "floor", 1.5),
    ("greenpool+listener", "a", "floor", 1.7),
    ("greenpool+listener", "b", "floor", 1.7),
    ("greenpool.pymongo", "a", "pymongo", 0.77),
    ("greenpool.pymongo", "b", "pymongo", 0.77),
    # The Collection API: greenpool's Client against stock PyMongo's same calls.
    *(("greenpool", workload, "pymongo", 0.4) for workload in "efgh"),
)
UNCONTENDED_GOAL = 5.0  # x a Semaphore pair
CONTENDED_GOAL = 150_000  # ops/s


def pick_cpus() -> tuple[int | None, int | None]:
    """(the server's CPU, the contenders' CPU), or (None, None) with fewer than two."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return cpus[0], cpus[1]


def spawn(child: str, uri: str, quick: bool, timeout: float, cpu: int | None = None,
          tree: Path | None = None, ops: int | None = None) -> dict[str, Any]:
    """One child; with ``tree``, an interpreter that imports greenpool from there."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", child, "--uri", uri]
    env = None
    if tree is not None:
        # -S: no site-packages processing, so the venv's editable install of
        # greenpool cannot win over the tree; its packages come from PYTHONPATH.
        command.insert(1, "-S")
        env = dict(os.environ,
                   PYTHONPATH=os.pathsep.join([str(tree), *site.getsitepackages()]))
    if quick:
        command.append("--quick")
    if ops is not None:
        command += ["--ops", str(ops)]
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:g} s"}
    if done.returncode:
        return {"failed": done.stderr.strip().splitlines()[-1:] or [f"rc {done.returncode}"]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if tree is not None and "greenpool" in result:
        assert Path(result["greenpool"]).resolve().is_relative_to(tree.resolve()), result
    return result


def median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each number over the runs; the wait quantiles (for the
    plot) of the run with the median CPU time; ``cpu_runs``: each run's CPU."""
    good = [r for r in runs if "failed" not in r and "unavailable" not in r]
    if not good:
        return runs[0]
    by_cpu = sorted(good, key=lambda r: r["cpu_us_per_op"])
    result = dict(by_cpu[len(by_cpu) // 2])
    for key, value in good[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            result[key] = statistics.median(r[key] for r in good if key in r)
    result["cpu_runs"] = [r["cpu_us_per_op"] for r in good]
    if len(good) < len(runs):
        result["failed_runs"] = len(runs) - len(good)
    return result


def seed(uri: str) -> None:
    from greenpool import Client

    with Client(uri) as client:
        for name in (COLLECTION, INSERTS):
            with contextlib.suppress(Exception):
                client.command(DB, {"drop": name})
        client.command(DB, {"insert": COLLECTION,
                            "documents": [{"_id": n, "n": n, "name": f"item {n}"}
                                          for n in range(100)]})


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def ratio(top: dict[str, Any], bottom: dict[str, Any], key: str) -> float | None:
    if key not in top or key not in bottom:
        return None
    return float(top[key]) / float(bottom[key])


def table(results: dict[str, dict[str, dict[str, Any]]], names: list[str]) -> str:
    lines = []
    for workload, spec in WORKLOADS.items():
        by = results[workload]
        floor, stock = by.get("floor", {}), by.get("pymongo", {})
        ops = next((r["ops"] for r in by.values() if "ops" in r), "?")
        lines.append(f"\n{spec['title']}, {ops} ops, median of {len(by['floor']['cpu_runs'])} "
                     f"runs\n" if "cpu_runs" in floor else f"\n{spec['title']}, {ops} ops\n")
        lines.append("| contender | ops/s | wait p50 | wait p99 | wait max | finish spread "
                     "(stdev) | CPU µs/op (each run) | of it kernel | CPU vs floor | "
                     "CPU vs stock | ops/s vs floor | ops/s vs stock |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name in names:
            if name not in by:
                continue  # not run on this workload
            r = by[name]
            if "unavailable" in r or "failed" in r:
                why = "not available" if "unavailable" in r else f"failed: {r['failed']}"
                lines.append(f"| {name} | {why} | | | | | | | | | | |")
                continue
            runs = ", ".join(f"{cpu:.1f}" for cpu in r.get("cpu_runs", []))
            lines.append(
                f"| {name} | {r['ops_per_s']:,.0f} | {fmt(r.get('wait_p50_ms'), ' ms', 2)} | "
                f"{fmt(r.get('wait_p99_ms'), ' ms', 2)} | {fmt(r.get('wait_max_ms'), ' ms', 1)} | "
                f"{r['finish_spread_ms']:,.0f} ms ({r['finish_stdev_ms']:,.0f}) | "
                f"**{r['cpu_us_per_op']:.1f}** ({runs}) | {fmt(r.get('sys_us_per_op'))} | "
                f"**{fmt(ratio(r, floor, 'cpu_us_per_op'), 'x', 2)}** | "
                f"{fmt(ratio(r, stock, 'cpu_us_per_op'), 'x', 2)} | "
                f"{fmt(ratio(r, floor, 'ops_per_s'), 'x', 2)} | "
                f"{fmt(ratio(r, stock, 'ops_per_s'), 'x', 2)} |")
    return "\n".join(lines)


def goals(results: dict[str, dict[str, dict[str, Any]]], d: dict[str, Any] | None,
          load: str) -> str:
    lines = [f"\nGoals (medians; load average {load})\n", "| goal | this run | |",
             "|---|---|---|"]
    for name, workload, against, limit in CPU_GOALS:
        by = results.get(workload, {})
        r, base = by.get(name, {}), by.get(against, {})
        value = ratio(r, base, "cpu_us_per_op")
        if value is None:
            continue
        # Against stock, the floor's own ratio is the least any client could reach.
        floor = ratio(by.get("floor", {}), base, "cpu_us_per_op") if against == "pymongo" else None
        reach = "" if floor is None else f"; the floor alone: {floor:.2f}x"
        lines.append(
            f"| ({workload}) {name} CPU per op <= {limit}x {against} | {value:.2f}x "
            f"({r['cpu_us_per_op']:.1f} against {base['cpu_us_per_op']:.1f} µs{reach}) | "
            f"{'met' if value <= limit else 'MISSED'} |")
    if d is not None:
        u, c = d["uncontended"], d["contended"]
        lines.append(f"| (d) uncontended checkout+checkin <= {UNCONTENDED_GOAL:g}x a Semaphore "
                     f"pair | {u['ratio']:.1f}x ({u['pool_us']:.2f} against "
                     f"{u['semaphore_us']:.2f} µs) | "
                     f"{'met' if u['ratio'] <= UNCONTENDED_GOAL else 'MISSED'} |")
        lines.append(f"| (d) contended pool only >= {CONTENDED_GOAL:,} ops/s | "
                     f"{c['ops_per_s']:,.0f} ops/s (a Semaphore and a list: "
                     f"{c['ceiling']:,.0f}) | "
                     f"{'met' if c['ops_per_s'] >= CONTENDED_GOAL else 'MISSED'} |")
    return "\n".join(lines)


def against_table(results: dict[str, dict[str, dict[str, Any]]],
                  raw: dict[str, dict[str, list[dict[str, Any]]]], *,
                  suffix: str = "@against", title: str = "This tree against --against",
                  twin_over_this: bool = False, base: str = "") -> str:
    """Each contender against its ``suffix`` twin (DIR's greenpool, or the replica
    set), run by run (CPU per op); the ratio is this one's over the twin's (the
    twin's over this one's if ``twin_over_this``); ``base`` names this one's
    own suffix (none: the contender itself)."""
    this = base or "this"
    shown = f"{suffix} / {this}" if twin_over_this else f"{this} / {suffix}"
    lines = [f"\n{title}, CPU µs/op by run (ratio {shown})\n",
             f"| workload | contender | {this} | {suffix} | ratios | median ratio |",
             "|---|---|---|---|---|---|"]
    for workload in WORKLOADS:
        for name in AGAINST:
            mine = raw[workload].get(f"{name}{base}", [])
            theirs = raw[workload].get(f"{name}{suffix}", [])
            pairs = [(m["cpu_us_per_op"], t["cpu_us_per_op"]) for m, t in zip(mine, theirs,
                                                                                strict=True)
                     if "cpu_us_per_op" in m and "cpu_us_per_op" in t]
            if not pairs:
                continue
            ratios = [t / m if twin_over_this else m / t for m, t in pairs]
            lines.append(
                f"| ({workload}) | {name} | {', '.join(f'{m:.1f}' for m, _ in pairs)} | "
                f"{', '.join(f'{t:.1f}' for _, t in pairs)} | "
                f"{', '.join(f'{x:.3f}' for x in ratios)} | {statistics.median(ratios):.3f} |")
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[str, Any]]], path: Path, names: list[str]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no PNG"
    columns = 4
    rows = -(-len(WORKLOADS) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(6 * columns, 4.5 * rows),
                                squeeze=False)
    axes = [axis for row in grid for axis in row]
    for axis in axes[len(WORKLOADS):]:
        axis.set_visible(False)
    for axis, (workload, spec) in zip(axes, WORKLOADS.items(), strict=False):
        for name in names:
            quantiles = results.get(workload, {}).get(name, {}).get("wait_quantiles_ms")
            if not quantiles:
                continue
            xs = [max(q, 1e-4) for q in quantiles]
            ys = [100 * i / len(xs) for i in range(len(xs))]
            axis.plot(xs, ys, label=name)
        axis.set_xscale("log")
        axis.set_xlabel("wait for a connection (ms, log scale)")
        axis.set_ylabel("percentile of checkouts")
        axis.set_title(spec["title"], fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return f"wait-time distributions: {path}"


@contextlib.contextmanager
def server(uri: str | None) -> Iterator[str]:
    if uri:
        yield uri
        return
    from greenpool.testing import EmbeddedServer

    with EmbeddedServer() as embedded:
        yield embedded.uri


@contextlib.contextmanager
def replica_sets(sizes: list[int]) -> Iterator[list[str]]:
    """A fresh replica set of each size (their URIs, in order)."""
    from greenpool.testing import ReplicaSet

    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(ReplicaSet(size, name=f"rs{size}")).uri for size in sizes]


def load_average() -> str:
    return "{:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def pool_only(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """(d)'s medians over the runs that did not fail."""
    good = [r for r in runs if "failed" not in r]
    if not good:
        return None
    u = {key: statistics.median(r["uncontended"][key] for r in good)
         for key in good[0]["uncontended"]}
    by_rate = sorted((r["contended"] for r in good), key=lambda c: c["ops_per_s"])
    c = dict(by_rate[len(by_rate) // 2])
    c["runs"] = [r["contended"]["ops_per_s"] for r in good]
    u["runs"] = [r["uncontended"]["ratio"] for r in good]
    ceiling = [r["ceiling"]["ops_per_s"] for r in good]
    c["ceiling"], c["ceiling_runs"] = statistics.median(ceiling), ceiling
    return {"uncontended": u, "contended": c, "count": len(good)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--ops", type=int,
                        help="operations per greenlet in every workload (default: each "
                             "workload's own)")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs of each contender and workload (medians; default 3)")
    parser.add_argument("--only", help="these contenders (comma-separated) and the floor")
    parser.add_argument("--against", type=Path,
                        help="also run greenpool's contenders with the greenpool in DIR")
    parser.add_argument("--no-pool-only", action="store_true",
                        help="skip (d) and the waiters")
    parser.add_argument("--uri", help="use this server instead of an embedded SecantusDB")
    parser.add_argument("--replset", metavar="N[,M...]",
                        help="also run greenpool's Client on replica sets of these sizes")
    parser.add_argument("--workloads",
                        help=f"only these workloads (letters, e.g. 'efgh'; default "
                             f"{''.join(WORKLOADS)})")
    # benchmarks/results/ is ignored by git: a run leaves nothing to commit by accident.
    parser.add_argument("--png", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "bench-waits.png")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    import gevent
    import pymongo

    if args.workloads:
        unknown = set(args.workloads) - set(WORKLOADS)
        if unknown:
            parser.error(f"--workloads: unknown workloads {sorted(unknown)}; "
                         f"choose from {''.join(WORKLOADS)}")
        # The parent alone narrows the table: each child looks up its own workload.
        for workload in [w for w in WORKLOADS if w not in args.workloads]:
            del WORKLOADS[workload]
    names = list(CONTENDERS)
    if args.only:
        wanted = set(args.only.split(",")) | {"floor"}
        unknown = wanted - set(CONTENDERS)
        if unknown:
            parser.error(f"--only: unknown contenders {sorted(unknown)}; "
                         f"choose from {', '.join(CONTENDERS)}")
        names = [name for name in CONTENDERS if name in wanted]
    trees: dict[str, Path | None] = {name: None for name in names}
    if args.against is not None:
        if not (args.against / "greenpool" / "__init__.py").is_file():
            parser.error(f"--against: no greenpool package in {args.against}")
        for name in AGAINST:
            if name in names:
                trees[f"{name}@against"] = args.against
        names = [*names[:-1], *(n for n in trees if n.endswith("@against")), names[-1]]
    sizes: list[int] = []
    if args.replset is not None:
        try:
            sizes = sorted({int(size) for size in args.replset.split(",")})
        except ValueError:
            sizes = []
        if not sizes or sizes[0] < 1 or args.uri or "greenpool" not in names:
            parser.error(f"--replset takes set sizes >= 1 (e.g. 1,3), with the greenpool "
                         f"contender and no --uri, not {args.replset!r}")
        sets = [f"greenpool@rs{size}" for size in sizes]
        trees.update(dict.fromkeys(sets))
        names = [*names[:-1], *sets, names[-1]]
    if args.ops is not None and args.ops < 1:
        parser.error(f"--ops must be at least 1, not {args.ops!r}")
    timeout = 120 if args.quick else 900
    server_cpu, cpu = pick_cpus()
    if args.uri:
        where = (f"server given by --uri (not pinned); each contender pinned to CPU {cpu}"
                 if cpu is not None else "server given by --uri; one CPU: nothing pinned")
        server_cpu = None
    elif cpu is not None:
        where = (f"the server pinned to CPU {server_cpu}, each contender to CPU {cpu} "
                 f"(sched_setaffinity): the contender's CPU time is the client's alone")
    else:
        where = "one CPU: the server and the contender share it (nothing pinned)"
    load_start = load_average()
    print(f"greenpool benchmark{' (quick)' if args.quick else ''}: Python "
          f"{sys.version.split()[0]}, gevent {gevent.__version__}, pymongo {pymongo.version}, "
          f"{os.cpu_count()} CPUs; {where}; {args.runs} runs, contenders alternating; "
          f"load average {load_start}", flush=True)
    if args.against is not None:
        print(f"against: {args.against}", flush=True)
    if server_cpu is not None:
        # The server and its watchdog inherit this process's CPU; the
        # children move themselves to theirs first thing.
        os.sched_setaffinity(0, {server_cpu})
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {
        w: {n: [] for n in names}
        for w in WORKLOADS}
    d_runs: list[dict[str, Any]] = []
    with server(args.uri) as uri, replica_sets(sizes) as set_uris:
        print(f"server: {uri}", flush=True)
        seed(uri)
        uris = {name: uri for name in names}
        for size, set_uri in zip(sizes, set_uris, strict=True):
            print(f"replica set of {size}: {set_uri}", flush=True)
            seed(set_uri)
            uris[f"greenpool@rs{size}"] = set_uri
        for round_ in range(args.runs):
            shift = round_ % len(names)
            for workload in WORKLOADS:
                for name in names[shift:] + names[:shift]:
                    if name not in raw[workload]:
                        continue
                    print(f"  run {round_ + 1}: {workload} {name}...", file=sys.stderr,
                          flush=True)
                    raw[workload][name].append(
                        spawn(f"{name}:{workload}", uris[name], args.quick, timeout, cpu,
                              trees[name], args.ops))
            if not args.no_pool_only:
                d_runs.append(spawn("d", "", args.quick, timeout, cpu))
    results = {w: {n: median_result(runs) for n, runs in by.items()} for w, by in raw.items()}
    load_end = load_average()
    print(table(results, names))
    if args.against is not None:
        print(against_table(results, raw))
    for size in sizes:
        print(against_table(results, raw, suffix=f"@rs{size}",
                            title=f"greenpool on a set of {size} against the standalone",
                            twin_over_this=True))
        if size != sizes[0]:
            print(against_table(results, raw, suffix=f"@rs{size}", base=f"@rs{sizes[0]}",
                                title=f"greenpool on a set of {size} against a set of "
                                      f"{sizes[0]}", twin_over_this=True))

    d = pool_only(d_runs) if d_runs else None
    if d_runs and d is None:
        print(f"\n(d) pool only: failed: {d_runs[0]['failed']}")
    elif d is not None:
        u, c = d["uncontended"], d["contended"]
        print(f"\n(d) pool only, mock connector (bench_pool.py), medians of {d['count']} runs\n")
        print("| uncontended checkout+checkin | with-statement | Semaphore pair | ratio "
              "(each run) |")
        print("|---|---|---|---|")
        print(f"| {u['pool_us']:.2f} µs | {u['with_us']:.2f} µs | {u['semaphore_us']:.2f} µs | "
              f"{u['ratio']:.1f}x ({', '.join(f'{x:.1f}' for x in u['runs'])}) |")
        print("\n| contended: 1000 greenlets, pool 10 | ops/s (each run) | wait p50 | wait p99 "
              "| wait max | FIFO ideal | max/ideal | a Semaphore and a list, same work: ops/s "
              "(each run) | greenpool / that |")
        print("|---|---|---|---|---|---|---|---|---|")
        print(f"| | {c['ops_per_s']:,.0f} ({', '.join(f'{x:,.0f}' for x in c['runs'])}) | "
              f"{c['wait_p50_ms']:.1f} ms | {c['wait_p99_ms']:.1f} ms "
              f"| {c['wait_max_ms']:.1f} ms | {c['ideal_wait_ms']:.1f} ms | "
              f"{c['max_over_ideal']:.2f} | {c['ceiling']:,.0f} "
              f"({', '.join(f'{x:,.0f}' for x in c['ceiling_runs'])}) | "
              f"{c['ops_per_s'] / c['ceiling']:.2f}x |")
    print(goals(results, d, f"{load_start} at the start, {load_end} at the end"))

    if args.no_pool_only:
        print(f"\n{plot(results, args.png, names)}")
        return
    w = spawn("waiters", "", args.quick, timeout, cpu)
    if "failed" in w:
        print(f"\nwaiters: failed: {w['failed']}")
    else:
        ok_memory = "met" if w["pool_bytes_per_waiter"] < 2048 else "MISSED"
        ok_clear = "met" if w["all_failed_ms"] <= 100 else "MISSED"
        print(f"\n{w['waiters']:,} greenlets waiting on a full pool\n")
        extra = w["pool_bytes_per_waiter"]
        print("| memory per waiting greenlet (tracemalloc) | same, waiting on an Event | the "
              "pool's extra | clear() call | clear() until every waiter raised | Event.set() "
              "until every waiter woke |")
        print("|---|---|---|---|---|---|")
        print(f"| {w['bytes_per_waiter']:,.0f} B | {w['bytes_per_event_waiter']:,.0f} B | "
              f"{'none' if extra <= 0 else f'{extra:,.0f} B'} (< 2 KiB: {ok_memory}) | "
              f"{w['clear_call_ms']:.1f} ms | {w['all_failed_ms']:.1f} ms (≤ 100 ms: {ok_clear}) "
              f"| {w['event_wake_ms']:.1f} ms |")
    print(f"\n{plot(results, args.png, names)}")


if __name__ == "__main__":
    main()
