"""greenpool against PyMongo under gevent, and against a no-pool floor.

    python3 devtools/dev.py bench [--quick] [--png waits.png] [--uri URI]

The plot goes to ``--png``, by default ``benchmarks/results/bench-waits.png`` (ignored by git).

Starts its own SecantusDB on 127.0.0.1 (:class:`greenpool.cli.embedded.EmbeddedServer`)
unless ``--uri`` is given, and measures, side by side in one run:

1. ``greenpool``: a :class:`greenpool.Client`;
2. ``greenpool.pymongo``: PyMongo's MongoClient on greenpool's pools
   (``greenpool.pymongo.MongoClient``), when that module is importable;
3. ``pymongo``: stock PyMongo's MongoClient under ``gevent.monkey.patch_all()``;
4. ``floor``: no pool at all: as many raw :mod:`greenpool.wire.link` connections as
   the pool size, one greenlet each, commands back to back.

Workloads: (a) 1000 greenlets running ``ping``, maxPoolSize 10; (b) 10
greenlets, maxPoolSize 10; (c) ``find`` returning 100 small documents, 200
greenlets, maxPoolSize 20; (d) the pool alone with a mock connector against a
``gevent.lock.Semaphore`` pair (from bench_pool.py); and a wait-queue check:
10,000 waiting greenlets' memory, and ``clear()`` failing them all.

Each contender and workload runs in its own subprocess (monkey-patching does
not leak, CPU time is that process's ``getrusage``). A checkout's wait is the
CMAP ``ConnectionCheckedOutEvent.duration``. Prints a Markdown table and
writes a PNG of wait-time distributions (log scale) when matplotlib is there.
Timings on shared machines are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONTENDERS = ("greenpool", "greenpool.pymongo", "pymongo", "floor")
WORKLOADS: dict[str, dict[str, Any]] = {
    "a": {"title": "(a) ping, 1000 greenlets, pool 10", "op": "ping", "greenlets": 1000,
          "ops": 200, "quick_ops": 10, "pool": 10},
    "b": {"title": "(b) ping, 10 greenlets, pool 10", "op": "ping", "greenlets": 10,
          "ops": 2000, "quick_ops": 200, "pool": 10},
    "c": {"title": "(c) find 100 docs, 200 greenlets, pool 20", "op": "find", "greenlets": 200,
          "ops": 25, "quick_ops": 3, "pool": 20},
}
DB, COLLECTION = "bench", "docs"
SAMPLES = 400  # wait quantiles kept for the plot


# -- children: one contender, one workload ----------------------------------------------


def with_options(uri: str, **options: Any) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    separator = "&" if "?" in uri else ("?" if uri.endswith("/") else "/?")
    return f"{uri}{separator}{query}"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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


@contextlib.contextmanager
def contender(name: str, uri: str, pool_size: int,
              listener: Any) -> Iterator[tuple[Callable[[], Any], Callable[[], Any]]]:
    """(ping, find) callables for one contender."""
    if name == "greenpool":
        from greenpool.client.client import Client

        with Client(with_options(uri, maxPoolSize=pool_size),
                    event_listeners=[listener]) as client:
            yield (lambda: client.command("admin", {"ping": 1}),
                   lambda: list(client.find(DB, COLLECTION, {})))
        return
    if name == "greenpool.pymongo":
        from greenpool.pymongo import MongoClient  # type: ignore[import-not-found,unused-ignore]
    else:
        from pymongo import MongoClient  # type: ignore[assignment,unused-ignore]
    client = MongoClient(uri, maxPoolSize=pool_size, event_listeners=[listener])
    try:
        admin, docs = client.admin, client[DB][COLLECTION]
        yield (lambda: admin.command("ping"), lambda: list(docs.find({})))
    finally:
        client.close()


def run_child(name: str, workload: str, uri: str, quick: bool) -> dict[str, Any]:
    import gevent
    import gevent.pool

    spec = WORKLOADS[workload]
    greenlets, pool_size = spec["greenlets"], spec["pool"]
    ops = spec["quick_ops"] if quick else spec["ops"]
    total = greenlets * ops
    if name == "floor":
        return run_floor(uri, spec, total)
    listener, waits = make_listener()
    with contender(name, uri, pool_size, listener) as (ping, find):
        operation = ping if spec["op"] == "ping" else find
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
        cpu = cpu_seconds() - cpu
    return summarize(total, elapsed, cpu, waits, finished)


def run_floor(uri: str, spec: dict[str, Any], total: int) -> dict[str, Any]:
    """No pool: pool-size raw links, one greenlet each, back-to-back commands."""
    import gevent

    from greenpool.client.uri import parse_uri
    from greenpool.wire.connector import connect
    from greenpool.wire.link import LinkOptions

    address = parse_uri(uri).hosts[0]
    links = [connect(address, LinkOptions()) for _ in range(spec["pool"])]
    if spec["op"] == "ping":
        command: dict[str, Any] = {"ping": 1}
        dbname = "admin"
    else:
        command, dbname = {"find": COLLECTION, "filter": {}}, DB
    share = [total // len(links) + (i < total % len(links)) for i in range(len(links))]
    finished: list[float] = []
    gc.collect()
    cpu = cpu_seconds()
    started = time.perf_counter()

    def worker(link: Any, n: int) -> None:
        for _ in range(n):
            reply = link.command(dbname, dict(command))
            assert reply["ok"] == 1
        finished.append(time.perf_counter() - started)

    gevent.joinall([gevent.spawn(worker, link, n) for link, n in zip(links, share, strict=True)],
                   raise_error=True)
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds() - cpu
    for link in links:
        link.close()
    return summarize(total, elapsed, cpu, [], finished)


def summarize(total: int, elapsed: float, cpu: float, waits: list[float],
              finished: list[float]) -> dict[str, Any]:
    waits.sort()
    result: dict[str, Any] = {
        "ops": total, "seconds": elapsed, "ops_per_s": total / elapsed,
        "cpu_per_1000": 1000 * cpu / total,
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
    contended = bench_pool.contended(1000, 5 if quick else 50, 10)
    return {"uncontended": uncontended, "contended": contended}


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
    from gevent import monkey

    monkey.patch_all()
    if args.child == "d":
        result = run_pool_only(args.quick)
    elif args.child == "waiters":
        result = run_waiters(10_000)
    else:
        name, workload = args.child.split(":")
        if name == "greenpool.pymongo":
            try:
                import greenpool.pymongo  # noqa: F401
            except ImportError as error:
                print(json.dumps({"unavailable": str(error)}))
                return
        result = run_child(name, workload, args.uri, args.quick)
    print(json.dumps(result))


# -- parent ---------------------------------------------------------------------------


def spawn(child: str, uri: str, quick: bool, timeout: float) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", child, "--uri", uri]
    if quick:
        command.append("--quick")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:g} s"}
    if done.returncode:
        return {"failed": done.stderr.strip().splitlines()[-1:] or [f"rc {done.returncode}"]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def seed(uri: str) -> None:
    from greenpool.client.client import Client

    with Client(uri) as client:
        with contextlib.suppress(Exception):
            client.command(DB, {"drop": COLLECTION})
        client.command(DB, {"insert": COLLECTION,
                            "documents": [{"_id": n, "n": n, "name": f"item {n}"}
                                          for n in range(100)]})


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = []
    for workload, spec in WORKLOADS.items():
        by = results[workload]
        floor = by.get("floor", {}).get("ops_per_s")
        stock = by.get("pymongo", {}).get("ops_per_s")
        lines.append(f"\n{spec['title']}, {by.get('greenpool', {}).get('ops', '?')} ops\n")
        lines.append("| contender | ops/s | wait p50 | wait p99 | wait max | finish spread "
                     "(stdev) | CPU s/1000 ops | vs floor | vs stock |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for name in CONTENDERS:
            r = by.get(name, {})
            if "unavailable" in r or "failed" in r:
                why = "not available" if "unavailable" in r else f"failed: {r['failed']}"
                lines.append(f"| {name} | {why} | | | | | | | |")
                continue
            rate = r["ops_per_s"]
            lines.append(
                f"| {name} | {rate:,.0f} | {fmt(r.get('wait_p50_ms'), ' ms', 2)} | "
                f"{fmt(r.get('wait_p99_ms'), ' ms', 2)} | {fmt(r.get('wait_max_ms'), ' ms', 1)} | "
                f"{r['finish_spread_ms']:,.0f} ms ({r['finish_stdev_ms']:,.0f}) | "
                f"{r['cpu_per_1000']:.3f} | {fmt(rate / floor if floor else None, 'x', 2)} | "
                f"{fmt(rate / stock if stock else None, 'x', 2)} |")
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[str, Any]]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no PNG"
    figure, axes = plt.subplots(1, len(WORKLOADS), figsize=(6 * len(WORKLOADS), 4.5))
    for axis, (workload, spec) in zip(axes, WORKLOADS.items(), strict=True):
        for name in CONTENDERS:
            quantiles = results[workload].get(name, {}).get("wait_quantiles_ms")
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
    from greenpool.cli.embedded import EmbeddedServer

    with EmbeddedServer() as embedded:
        yield embedded.uri


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--uri", help="use this server instead of an embedded SecantusDB")
    # benchmarks/results/ is ignored by git: a run leaves nothing to commit by accident.
    parser.add_argument("--png", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "bench-waits.png")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    import gevent
    import pymongo

    timeout = 120 if args.quick else 900
    print(f"greenpool benchmark{' (quick)' if args.quick else ''}: Python "
          f"{sys.version.split()[0]}, gevent {gevent.__version__}, pymongo {pymongo.version}, "
          f"{os.cpu_count()} CPUs", flush=True)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with server(args.uri) as uri:
        print(f"server: {uri}", flush=True)
        seed(uri)
        for workload in WORKLOADS:
            results[workload] = {}
            for name in CONTENDERS:
                print(f"  running {workload} {name}...", file=sys.stderr, flush=True)
                results[workload][name] = spawn(f"{name}:{workload}", uri, args.quick, timeout)
    print(table(results))

    d = spawn("d", "", args.quick, timeout)
    if "failed" in d:
        print(f"\n(d) pool only: failed: {d['failed']}")
    else:
        u, c = d["uncontended"], d["contended"]
        print("\n(d) pool only, mock connector (bench_pool.py)\n")
        print("| uncontended checkout+checkin | with-statement | Semaphore pair | ratio |")
        print("|---|---|---|---|")
        print(f"| {u['pool_us']:.2f} µs | {u['with_us']:.2f} µs | {u['semaphore_us']:.2f} µs | "
              f"{u['ratio']:.1f}x |")
        print("\n| contended: 1000 greenlets, pool 10 | ops/s | wait p50 | wait p99 | wait max "
              "| FIFO ideal | max/ideal |")
        print("|---|---|---|---|---|---|---|")
        print(f"| | {c['ops_per_s']:,.0f} | {c['wait_p50_ms']:.1f} ms | {c['wait_p99_ms']:.1f} ms "
              f"| {c['wait_max_ms']:.1f} ms | {c['ideal_wait_ms']:.1f} ms | "
              f"{c['max_over_ideal']:.2f} |")

    w = spawn("waiters", "", args.quick, timeout)
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
    print(f"\n{plot(results, args.png)}")


if __name__ == "__main__":
    main()
