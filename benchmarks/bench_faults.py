"""What a restart, a partition and a stepdown do to each route: stock PyMongo,
greenpool.pymongo and greenpool.Client, side by side in one run.

    python3 devtools/dev.py faults [--workers 3] [--greenlets 50] [--fault reset] [--op read]

For each fault, operation and route it starts its own SecantusDB (a one-node replica
set, :class:`~greenpool.testing.EmbeddedServer`) on 127.0.0.1 (a fresh one each
time: SecantusDB slows down as writes accumulate) and, in this process's gevent hub, the
plain TCP proxy of tests/lb_proxy.py in front of it, then runs ``--workers`` worker
processes (gevent-patched, like gunicorn gevent workers), each with one client of that
route (maxPoolSize=``--pool``, serverSelectionTimeoutMS=``--selection``,
directConnection, through the proxy) and ``--greenlets`` greenlets that loop on one
operation (``read``: find one document by ``_id``; ``write``: insert one), pausing
``--think`` seconds after each success and ``--error-pause`` after each error. After
``--warmup`` seconds the fault lasts ``--duration`` seconds:

* ``reset``: the proxy resets every connection and refuses new ones (closes them at
  once), as a server restart does;
* ``blackhole``: a partition that heals: no byte moves either way on any connection,
  old or new, then everything held goes through;
* ``stepdown``: ``replSetStepDown`` on the server (writes fail with "not primary").

The workers go on for ``--after`` seconds, stop starting operations, wait ``--grace``
seconds for those in flight, then close their client. Each reports every operation's
start, end and outcome; the report, per route:

* **recovery**: from the server's return (the fault's end) until every greenlet of every
  worker has completed an operation successfully;
* **errors** surfaced to the greenlets while the fault lasted, and after it, next to the
  **attempts** started while it lasted (each greenlet loops, so a route that fails
  faster makes more attempts in the same window: during a stepdown every write fails);
* **stalls**: operations that took more than 1 s though the server was healthy the whole
  time (they started after the fault, or ended before it);
* **hung**: operations still running after the grace period;
* **peak conns**: the most connections open at once at the proxy (all workers, monitors
  included), and **opened after**: connections each worker's pool opened after the
  fault (CMAP events; the largest of the workers), to set against maxPoolSize + 1;
* **accepts/100 ms**: the most connections the proxy accepted in any 100 ms, during the
  fault and after it (a reconnect storm shows here);
* **leaks**: sockets and live greenlets a worker has after ``close()`` beyond what it had
  before creating the client.

The machine running it is likely shared and noisy: compare routes within one run, and
say how loaded the machine was next to the numbers (the report prints the load average).
Results go to benchmarks/results/faults.md and .json (ignored by git).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROUTES = ("pymongo", "greenpool.pymongo", "greenpool")
FAULTS = ("reset", "blackhole", "stepdown")
OPS = ("read", "write")
DB, COLLECTION = "bench", "faults"
DOCUMENTS = 1000
STALL = 1.0  # seconds: an operation this slow while the server was healthy is a stall


# -- the worker: one route, one operation, G greenlets -----------------------------------


def open_sockets() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
    return count


def live_greenlets() -> int:
    import gevent

    gc.collect()
    count = 0
    for obj in gc.get_objects():
        with contextlib.suppress(ReferenceError):  # a weakref.proxy whose referent died
            if isinstance(obj, gevent.Greenlet) and not obj.dead:
                count += 1
    return count


class Operations:
    """One route's client and its read and write, behind one interface."""

    def __init__(self, route: str, uri: str, listener: Any) -> None:
        self.route = route
        if route == "greenpool":
            from greenpool import Client

            self.client: Any = Client(uri, event_listeners=[listener])
        else:
            if route == "greenpool.pymongo":
                from greenpool.pymongo import MongoClient
            else:
                from pymongo import MongoClient  # type: ignore[assignment]
            self.client = MongoClient(uri, event_listeners=[listener])
            self.collection = self.client[DB][COLLECTION]

    def read(self, key: int) -> None:
        if self.route == "greenpool":
            with self.client.find(DB, COLLECTION, {"_id": key}, limit=1) as cursor:
                documents = list(cursor)
        else:
            found = self.collection.find_one({"_id": key})
            documents = [found] if found is not None else []
        assert len(documents) == 1, documents

    def write(self, key: int) -> None:
        if self.route == "greenpool":
            self.client.command(DB, {"insert": COLLECTION, "documents": [{"k": key}]})
        else:
            self.collection.insert_one({"k": key})

    def close(self) -> None:
        self.client.close()


def worker_main(args: argparse.Namespace) -> None:
    from gevent import monkey

    monkey.patch_all()
    import random

    import gevent
    import gevent.socket
    from pymongo import monitoring

    created: list[float] = []

    class Connections(monitoring.ConnectionPoolListener):
        """When the pool opened each connection."""

        def connection_created(self, event: Any) -> None:
            created.append(time.monotonic())

        def _ignore(self, event: Any) -> None:
            pass

        pool_created = pool_ready = pool_cleared = pool_closed = _ignore
        connection_ready = connection_closed = connection_check_out_started = _ignore
        connection_check_out_failed = connection_checked_out = _ignore
        connection_checked_in = _ignore

    gevent.sleep(0.05)
    sockets_before, greenlets_before = open_sockets(), live_greenlets()
    ops = Operations(args.route, args.uri, Connections())
    run = ops.read if args.op == "read" else ops.write
    rng = random.Random(os.getpid())
    with contextlib.suppress(Exception):
        run(0)  # connected and warm before the clock starts
    print("ready", flush=True)
    gevent.socket.wait_read(sys.stdin.fileno())  # the hub runs on while the parent gathers
    timeline = json.loads(sys.stdin.readline())
    stop_at = timeline["stop"]
    records: list[tuple[int, float, float, str]] = []
    in_flight: dict[int, float] = {}

    def loop(index: int) -> None:
        while time.monotonic() < stop_at:
            started = time.monotonic()
            in_flight[index] = started
            try:
                run(rng.randrange(DOCUMENTS))
                outcome = "ok"
            except Exception as error:  # every error an application would see
                outcome = type(error).__name__
            finally:
                in_flight.pop(index, None)
            records.append((index, started, time.monotonic(), outcome))
            gevent.sleep(args.think if outcome == "ok" else args.error_pause)

    greenlets = [gevent.spawn(loop, i) for i in range(args.greenlets)]
    gevent.sleep(max(0.0, stop_at - time.monotonic()))
    gevent.joinall(greenlets, timeout=args.grace)
    hung = sorted(time.monotonic() - started for started in in_flight.values())
    gevent.killall(greenlets, timeout=5)
    ops.close()
    gevent.sleep(1.0)  # let background closes (monitors, pools) finish
    result = {
        "records": records, "hung": len(hung), "hung_for": hung[-1] if hung else 0.0,
        "created": created,
        "sockets_left": open_sockets() - sockets_before,
        "greenlets_left": live_greenlets() - greenlets_before,
    }
    print(json.dumps(result), flush=True)


# -- the parent: server, proxy, faults, workers ------------------------------------------


def with_options(uri: str, **options: Any) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"{uri}{'&' if '?' in uri else '?'}{query}"


def seed(uri: str) -> None:
    from pymongo import MongoClient

    with MongoClient(uri, directConnection=True) as client:
        client[DB].drop_collection(COLLECTION)
        client[DB][COLLECTION].insert_many([{"_id": n, "n": n} for n in range(DOCUMENTS)])


@contextlib.contextmanager
def fault(kind: str, proxy: Any, server_uri: str, duration: float) -> Iterator[None]:
    """Inject ``kind`` for the block; the block's end is the server's return."""
    if kind == "reset":
        proxy.set_mode(0, "refuse")
        proxy.kill_connections(0, reset=True)
        try:
            yield
        finally:
            proxy.set_mode(0, "up")
    elif kind == "blackhole":
        proxy.partition(0)
        try:
            yield
        finally:
            proxy.heal(0)
    else:
        from pymongo import MongoClient

        with MongoClient(server_uri, directConnection=True) as admin:
            admin.admin.command({"replSetStepDown": int(duration), "force": True})
        # The server steps back up by itself after the period.
        yield


def run_case(args: argparse.Namespace, route: str, kind: str, op: str, proxy: Any,
             server_uri: str) -> dict[str, Any]:
    import gevent
    from gevent import subprocess

    uri = with_options(proxy.uri, maxPoolSize=args.pool,
                       serverSelectionTimeoutMS=int(args.selection * 1000))
    backend = proxy.backends[0]
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--route", route,
               "--op", op, "--uri", uri, "--greenlets", str(args.greenlets),
               "--think", str(args.think), "--error-pause", str(args.error_pause),
               "--grace", str(args.grace)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    workers = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env) for _ in range(args.workers)]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        start = time.monotonic()
        timeline = {"fault": start + args.warmup,
                    "back": start + args.warmup + args.duration,
                    "stop": start + args.warmup + args.duration + args.after}
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write(json.dumps(timeline) + "\n")
            worker.stdin.flush()
        gevent.sleep(max(0.0, timeline["fault"] - time.monotonic()))
        timeline["fault"] = time.monotonic()
        with fault(kind, proxy, server_uri, args.duration):
            gevent.sleep(max(0.0, timeline["back"] - time.monotonic()))
        timeline["back"] = time.monotonic()
        reports = []
        for worker in workers:
            out, _ = worker.communicate(timeout=args.after + args.grace + 60)
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    accepted = list(backend.accepted_at)
    return summarize(reports, timeline, accepted, backend.peak_open)


def summarize(reports: list[dict[str, Any]], timeline: dict[str, float],
              accepted: list[float], peak_open: int) -> dict[str, Any]:
    fault_at, back = timeline["fault"], timeline["back"]
    records = [(w, *r) for w, report in enumerate(reports) for r in report["records"]]
    during = sum(1 for *_, end, outcome in records if outcome != "ok" and fault_at <= end < back)
    attempts = sum(1 for _, _, started, _, _ in records if fault_at <= started < back)
    after = sum(1 for *_, end, outcome in records if outcome != "ok" and end >= back)
    kinds: dict[str, int] = {}
    for *_, outcome in records:
        if outcome != "ok":
            kinds[outcome] = kinds.get(outcome, 0) + 1
    stalls = sum(1 for _, _, started, end, _ in records
                 if end - started > STALL and (started >= back or end < fault_at))
    first_ok: dict[tuple[int, int], float] = {}
    for worker, index, _, end, outcome in records:
        if outcome == "ok" and end >= back:
            key = (worker, index)
            first_ok[key] = min(first_ok.get(key, end), end)
    greenlets = {(w, i) for w, i, *_ in records}
    recovery = (max(first_ok.values()) - back) if len(first_ok) == len(greenlets) else None
    opened_after = max((sum(1 for t in report["created"] if t >= back) for report in reports),
                       default=0)
    return {
        "ops": sum(1 for *_, outcome in records if outcome == "ok"),
        "recovery": recovery, "attempts_during": attempts, "errors_during": during,
        "errors_after": after,
        "error_kinds": kinds, "stalls": stalls,
        "hung": sum(r["hung"] for r in reports),
        "peak_open": peak_open, "opened_after": opened_after,
        "accepts_during": busiest_100ms(accepted, fault_at, back),
        "accepts_after": busiest_100ms(accepted, back, back + 3600),
        "sockets_left": sum(max(r["sockets_left"], 0) for r in reports),
        "greenlets_left": sum(max(r["greenlets_left"], 0) for r in reports),
    }


def busiest_100ms(times: list[float], start: float, end: float) -> int:
    buckets: dict[int, int] = {}
    for moment in times:
        if start <= moment < end:
            bucket = int((moment - start) * 10)
            buckets[bucket] = buckets.get(bucket, 0) + 1
    return max(buckets.values(), default=0)


def table(kind: str, op: str, args: argparse.Namespace,
          results: dict[str, dict[str, Any]]) -> str:
    lines = [f"\n{kind}, {op}: {args.workers} workers x {args.greenlets} greenlets, "
             f"fault {args.duration:g} s, maxPoolSize {args.pool}, "
             f"serverSelectionTimeoutMS {args.selection * 1000:g}\n",
             "| route | ops | recovery | errors during (attempts) | errors after | stalls > 1 s "
             "| hung | peak conns | opened after (max/worker) | accepts/100 ms during, after "
             "| sockets, greenlets left |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for route in args.routes:
        r = results.get(route, {})
        if "failed" in r:
            lines.append(f"| {route} | failed: {r['failed']} | | | | | | | | | |")
            continue
        recovery = "never" if r["recovery"] is None else f"{r['recovery']:.2f} s"
        lines.append(
            f"| {route} | {r['ops']:,} | {recovery} | {r['errors_during']:,} "
            f"({r['attempts_during']:,}) | "
            f"{r['errors_after']:,} | {r['stalls']} | {r['hung']} | {r['peak_open']} | "
            f"{r['opened_after']} | {r['accepts_during']}, {r['accepts_after']} | "
            f"{r['sockets_left']}, {r['greenlets_left']} |")
    kinds = {route: r.get("error_kinds") for route, r in results.items() if r.get("error_kinds")}
    if kinds:
        lines.append("")
        lines += [f"- {route} errors: " + ", ".join(f"{n:,} {k}" for k, n in sorted(
            found.items(), key=lambda item: -item[1])) for route, found in kinds.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--greenlets", type=int, default=50)
    parser.add_argument("--pool", type=int, default=10, help="maxPoolSize")
    parser.add_argument("--selection", type=float, default=2.0,
                        help="serverSelectionTimeoutMS, in seconds")
    parser.add_argument("--fault", dest="faults", action="append", choices=FAULTS)
    parser.add_argument("--op", dest="ops", action="append", choices=OPS)
    parser.add_argument("--route", dest="routes", action="append", choices=ROUTES)
    parser.add_argument("--duration", type=float, default=3.0, help="the fault's length (s)")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--after", type=float, default=4.0)
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--think", type=float, default=0.01,
                        help="pause after each successful operation (s)")
    parser.add_argument("--error-pause", type=float, default=0.1,
                        help="pause after each error (s), as an application would")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "faults")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.route, args.op = args.routes[0], args.ops[0]
        worker_main(args)
        return
    args.faults = args.faults or list(FAULTS)
    args.ops = args.ops or list(OPS)
    args.routes = args.routes or list(ROUTES)

    from gevent import monkey

    monkey.patch_all()
    import gevent
    import pymongo

    sys.path.insert(0, str(ROOT))  # the proxy of the tests (tests/lb_proxy.py)
    from greenpool.testing import EmbeddedServer
    from tests.lb_proxy import LBProxy

    load = os.getloadavg()
    header = (f"greenpool fault benchmark: Python {sys.version.split()[0]}, gevent "
              f"{gevent.__version__}, pymongo {pymongo.version}, {os.cpu_count()} CPUs, "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start")
    print(header, flush=True)
    report = [header]
    results: dict[str, Any] = {}
    for kind in args.faults:
        for op in args.ops:
            case: dict[str, dict[str, Any]] = {}
            for route in args.routes:
                print(f"  {kind} {op} {route}...", file=sys.stderr, flush=True)
                # A server and a proxy of its own for each run: SecantusDB slows down as
                # writes accumulate, which would favour whichever route runs first.
                with (EmbeddedServer(replica_set=True) as server,
                      LBProxy([("127.0.0.1", server.port)], relay_only=True) as proxy):
                    seed(server.uri)
                    try:
                        case[route] = run_case(args, route, kind, op, proxy, server.uri)
                    except Exception as error:
                        case[route] = {"failed": repr(error)}
            results[f"{kind}/{op}"] = case
            text = table(kind, op, args, case)
            print(text, flush=True)
            report.append(text)
    load = os.getloadavg()
    footer = f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end"
    print(footer)
    report.append(footer)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(report) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
