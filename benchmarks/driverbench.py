#!/usr/bin/env python3
"""The Driver Performance Benchmarking spec's Single-Doc and Multi-Doc benchmarks, for
greenpool.Client, greenpool.pymongo and stock PyMongo in one run.

    .venv/bin/python benchmarks/driverbench.py [--json FILE] [--only NAME ...]
        [--contenders greenpool,greenpool.pymongo,pymongo] [--min-seconds 60]
        [--max-seconds 300] [--max-iterations 100] [--uri URI]

What it does, as ../shared/spec-tests/source/benchmarking/benchmarking.md says:

* the datasets come from that directory's ``data/single_and_multi_document.tgz``
  (``GREENPOOL_SPEC_TESTS`` names another ``source`` directory), unpacked into a
  temporary directory for the run, never into the repository;
* each benchmark has the spec's setup, before-task, do-task and teardown phases; only
  the do-task phase is timed (a monotonic clock, wall time);
* iterations run until at least ``--min-seconds`` of timed work, and stop at
  ``--max-iterations`` or ``--max-seconds`` (the spec's 60 s, 100 and 300 s by default;
  a shorter run says so in its output);
* the score is the task's size in MB (10^6 bytes) over the median iteration time, with
  the spec's nearest-rank percentiles; the composites are the spec's averages;
* the contenders take turns, one iteration each, so that a change in the machine's load
  falls on all of them alike. The client's CPU time per operation (this process's,
  as the server runs in its own) is reported beside MB/s.

The server is SecantusDB, started on 127.0.0.1 (``--uri`` names another local one);
with two CPUs or more, the server runs on one and this process on another. The
standard library is patched with gevent first (greenpool.pymongo needs it, and stock
PyMongo then runs as a gevent program runs it).

Besides the spec's tasks, each single-doc task has a ``@100`` variant: the same
operations shared by 100 greenlets on one client (maxPoolSize 10, PyMongo's default
being 100 would give each greenlet its own connection), the case gevent programs run.

Not here: the BSON micro-benchmarks (they measure PyMongo's ``bson``, which every
contender shares) and the Parallel suite (its ``parallel`` dataset is not in the spec
data beside this clone).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEC = Path(os.environ.get("GREENPOOL_SPEC_TESTS")
            or ROOT.parent / "shared" / "spec-tests" / "source")
DATA = SPEC / "benchmarking" / "data" / "single_and_multi_document.tgz"
CONTENDERS = ("greenpool", "greenpool.pymongo", "pymongo")
DB, CORPUS = "perftest", "corpus"
PERCENTILES = (10, 25, 50, 75, 90, 95, 98, 99)
GREENLETS = 100  # the @100 variants
POOL = 10  # their maxPoolSize


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(times: list[float], p: int) -> float:
    """The spec's nearest rank: sorted A, i = int(N * p / 100) - 1 (0 at the least)."""
    ordered = sorted(times)
    return ordered[max(int(len(ordered) * p / 100) - 1, 0)]


# --- the data ------------------------------------------------------------------------


@dataclass(frozen=True)
class Data:
    tweet: dict[str, Any]
    small: dict[str, Any]
    large: dict[str, Any]
    gridfs: bytes


def load_data(directory: Path) -> Data:
    if not DATA.exists():
        sys.exit(f"driverbench: no dataset at {DATA} (set GREENPOOL_SPEC_TESTS to the "
                 "spec-tests 'source' directory)")
    with tarfile.open(DATA) as archive:
        archive.extractall(directory, filter="data")
    base = directory / "single_and_multi_document"

    def document(name: str) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((base / name).read_text(encoding="utf-8"))
        return loaded

    return Data(document("tweet.json"), document("small_doc.json"),
                document("large_doc.json"), (base / "gridfs_large.bin").read_bytes())


# --- the benchmarks ------------------------------------------------------------------


@dataclass
class Task:
    """One benchmark for one contender: its phases as callables."""

    before: Callable[[], None]
    do: Callable[[], None]
    teardown: Callable[[], None]


@dataclass(frozen=True)
class Benchmark:
    name: str
    group: str  # "single" or "multi"
    kind: str  # "read", "write" or "" (not in ReadBench nor WriteBench)
    size: int  # the task's bytes, for MB/s
    ops: int  # operations per iteration, for CPU per op
    make: Callable[[Any, Data], Task]


def nothing() -> None:
    pass


def fresh_corpus(db: Any) -> Any:
    db.drop_collection(CORPUS)
    db.create_collection(CORPUS)
    return db[CORPUS]


def in_greenlets(call: Callable[[int], Any], count: int, greenlets: int) -> None:
    """``call(i)`` for i below ``count``, shared by ``greenlets`` greenlets."""
    import gevent

    def work(start: int) -> None:
        for i in range(start, count, greenlets):
            call(i)

    gevent.joinall([gevent.spawn(work, start) for start in range(greenlets)],
                   raise_error=True)


def run_command(greenlets: int) -> Callable[[Any, Data], Task]:
    def make(client: Any, data: Data) -> Task:
        db = client[DB]
        return Task(nothing, lambda: in_greenlets(lambda i: db.command({"hello": True}),
                                                  10_000, greenlets), nothing)
    return make


def find_one_by_id(greenlets: int) -> Callable[[Any, Data], Task]:
    def make(client: Any, data: Data) -> Task:
        corpus = client[DB][CORPUS]
        if corpus.count_documents({}) == 0:  # the first contender's setup
            corpus.insert_many([dict(data.tweet, _id=i) for i in range(1, 10_001)])
        return Task(nothing, lambda: in_greenlets(
            lambda i: corpus.find_one({"_id": i + 1}), 10_000, greenlets),
            lambda: client.drop_database(DB))
    return make


def insert_one(which: str, count: int, greenlets: int = 1) -> Callable[[Any, Data], Task]:
    def make(client: Any, data: Data) -> Task:
        document = getattr(data, which)
        db = client[DB]
        state: dict[str, Any] = {}

        def before() -> None:
            state["corpus"] = fresh_corpus(db)

        # A copy per insert: the driver adds an _id to the document it is given.
        return Task(before, lambda: in_greenlets(
            lambda i: state["corpus"].insert_one(dict(document)), count, greenlets),
            lambda: client.drop_database(DB))
    return make


def find_many(client: Any, data: Data) -> Task:
    corpus = client[DB][CORPUS]
    if corpus.count_documents({}) == 0:  # the first contender's setup
        corpus.insert_many([dict(data.tweet) for _ in range(10_000)])
    return Task(nothing, lambda: [None for _ in corpus.find({})],
                lambda: client.drop_database(DB))


def bulk_insert(which: str, count: int, how: str) -> Callable[[Any, Data], Task]:
    """insert_many, a collection's bulk_write or the client's, of ``count`` copies."""
    def make(client: Any, data: Data) -> Task:
        from pymongo import InsertOne

        document = getattr(data, which)
        db = client[DB]
        state: dict[str, Any] = {}

        def before() -> None:
            state["corpus"] = fresh_corpus(db)
            # New documents each time: the driver adds an _id to each.
            state["documents"] = [dict(document) for _ in range(count)]

        def do() -> None:
            documents = state["documents"]
            if how == "insert_many":
                state["corpus"].insert_many(documents)
            elif how == "collection":
                state["corpus"].bulk_write([InsertOne(d) for d in documents])
            else:
                client.bulk_write([InsertOne(d, namespace=f"{DB}.{CORPUS}")
                                   for d in documents])

        return Task(before, do, lambda: client.drop_database(DB))
    return make


def mixed(how: str) -> Callable[[Any, Data], Task]:
    """The spec's mixed operations: per document an insert, a replace and a delete, on
    one collection (``collection``) or across ten (``client``)."""
    def make(client: Any, data: Data) -> Task:
        from pymongo import DeleteOne, InsertOne, ReplaceOne

        db = client[DB]
        names = [f"corpus_{n}" for n in range(1, 11)] if how == "client" else [CORPUS]

        def models() -> list[Any]:
            made: list[Any] = []
            for i in range(10_000):
                extra = ({"namespace": f"{DB}.{names[i % len(names)]}"}
                         if how == "client" else {})
                made += [InsertOne(dict(data.small), **extra),
                         ReplaceOne({}, dict(data.small), **extra),
                         DeleteOne({}, **extra)]
            return made

        state: dict[str, Any] = {}

        def before() -> None:
            client.drop_database(DB)
            for name in names:
                db.create_collection(name)
            state["models"] = models()

        def do() -> None:
            if how == "client":
                client.bulk_write(state["models"])
            else:
                db[CORPUS].bulk_write(state["models"])

        return Task(before, do, lambda: client.drop_database(DB))
    return make


def bucket_of(client: Any) -> Any:
    import greenpool

    if isinstance(client, greenpool.Client):
        from greenpool.gridfs import GridFSBucket
    else:
        from gridfs import GridFSBucket  # type: ignore[assignment]
    return GridFSBucket(client[DB])


def gridfs_upload(client: Any, data: Data) -> Task:
    state: dict[str, Any] = {}

    def before() -> None:
        # The default bucket dropped: its two collections (PyMongo's bucket has no drop()).
        client[DB].drop_collection("fs.files")
        client[DB].drop_collection("fs.chunks")
        bucket = bucket_of(client)
        bucket.upload_from_stream("one-byte", b"x")
        state["bucket"] = bucket

    def do() -> None:
        with state["bucket"].open_upload_stream("gridfstest") as stream:
            stream.write(data.gridfs)

    return Task(before, do, lambda: client.drop_database(DB))


def gridfs_download(client: Any, data: Data) -> Task:
    existing = client[DB]["fs.files"].find_one({"filename": "gridfstest"})
    file_id = (existing["_id"] if existing is not None  # the first contender's setup
               else bucket_of(client).upload_from_stream("gridfstest", data.gridfs))
    state: dict[str, Any] = {}

    def before() -> None:
        state["bucket"] = bucket_of(client)

    def do() -> None:
        state["bucket"].open_download_stream(file_id).read()

    return Task(before, do, lambda: client.drop_database(DB))


TWEET, SMALL, LARGE, GRIDFS = 1622, 275, 2_731_089, 52_428_800
BENCHMARKS = (
    Benchmark("Run command", "single", "", 130_000, 10_000, run_command(1)),
    Benchmark("Find one by ID", "single", "read", TWEET * 10_000, 10_000, find_one_by_id(1)),
    Benchmark("Small doc insertOne", "single", "write", SMALL * 10_000, 10_000,
              insert_one("small", 10_000)),
    Benchmark("Large doc insertOne", "single", "write", LARGE * 10, 10,
              insert_one("large", 10)),
    Benchmark("Find many and empty the cursor", "multi", "read", TWEET * 10_000, 10_000,
              find_many),
    Benchmark("Small doc bulk insert", "multi", "write", SMALL * 10_000, 10_000,
              bulk_insert("small", 10_000, "insert_many")),
    Benchmark("Large doc bulk insert", "multi", "write", LARGE * 10, 10,
              bulk_insert("large", 10, "insert_many")),
    Benchmark("Small doc Collection BulkWrite insert", "multi", "write", SMALL * 10_000,
              10_000, bulk_insert("small", 10_000, "collection")),
    Benchmark("Large doc Collection BulkWrite insert", "multi", "write", LARGE * 10, 10,
              bulk_insert("large", 10, "collection")),
    Benchmark("Small doc Client BulkWrite insert", "multi", "write", SMALL * 10_000, 10_000,
              bulk_insert("small", 10_000, "client")),
    Benchmark("Large doc Client BulkWrite insert", "multi", "write", LARGE * 10, 10,
              bulk_insert("large", 10, "client")),
    Benchmark("Small doc Client BulkWrite Mixed Operations", "multi", "write",
              SMALL * 20_000, 30_000, mixed("client")),
    Benchmark("Small doc Collection BulkWrite Mixed Operations", "multi", "write",
              SMALL * 20_000, 30_000, mixed("collection")),
    Benchmark("GridFS upload", "multi", "write", GRIDFS, 1, gridfs_upload),
    Benchmark("GridFS download", "multi", "read", GRIDFS, 1, gridfs_download),
    # greenpool's: the single-doc tasks shared by 100 greenlets on one client.
    Benchmark(f"Run command @{GREENLETS}", "gevent", "", 130_000, 10_000,
              run_command(GREENLETS)),
    Benchmark(f"Find one by ID @{GREENLETS}", "gevent", "", TWEET * 10_000, 10_000,
              find_one_by_id(GREENLETS)),
    Benchmark(f"Small doc insertOne @{GREENLETS}", "gevent", "", SMALL * 10_000, 10_000,
              insert_one("small", 10_000, GREENLETS)),
    Benchmark(f"Large doc insertOne @{GREENLETS}", "gevent", "", LARGE * 10, 10,
              insert_one("large", 10, min(GREENLETS, 10))),
)


# --- running -------------------------------------------------------------------------


@contextlib.contextmanager
def client_of(name: str, uri: str) -> Iterator[Any]:
    if name == "greenpool":
        import greenpool

        with greenpool.Client(uri, maxPoolSize=POOL) as client:
            yield client
        return
    if name == "greenpool.pymongo":
        from greenpool.pymongo import MongoClient
    else:
        from pymongo import MongoClient  # type: ignore[assignment]
    client = MongoClient(uri, maxPoolSize=POOL)
    try:
        yield client
    finally:
        client.close()


@dataclass
class Limits:
    min_seconds: float
    max_seconds: float
    max_iterations: int

    def done(self, iterations: int, timed: float) -> bool:
        if iterations == 0:
            return False
        if iterations >= self.max_iterations or timed >= self.max_seconds:
            return True
        return timed >= self.min_seconds


def measure(benchmark: Benchmark, clients: dict[str, Any], data: Data,
            limits: Limits) -> dict[str, dict[str, Any]]:
    """The contenders' iterations of one benchmark, taking turns. The setups share the
    database (dropped once, here): the read benchmarks' data is the first contender's."""
    next(iter(clients.values())).drop_database(DB)
    tasks = {name: benchmark.make(client, data) for name, client in clients.items()}
    times: dict[str, list[float]] = {name: [] for name in clients}
    cpus: dict[str, list[float]] = {name: [] for name in clients}
    try:
        while not all(limits.done(len(times[n]), sum(times[n])) for n in clients):
            for name, task in tasks.items():
                if limits.done(len(times[name]), sum(times[name])):
                    continue
                task.before()
                cpu, started = cpu_seconds(), time.perf_counter()
                task.do()
                times[name].append(time.perf_counter() - started)
                cpus[name].append(cpu_seconds() - cpu)
    finally:
        for task in tasks.values():
            task.teardown()
    results = {}
    for name in clients:
        median = percentile(times[name], 50)
        results[name] = {
            "mb_s": benchmark.size / 1e6 / median,
            "cpu_s_per_op": statistics.median(cpus[name]) / benchmark.ops,
            "iterations": len(times[name]),
            "percentiles_s": {str(p): percentile(times[name], p) for p in PERCENTILES},
        }
    return results


def composites(results: dict[str, dict[str, dict[str, Any]]],
               contender: str) -> dict[str, float]:
    """The spec's composites over the benchmarks this run has."""
    def average(picked: list[Benchmark]) -> float | None:
        scores = [results[b.name][contender]["mb_s"] for b in picked if b.name in results]
        return statistics.fmean(scores) if scores else None

    ran = [b for b in BENCHMARKS if b.name in results]
    found = {
        "SingleBench": average([b for b in ran if b.group == "single"
                                and b.name != "Run command"]),
        "MultiBench": average([b for b in ran if b.group == "multi"]),
        "ReadBench": average([b for b in ran if b.kind == "read"]),
        "WriteBench": average([b for b in ran if b.kind == "write"]),
    }
    if found["ReadBench"] is not None and found["WriteBench"] is not None:
        found["DriverBench"] = (found["ReadBench"] + found["WriteBench"]) / 2
    return {name: value for name, value in found.items() if value is not None}


def table(results: dict[str, dict[str, dict[str, Any]]], contenders: list[str]) -> str:
    head = f"{'benchmark':50}" + "".join(f"{name:>20}" for name in contenders)
    lines = [head + "   (MB/s; client CPU µs/op)"]
    for name, by in results.items():
        lines.append(f"{name:50}" + "".join(
            f"{by[c]['mb_s']:9.2f};{1e6 * by[c]['cpu_s_per_op']:9.1f}" + " " * 1
            for c in contenders))
    for composite in ("SingleBench", "MultiBench", "ReadBench", "WriteBench", "DriverBench"):
        scores = [composites(results, c).get(composite) for c in contenders]
        if all(score is not None for score in scores):
            lines.append(f"{composite:50}" + "".join(f"{s:9.2f}{'':11}" for s in scores))
    if len(contenders) > 1 and contenders[0] == "greenpool":
        for other in contenders[1:]:
            lines.append(f"\ngreenpool / {other}: MB/s ratio, client CPU per op ratio")
            for name, by in results.items():
                ours, theirs = by["greenpool"], by[other]
                lines.append(f"  {name:48} {ours['mb_s'] / theirs['mb_s']:6.2f}x"
                             f" {ours['cpu_s_per_op'] / theirs['cpu_s_per_op']:8.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="benchmarks whose names contain one of these (any case)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--min-seconds", type=float, default=60.0)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--max-iterations", type=int, default=100)
    parser.add_argument("--uri", help="a server on 127.0.0.1 to use (default: start one)")
    args = parser.parse_args()
    contenders = [name for name in args.contenders.split(",") if name]
    unknown = [name for name in contenders if name not in CONTENDERS]
    if unknown or not contenders:
        parser.error(f"--contenders {args.contenders!r}: expected some of "
                     f"{', '.join(CONTENDERS)}")
    if not 0 <= args.min_seconds <= args.max_seconds:
        parser.error(f"--min-seconds {args.min_seconds:g} must be from 0 to --max-seconds "
                     f"{args.max_seconds:g}")
    if args.max_iterations < 1:
        parser.error(f"--max-iterations must be at least 1, not {args.max_iterations}")
    chosen = [b for b in BENCHMARKS if not args.only
              or any(word.lower() in b.name.lower() for word in args.only)]
    if not chosen:
        parser.error(f"--only {' '.join(args.only)}: no benchmark's name contains that")
    limits = Limits(args.min_seconds, args.max_seconds, args.max_iterations)
    from gevent import monkey

    monkey.patch_all()  # before greenpool or PyMongo is imported
    cpus = sorted(os.sched_getaffinity(0))
    with contextlib.ExitStack() as stack:
        uri = args.uri
        if uri is None:
            if len(cpus) >= 2:
                os.sched_setaffinity(0, {cpus[0]})  # the server inherits it
            from greenpool.testing import EmbeddedServer

            uri = stack.enter_context(EmbeddedServer()).uri
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[1]})
        data = load_data(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        clients = {name: stack.enter_context(client_of(name, uri)) for name in contenders}
        spec_rules = (args.min_seconds, args.max_seconds, args.max_iterations) == (60, 300, 100)
        print(f"driverbench: {len(chosen)} benchmarks, contenders {', '.join(contenders)}; "
              f"iterations: at least {args.min_seconds:g} s of timed work, at most "
              f"{args.max_iterations} or {args.max_seconds:g} s"
              + ("" if spec_rules else " (shorter than the spec's 60 s, 100, 300 s)"),
              flush=True)
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for number, benchmark in enumerate(chosen, 1):
            started = time.monotonic()
            results[benchmark.name] = measure(benchmark, clients, data, limits)
            shown = ", ".join(f"{name} {by['mb_s']:.2f} MB/s ({by['iterations']} it.)"
                              for name, by in results[benchmark.name].items())
            print(f"[{number}/{len(chosen)}] {benchmark.name}: {shown} "
                  f"in {time.monotonic() - started:.0f} s", flush=True)
    print()
    print(table(results, contenders))
    if args.json:
        # {benchmark: {contender: {"mb_s", "cpu_s_per_op", ...}}}, the composites as
        # benchmarks with a score only.
        output: dict[str, Any] = dict(results)
        for contender in contenders:
            for composite, score in composites(results, contender).items():
                output.setdefault(composite, {})[contender] = {"mb_s": score}
        args.json.write_text(json.dumps(output, indent=1) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
