"""What a restart, a partition, a stepdown, an election and a dead member do to each route:
stock PyMongo, greenpool.pymongo and greenpool.Client, side by side in one run.

    python3 devtools/dev.py faults [--workers 3] [--greenlets 50] [--fault reset] [--op read]

Each case (a fault, an operation, a route) runs ``--workers`` worker processes
(gevent-patched, like gunicorn gevent workers), each with one client of that route
(maxPoolSize=``--pool``, serverSelectionTimeoutMS=``--selection``) and ``--greenlets``
greenlets that loop on one operation (``read``: find one document by ``_id``; ``write``:
insert one; ``secondary-read``: the same find with readPreference=secondaryPreferred),
pausing ``--think`` seconds after each success and ``--error-pause`` after each error.
After ``--warmup`` seconds the fault comes. The workers go on until ``--after`` seconds
after the fault's end, stop starting operations, wait ``--grace`` seconds for those in
flight, then close their client. Each reports every operation's start, end and outcome.

Faults on one server
--------------------

A SecantusDB of its own (a one-node replica set,
:class:`~greenpool.testing.EmbeddedServer`; a fresh one each time: SecantusDB slows
down as writes accumulate) behind the plain TCP proxy of tests/lb_proxy.py, which runs in
this process's gevent hub; clients connect through the proxy with directConnection. The
operations are ``read`` and ``write``; the fault lasts ``--duration`` seconds:

* ``reset``: the proxy resets every connection and refuses new ones (closes them at
  once), as a server restart does;
* ``blackhole``: a partition that heals: no byte moves either way on any connection,
  old or new, then everything held goes through;
* ``stepdown``: ``replSetStepDown`` on the server (writes fail with "not primary").

The report, per route:

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

Faults on a replica set of three
--------------------------------

A fresh set of three members from :class:`~greenpool.testing.ReplicaSet` (member
processes in front of one SecantusDB; ``--backend`` fronts one that already runs
instead; no replication is emulated: every member sees every write at once). Clients
connect with the set's URI (``replicaSet=rs0``, every member a seed) and discover it.
Member 0 starts as primary. The operations are ``write`` and ``secondary-read``:

* ``elect``: the primary steps down (it refuses writes from that moment); the set has no
  primary for ``--election-delay`` seconds, then member 1 is elected;
* ``primary-dies``: the primary's process is killed (its connections drop, its port
  refuses); member 1 is elected ``--election-delay`` seconds later, and member 0 starts
  again, as a secondary, ``--duration`` seconds after the kill;
* ``secondary-dies``: member 2, a secondary, is killed, and starts again ``--duration``
  seconds later; member 0 stays primary and member 1 a secondary throughout.

The election comes 1.25 s after the fault by default. A client that polls checks every
member at once after its first error, then at most every 500 ms (minHeartbeatFrequencyMS)
while it waits for a primary: an election a whole number of half-seconds after the
fault would come just before one of those checks and flatter it; a quarter-second off,
it comes between two.

The moment of the election is when the new primary's hello says so: this process holds
an awaitable hello on member 1 from before the fault, and takes the time its answer
with ``isWritablePrimary`` arrives (the way a streaming monitor learns of it). The
report, per route:

* **election -> first write**: for each worker, from the election to the end of its
  first successful write after it (on the new primary: the old one refuses writes, or
  is dead); the median and the worst worker ("never" for a worker that wrote nothing
  after it), and **every greenlet**: until every greenlet of every worker has written;
* **errors** surfaced while the set had no primary (from the fault to the election; for
  ``secondary-dies``, while the member was down), next to the **attempts** started then,
  and after it; with secondaryPreferred a secondary is up throughout every one of these
  faults, so every read error counts;
* **stalls**: operations that took more than 1 s, except writes that overlapped the
  time without a primary;
* **hung** and **leaks**, as above;
* **conns per member**: connections the workers hold established to each member at
  the end of the run (before they close their clients) and, in brackets, the most at
  any moment from the fault to then (all workers together, monitors included; every
  100 ms, the workers' own sockets, from /proc);
* **pool conns per member**: connections a worker's pool for each member opened from
  the fault on and, in brackets, the most it held at once in the whole run (CMAP
  events, monitors not included; the largest of the workers), to set against
  maxPoolSize.

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
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROUTES = ("pymongo", "greenpool.pymongo", "greenpool")
SERVER_FAULTS = ("reset", "blackhole", "stepdown")
SET_FAULTS = ("elect", "primary-dies", "secondary-dies")
FAULTS = SERVER_FAULTS + SET_FAULTS
SERVER_OPS = ("read", "write")
SET_OPS = ("write", "secondary-read")
OPS = ("read", "write", "secondary-read")
DB, COLLECTION = "bench", "faults"
DOCUMENTS = 1000
STALL = 1.0  # seconds: an operation this slow while the server was healthy is a stall
# The set's members, by index: who starts as primary, who is elected, who dies as a
# secondary.
OLD_PRIMARY, SUCCESSOR, SECONDARY = 0, 1, 2
ROLES = {
    "elect": ("stepped down", "elected", "secondary"),
    "primary-dies": ("died, back as a secondary", "elected", "secondary"),
    "secondary-dies": ("primary", "secondary", "died, back"),
}


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

    created: list[tuple[float, str]] = []
    # Per server: connections its pool holds (created, not yet closed), and the most.
    holding: dict[str, int] = {}
    most: dict[str, int] = {}

    class Connections(monitoring.ConnectionPoolListener):
        """When the pools opened each connection, and how many each held at most."""

        def connection_created(self, event: Any) -> None:
            host, port = event.address
            server = f"{host}:{port}"
            created.append((time.monotonic(), server))
            holding[server] = holding.get(server, 0) + 1
            most[server] = max(most.get(server, 0), holding[server])

        def connection_closed(self, event: Any) -> None:
            host, port = event.address
            holding[f"{host}:{port}"] -= 1

        def _ignore(self, event: Any) -> None:
            pass

        pool_created = pool_ready = pool_cleared = pool_closed = _ignore
        connection_ready = connection_check_out_started = _ignore
        connection_check_out_failed = connection_checked_out = _ignore
        connection_checked_in = _ignore

    def line() -> Any:
        gevent.socket.wait_read(sys.stdin.fileno())  # the hub runs on meanwhile
        return json.loads(sys.stdin.readline())

    uri = line()  # once the parent's server runs
    gevent.sleep(0.05)
    sockets_before, greenlets_before = open_sockets(), live_greenlets()
    ops = Operations(args.route, uri, Connections())
    run = ops.write if args.op == "write" else ops.read
    rng = random.Random(os.getpid())
    with contextlib.suppress(Exception):
        run(0)  # connected and warm before the clock starts
    print("ready", flush=True)
    timeline = line()  # once every worker is ready
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
        "created": created, "most_held": most,
        "sockets_left": open_sockets() - sockets_before,
        "greenlets_left": live_greenlets() - greenlets_before,
    }
    print(json.dumps(result), flush=True)


# -- the parent: workers and the timeline --------------------------------------------------


def with_options(uri: str, **options: Any) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"{uri}{'&' if '?' in uri else '?'}{query}"


def seed(uri: str, **options: Any) -> None:
    from pymongo import MongoClient

    with MongoClient(uri, **options) as client:
        client[DB].drop_collection(COLLECTION)
        client[DB][COLLECTION].insert_many([{"_id": n, "n": n} for n in range(DOCUMENTS)])


class Workers:
    """The worker processes of one case, a context manager. They start (and import
    gevent, PyMongo and greenpool) while the caller starts the server, then wait for its
    URI on their stdin; nothing of theirs outlives the block."""

    def __init__(self, args: argparse.Namespace, route: str, op: str) -> None:
        from gevent import subprocess

        self.args = args
        command = [sys.executable, str(Path(__file__).resolve()), "--worker",
                   "--route", route, "--op", op, "--greenlets", str(args.greenlets),
                   "--think", str(args.think), "--error-pause", str(args.error_pause),
                   "--grace", str(args.grace)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.processes = [subprocess.Popen(command, stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, env=env)
                          for _ in range(args.workers)]

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    def tell(self, message: Any) -> None:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()

    def run(self, uri: str, span: float, inject: Callable[[dict[str, float]], None]
            ) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Give the workers ``uri``, then, once each has its client, the timeline (the
        fault ``--warmup`` s later, their end ``span + --after`` s after that); let
        ``inject`` make the fault happen and record its moments in the timeline; gather
        the workers' reports."""
        import gevent

        args = self.args
        self.tell(uri)
        for process in self.processes:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        start = time.monotonic()
        timeline = {"fault": start + args.warmup,
                    "back": start + args.warmup + span,
                    "stop": start + args.warmup + span + args.after}
        self.tell(timeline)
        gevent.sleep(max(0.0, timeline["fault"] - time.monotonic()))
        inject(timeline)
        reports = []
        for process in self.processes:
            out, _ = process.communicate(timeout=args.after + args.grace + 60)
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return timeline, reports


def flatten(reports: list[dict[str, Any]]) -> list[tuple[int, int, float, float, str]]:
    """Every operation of every worker: (worker, greenlet, started, ended, outcome)."""
    return [(w, *r) for w, report in enumerate(reports) for r in report["records"]]


def error_counts(records: list[tuple[int, int, float, float, str]], start: float,
                 end: float) -> dict[str, Any]:
    """Errors that ended in [start, end) and after, attempts started in [start, end)."""
    kinds: dict[str, int] = {}
    for *_, outcome in records:
        if outcome != "ok":
            kinds[outcome] = kinds.get(outcome, 0) + 1
    return {
        "ops": sum(1 for *_, outcome in records if outcome == "ok"),
        "attempts_during": sum(1 for _, _, began, _, _ in records if start <= began < end),
        "errors_during": sum(1 for *_, ended, outcome in records
                             if outcome != "ok" and start <= ended < end),
        "errors_after": sum(1 for *_, ended, outcome in records
                            if outcome != "ok" and ended >= end),
        "error_kinds": kinds,
    }


def leftovers(reports: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "hung": sum(r["hung"] for r in reports),
        "sockets_left": sum(max(r["sockets_left"], 0) for r in reports),
        "greenlets_left": sum(max(r["greenlets_left"], 0) for r in reports),
    }


def everyone_back(records: list[tuple[int, int, float, float, str]], since: float
                  ) -> float | None:
    """From ``since`` until every greenlet has completed an operation successfully."""
    first_ok: dict[tuple[int, int], float] = {}
    for worker, index, _, end, outcome in records:
        if outcome == "ok" and end >= since:
            key = (worker, index)
            first_ok[key] = min(first_ok.get(key, end), end)
    greenlets = {(w, i) for w, i, *_ in records}
    return (max(first_ok.values()) - since) if len(first_ok) == len(greenlets) else None


def error_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    kinds = {route: r.get("error_kinds") for route, r in results.items() if r.get("error_kinds")}
    if not kinds:
        return []
    return [""] + [f"- {route} errors: " + ", ".join(f"{n:,} {k}" for k, n in sorted(
        found.items(), key=lambda item: -item[1])) for route, found in kinds.items()]


# -- faults on one server: server, proxy, fault ----------------------------------------------


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


def run_case(args: argparse.Namespace, workers: Workers, kind: str, proxy: Any,
             server_uri: str) -> dict[str, Any]:
    import gevent

    uri = with_options(proxy.uri, maxPoolSize=args.pool,
                       serverSelectionTimeoutMS=int(args.selection * 1000))
    backend = proxy.backends[0]

    def inject(timeline: dict[str, float]) -> None:
        timeline["fault"] = time.monotonic()
        with fault(kind, proxy, server_uri, args.duration):
            gevent.sleep(max(0.0, timeline["back"] - time.monotonic()))
        timeline["back"] = time.monotonic()

    timeline, reports = workers.run(uri, args.duration, inject)
    return summarize(reports, timeline, list(backend.accepted_at), backend.peak_open)


def summarize(reports: list[dict[str, Any]], timeline: dict[str, float],
              accepted: list[float], peak_open: int) -> dict[str, Any]:
    fault_at, back = timeline["fault"], timeline["back"]
    records = flatten(reports)
    stalls = sum(1 for _, _, started, end, _ in records
                 if end - started > STALL and (started >= back or end < fault_at))
    opened_after = max((sum(1 for t, _ in report["created"] if t >= back)
                        for report in reports), default=0)
    return {
        **error_counts(records, fault_at, back),
        "recovery": everyone_back(records, back), "stalls": stalls,
        "peak_open": peak_open, "opened_after": opened_after,
        "accepts_during": busiest_100ms(accepted, fault_at, back),
        "accepts_after": busiest_100ms(accepted, back, back + 3600),
        **leftovers(reports),
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
    return "\n".join(lines + error_lines(results))


# -- faults on a replica set: the set, the election, connections per member ---------------


def established(pids: Sequence[int], ports: Sequence[int]) -> list[int] | None:
    """Connections the processes ``pids`` hold established to each of ``ports`` on
    127.0.0.1 (their own sockets: another program's connection may use the same port
    number). None without /proc."""
    try:
        inodes = set()
        for pid in pids:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
        wanted = {f"0100007F:{port:04X}": i for i, port in enumerate(ports)}
        counts = [0] * len(ports)
        with open("/proc/net/tcp") as table_file:
            next(table_file)
            for line in table_file:
                fields = line.split()
                # fields[2]: the remote address; 01: ESTABLISHED; fields[9]: the inode.
                index = wanted.get(fields[2], -1)
                if index >= 0 and fields[3] == "01" and fields[9] in inodes:
                    counts[index] += 1
    except OSError:
        return None
    return counts


@contextlib.contextmanager
def sampling(workers: Workers, replica_set: Any) -> Iterator[list[tuple[float, list[int]]]]:
    """Every 100 ms, the connections the workers hold to each member, while the block
    runs."""
    import gevent

    ports = [int(address.rsplit(":", 1)[1]) for address in replica_set.addresses]
    pids = [process.pid for process in workers.processes]
    samples: list[tuple[float, list[int]]] = []

    def sample() -> None:
        while True:
            counts = established(pids, ports)
            if counts is None:
                return
            samples.append((time.monotonic(), counts))
            gevent.sleep(0.1)

    sampler = gevent.spawn(sample)
    try:
        yield samples
    finally:
        sampler.kill()


def await_primary(address: str, listening: Any) -> float:
    """The moment ``address``'s hello first says it is primary: an awaitable hello held
    on it, answered at each change of its hello. Sets ``listening`` once it is held."""
    from greenpool.address import parse_address
    from greenpool.wire.connector import connect
    from greenpool.wire.link import LinkOptions

    link = connect(parse_address(address), LinkOptions(connect_timeout=10.0,
                                                       socket_timeout=60.0))
    try:
        reply = link.command("admin", {"hello": 1})
        listening.set()
        while not reply.get("isWritablePrimary"):
            reply = link.command("admin", {"hello": 1, "maxAwaitTimeMS": 30_000,
                                           "topologyVersion": reply["topologyVersion"]})
        return time.monotonic()
    finally:
        link.close()


@contextlib.contextmanager
def watching(address: str) -> Iterator[Callable[[], float]]:
    """Hold an awaitable hello on ``address`` for the block; it gives a function that
    waits for the moment the member's hello said it is primary."""
    import gevent
    import gevent.event

    listening = gevent.event.Event()
    watcher = gevent.spawn(await_primary, address, listening)
    watcher.link(lambda _: listening.set())  # a watcher that failed wakes us too
    try:
        if not listening.wait(30):
            raise RuntimeError(f"no hello from member {address} within 30 s")
        if watcher.ready():
            watcher.get()  # its error
        yield lambda: float(watcher.get(timeout=60))
    finally:
        watcher.kill()


def set_span(kind: str, args: argparse.Namespace) -> float:
    """From the fault until the last of its moments (the election, the member's return)."""
    if kind == "elect":
        return args.election_delay
    if kind == "primary-dies":
        return max(args.election_delay, args.duration)
    return args.duration


def inject_set_fault(kind: str, replica_set: Any, args: argparse.Namespace,
                     timeline: dict[str, float]) -> None:
    """Make ``kind`` happen to the set, recording its moments in ``timeline``: the fault,
    ``down`` (the control returned: the member refuses writes or is gone), ``electing``
    and ``elected`` (the new primary's hello says so), ``restarted``, and ``back`` (the
    end of the time without a primary, or of the secondary's absence)."""
    import gevent

    if kind == "secondary-dies":
        fault_at = timeline["fault"] = time.monotonic()
        replica_set.stop_member(SECONDARY)
        timeline["down"] = time.monotonic()
    else:
        with watching(replica_set.addresses[SUCCESSOR]) as elected:
            fault_at = timeline["fault"] = time.monotonic()
            if kind == "elect":
                replica_set.step_down(elect=False)
            else:
                replica_set.stop_member(OLD_PRIMARY, elect=False)
            timeline["down"] = time.monotonic()
            gevent.sleep(max(0.0, fault_at + args.election_delay - time.monotonic()))
            timeline["electing"] = time.monotonic()
            replica_set.elect(SUCCESSOR)
            timeline["elected"] = elected()
    if kind != "elect":
        gevent.sleep(max(0.0, fault_at + args.duration - time.monotonic()))
        replica_set.start_member(SECONDARY if kind == "secondary-dies" else OLD_PRIMARY)
        timeline["restarted"] = time.monotonic()
    timeline["back"] = timeline.get("elected", timeline.get("restarted", fault_at))


def run_set_case(args: argparse.Namespace, route: str, kind: str,
                 op: str) -> dict[str, Any]:
    """One case on a fresh set of three: its workers, its fault, its summary."""
    from greenpool.testing import ReplicaSet

    with Workers(args, route, op) as workers, ReplicaSet(
            3, backend=args.backend) as replica_set:
        seed(replica_set.uri)
        options: dict[str, Any] = {"maxPoolSize": args.pool,
                                   "serverSelectionTimeoutMS": int(args.selection * 1000)}
        if op == "secondary-read":
            options["readPreference"] = "secondaryPreferred"
        uri = with_options(replica_set.uri, **options)
        with sampling(workers, replica_set) as samples:
            timeline, reports = workers.run(
                uri, set_span(kind, args),
                lambda timeline: inject_set_fault(kind, replica_set, args, timeline))
        return summarize_set(op, reports, timeline, samples, replica_set.addresses)


def summarize_set(op: str, reports: list[dict[str, Any]], timeline: dict[str, float],
                  samples: list[tuple[float, list[int]]],
                  addresses: Sequence[str]) -> dict[str, Any]:
    fault_at, back = timeline["fault"], timeline["back"]
    records = flatten(reports)
    elected = timeline.get("elected") if op == "write" else None
    # Writes have nowhere to go between the fault and the election: not stalls.
    excused = (fault_at, elected) if elected is not None else (0.0, 0.0)
    stalls = sum(1 for _, _, began, ended, _ in records
                 if ended - began > STALL and not (began < excused[1] and ended > excused[0]))
    firsts: list[float | None] = []
    if elected is not None:
        for worker in range(len(reports)):
            ends = [ended for w, _, _, ended, outcome in records
                    if w == worker and outcome == "ok" and ended >= elected]
            firsts.append(min(ends) - elected if ends else None)
    opened = [max((sum(1 for t, member in report["created"] if t >= fault_at and member == a)
                   for report in reports), default=0) for a in addresses]
    most_held = [max((report["most_held"].get(a, 0) for report in reports), default=0)
                 for a in addresses]
    # The run ends at "stop": afterwards the workers close their clients.
    at_end = [counts for moment, counts in samples if moment < timeline["stop"]]
    since = [(moment, counts) for moment, counts in samples
             if fault_at <= moment < timeline["stop"]]
    return {
        **error_counts(records, fault_at, back),
        "election_to_write": firsts,
        "everyone_back": everyone_back(records, elected) if elected is not None else None,
        "stalls": stalls, "timeline": timeline,
        "conns_end": at_end[-1] if at_end else None,
        # Every sample, from the fault on: (seconds after the fault, per member).
        "conns_samples": [(round(moment - fault_at, 2), counts) for moment, counts in since],
        "conns_peak": [max(c[i] for _, c in since) for i in range(len(addresses))]
        if since else None,
        "opened_since_fault": opened, "most_held": most_held,
        **leftovers(reports),
    }


def seconds(value: float) -> str:
    return "never" if value == float("inf") else f"{value:.2f} s"


def worker_firsts(r: dict[str, Any]) -> list[float]:
    """Each worker's time from the election to its first write ("never": infinity)."""
    return [float("inf") if first is None else first for first in r["election_to_write"]]


def set_row(route: str, r: dict[str, Any]) -> str:
    if "failed" in r:
        return f"| {route} | failed: {r['failed']} | | | | | | | | | |"
    firsts = worker_firsts(r)
    if firsts and r["timeline"].get("elected") is not None:
        election = f"{seconds(statistics.median(firsts))}, {seconds(max(firsts))}"
        back = r["everyone_back"]
        everyone = seconds(float("inf") if back is None else back)
    else:
        election = everyone = "-"
    conns = "n/a" if r["conns_end"] is None else " / ".join(
        f"{end} ({peak})" for end, peak in zip(r["conns_end"], r["conns_peak"], strict=True))
    pools = " / ".join(f"{opened} ({held})" for opened, held in zip(
        r["opened_since_fault"], r["most_held"], strict=True))
    return (f"| {route} | {r['ops']:,} | {election} | {everyone} | {r['errors_during']:,} "
            f"({r['attempts_during']:,}) | {r['errors_after']:,} | {r['stalls']} | "
            f"{r['hung']} | {conns} | {pools} | "
            f"{r['sockets_left']}, {r['greenlets_left']} |")


def set_table(kind: str, op: str, args: argparse.Namespace,
              results: dict[str, dict[str, Any]]) -> str:
    roles = ", ".join(f"{i} {role}" for i, role in enumerate(ROLES[kind]))
    if kind == "elect":
        what = f"no primary for {args.election_delay:g} s"
    elif kind == "primary-dies":
        what = (f"no primary for {args.election_delay:g} s, member 0 down "
                f"{args.duration:g} s")
    else:
        what = f"member 2 down {args.duration:g} s"
    lines = [f"\n{kind}, {op}: 3 members ({roles}), {what}; "
             f"{args.workers} workers x {args.greenlets} greenlets, maxPoolSize {args.pool}, "
             f"serverSelectionTimeoutMS {args.selection * 1000:g}\n",
             "| route | ops | election -> first write (median, worst worker) | every greenlet "
             "| errors during (attempts) | errors after | stalls > 1 s | hung "
             "| conns per member at the end (peak) | pool conns per member: opened since "
             "the fault (most at once), max/worker | sockets, greenlets left |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [set_row(route, results.get(route, {"failed": "not run"}))
              for route in args.routes]
    check = targets(op, results)
    return "\n".join(lines + error_lines(results) + ([f"\n{check}"] if check else []))


def targets(op: str, results: dict[str, dict[str, Any]]) -> str | None:
    """greenpool.Client's row against its targets, next to stock PyMongo's."""
    client, stock = results.get("greenpool", {}), results.get("pymongo", {})
    if not client or not stock or "failed" in client or "failed" in stock:
        return None

    def met(condition: bool) -> str:
        return "met" if condition else "**missed**"

    checks = []
    if client["timeline"].get("elected") is not None and op == "write":
        worst, stock_worst = max(worker_firsts(client)), max(worker_firsts(stock))
        checks.append(f"back on the new primary {seconds(worst)} after the election, worst "
                      f"worker (within 0.5 s: {met(worst <= 0.5)}; stock {seconds(stock_worst)}:"
                      f" {met(worst <= stock_worst)})")
    errors = client["errors_during"] + client["errors_after"]
    stock_errors = stock["errors_during"] + stock["errors_after"]
    checks.append(f"errors {errors:,}, stock {stock_errors:,} ({met(errors <= stock_errors)})")
    if op == "secondary-read":
        checks.append(f"secondaryPreferred reads failed {errors:,} times ({met(errors == 0)})")
    checks.append(f"hung {client['hung']} ({met(client['hung'] == 0)})")
    leaks = client["sockets_left"] + client["greenlets_left"]
    checks.append(f"sockets and greenlets left {leaks} ({met(leaks == 0)})")
    return "greenpool.Client against its targets: " + "; ".join(checks)


# -- the command line ------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--greenlets", type=int, default=50)
    parser.add_argument("--pool", type=int, default=10, help="maxPoolSize")
    parser.add_argument("--selection", type=float, default=2.0,
                        help="serverSelectionTimeoutMS, in seconds")
    parser.add_argument("--fault", dest="faults", action="append", choices=FAULTS)
    parser.add_argument("--op", dest="ops", action="append", choices=OPS,
                        help="read and write on one server; write and secondary-read on a "
                        "set (default: both of the fault's)")
    parser.add_argument("--route", dest="routes", action="append", choices=ROUTES)
    parser.add_argument("--duration", type=float, default=3.0,
                        help="the fault's length (s); on a set, how long a killed member "
                        "stays down")
    parser.add_argument("--election-delay", type=float, default=1.25,
                        help="on a set, how long it has no primary (s)")
    parser.add_argument("--backend", help="on a set, front this SecantusDB ('host:port', "
                        "replica set mode, test commands) instead of a fresh one per case")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--after", type=float, default=4.0)
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--think", type=float, default=0.01,
                        help="pause after each successful operation (s)")
    parser.add_argument("--error-pause", type=float, default=0.1,
                        help="pause after each error (s), as an application would")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "faults")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def cases(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (fault, operation) pairs to run: each fault with the given operations it takes
    (all of them by default); a fault or an operation named but left with nothing to run
    is an error."""
    faults = args.faults or list(FAULTS)
    chosen = []
    for kind in faults:
        valid = SET_OPS if kind in SET_FAULTS else SERVER_OPS
        ops = [op for op in (args.ops or valid) if op in valid]
        if not ops and args.faults:
            parser.error(f"the {kind} fault runs {' or '.join(valid)}, not "
                         f"{', '.join(args.ops)}")
        chosen += [(kind, op) for op in ops]
    for op in args.ops or ():
        if all(op != chosen_op for _, chosen_op in chosen):
            parser.error(f"--op {op} runs on none of the faults {', '.join(faults)}")
    for name in ("duration", "election_delay", "warmup", "after", "grace"):
        if not getattr(args, name) >= 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0, not {getattr(args, name)}")
    return chosen


def run_server_case(args: argparse.Namespace, route: str, kind: str,
                    op: str) -> dict[str, Any]:
    from greenpool.testing import EmbeddedServer
    from tests.lb_proxy import LBProxy

    # A server and a proxy of its own for each run: SecantusDB slows down as writes
    # accumulate, which would favour whichever route runs first.
    with (Workers(args, route, op) as workers, EmbeddedServer(replica_set=True) as server,
          LBProxy([("127.0.0.1", server.port)], relay_only=True) as proxy):
        seed(server.uri, directConnection=True)
        return run_case(args, workers, kind, proxy, server.uri)


def run_all(args: argparse.Namespace, chosen: list[tuple[str, str]],
            report: list[str]) -> dict[str, Any]:
    """Every case, each route in turn; each table printed and added to ``report``."""
    results: dict[str, Any] = {}
    for kind, op in chosen:
        case: dict[str, dict[str, Any]] = {}
        on_set = kind in SET_FAULTS
        for route in args.routes:
            print(f"  {kind} {op} {route}...", file=sys.stderr, flush=True)
            try:
                run = run_set_case if on_set else run_server_case
                case[route] = run(args, route, kind, op)
            except Exception as error:
                case[route] = {"failed": repr(error)}
        results[f"{kind}/{op}"] = case
        text = (set_table if on_set else table)(kind, op, args, case)
        print(text, flush=True)
        report.append(text)
    return results


def main(argv: Sequence[str] | None = None) -> None:
    options = make_parser()
    args = options.parse_args(argv)
    if args.worker:
        args.route, args.op = args.routes[0], args.ops[0]
        worker_main(args)
        return
    chosen = cases(options, args)
    args.routes = args.routes or list(ROUTES)

    from gevent import monkey

    monkey.patch_all()
    import gevent
    import pymongo

    sys.path.insert(0, str(ROOT))  # the proxy of the tests (tests/lb_proxy.py)
    load = os.getloadavg()
    header = (f"greenpool fault benchmark: Python {sys.version.split()[0]}, gevent "
              f"{gevent.__version__}, pymongo {pymongo.version}, {os.cpu_count()} CPUs, "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start")
    print(header, flush=True)
    report = [header]
    results = run_all(args, chosen, report)
    load = os.getloadavg()
    footer = f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end"
    print(footer)
    report.append(footer)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(report) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
