"""The whole feature set against slow servers, beside a hub-block detector: one process.

Run by tests/test_cooperative.py, in a process of its own::

    python -m tests.cooperative_run CONFIG.json

``CONFIG.json`` says which client to drive (``"mode"``: ``"client"`` for
:class:`greenpool.Client` in a process that is *not* monkey-patched, ``"pymongo"`` for
:class:`greenpool.pymongo.MongoClient` after ``gevent.monkey.patch_all()``), the
connection strings, the loopback DNS server's port, the control address, and where
to write the report. The steps run one after the other, each inside
:meth:`tests.hub_blocks.HubBlockDetector.step`; a step that fails is noted and the
next one runs. The report (JSON) lists each step: its time, its longest hub block
(with the run-queue wait and CPU time of that gap, and the stack that held the hub for
any gap over the limit) and its error, if any.

Where the names resolve. The connection strings name hosts of the zone
``greenpool.test``, served only by the loopback DNS server (tests/slow_dns.py):

- dnspython asks that server: ``dns.resolver.default_resolver`` is set to a resolver
  for it, as a program that sets its own resolver does (greenpool keeps it);
- the system's resolver (``getaddrinfo``) is played by :class:`LoopbackSystemResolver`,
  gevent's default resolver (the system's ``getaddrinfo`` in gevent's threadpool) whose
  system call asks that same server for the zone's A records, blocking its worker
  thread for as long as the server takes. It refuses every other name, so nothing
  leaves the machine. Unpatched, the standard library's blocking ``socket.getaddrinfo``
  fails loudly: greenpool must never call it.

The server goes away and comes back through the control address: a line ``down`` or
``up``, answered ``ok`` once done (the test's process runs the front, tests/slow_server.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CONFIG: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text()) if __name__ == "__main__" else {}

if CONFIG.get("mode") == "pymongo":
    from gevent import monkey

    monkey.patch_all()

# ruff: noqa: E402  (the imports follow the patching, as in any patched program)
import _socket
import faulthandler
import functools
import ipaddress
import os
import random
import socket
import time
from collections.abc import Callable

import dns.resolver
import gevent
import gevent.resolver.thread
import gevent.util
import pymongo
from gevent import socket as gsocket
from gevent.monkey import is_module_patched
from pymongo.errors import AutoReconnect

import greenpool
import greenpool.pymongo
from greenpool.client.config import dns as greenpool_dns
from greenpool.errors import ConfigurationError
from tests.hub_blocks import HubBlockDetector, Step

ZONE = "greenpool.test"
STEP_TIMEOUT = 30.0
"""Seconds a step may take before it counts as hung (and the next one runs)."""


class StepTimedOut(BaseException):
    """A step ran past STEP_TIMEOUT (a BaseException, as gevent.Timeout is: the code
    under test cannot take it for its own error)."""


def zone_resolver(port: int) -> dns.resolver.Resolver:
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = port
    resolver.lifetime = 30.0
    return resolver


class LoopbackSystemResolver(gevent.resolver.thread.Resolver):  # type: ignore[misc]
    """gevent's thread resolver over a "system" getaddrinfo that knows only the test zone."""

    dns_port = 0

    def getaddrinfo(self, *args: Any, **kwargs: Any) -> Any:
        return self.pool.apply(_system_getaddrinfo, args, kwargs)


def _system_getaddrinfo(host: Any, port: Any, family: int = 0, kind: int = 0, proto: int = 0,
                        flags: int = 0) -> Any:
    """The system's getaddrinfo, as if its name server were the loopback one: blocking."""
    name = host.decode() if isinstance(host, bytes) else str(host)
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return _socket.getaddrinfo(host, port, family, kind, proto, flags)
    if not name.rstrip(".").endswith("." + ZONE):
        raise _socket.gaierror(_socket.EAI_NONAME, f"{name!r} is outside the test zone")
    try:
        answer = zone_resolver(LoopbackSystemResolver.dns_port).resolve(name, "A")
    except dns.resolver.NXDOMAIN:
        raise _socket.gaierror(_socket.EAI_NONAME, f"{name!r} does not exist") from None
    results = []
    for record in answer:
        results += _socket.getaddrinfo(record.address, port, family, kind, proto,
                                       flags | _socket.AI_NUMERICHOST)
    return results


def _blocking_getaddrinfo(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"the standard library's blocking getaddrinfo was called: {args}")


class Control:
    """The line protocol to the test's process, which takes the server down and up."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address

    def __call__(self, order: str) -> None:
        with gsocket.create_connection(self.address, timeout=30) as sock:
            sock.sendall(order.encode() + b"\n")
            reply = sock.makefile("rb").readline()
        if reply != b"ok\n":
            raise AssertionError(f"the control answered {reply!r} to {order!r}")


@functools.cache
def big_text() -> str:
    """About 3 MB of words: compressing it takes zlib about 100 ms on the test machine
    (a message that large must not be compressed on the hub), BSON a few ms."""
    rng = random.Random(21)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(5000)]
    return " ".join(rng.choices(words, k=400_000))


def note(text: str) -> None:
    """A line of the run's log (shown when the test fails)."""
    print(f"{time.strftime('%X')} {text}", file=sys.stderr, flush=True)


def check(condition: object, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def timed_out(error: BaseException) -> bool:
    return bool(getattr(error, "timeout", False))


# How late a timer may fire on a loaded 2-core machine: a limit's error must come within
# it. That the error is a timeout, not the slow answer, is what says it came first.
LATE = 0.5


def times_out(action: Callable[[], object], limit: float, slack: float) -> Exception:
    """The error ``action`` raised, which it must within ``limit`` + ``slack`` seconds
    (``slack`` at least LATE)."""
    started = time.monotonic()
    try:
        action()
    except Exception as error:
        elapsed = time.monotonic() - started
        check(elapsed < limit + max(slack, LATE),
              f"a {limit:.3f} s limit took {elapsed:.3f} s: {error!r}")
        return error
    raise AssertionError(f"no error within a {limit:.3f} s limit")


# -- the steps ---------------------------------------------------------------------------

#: The steps of both modes, in order: their names and the methods that run them.
STEPS = (
    ("dns: SRV and TXT lookups", "dns_lookups"),
    ("dns: a lookup past its time limit", "dns_time_limit"),
    ("srv seedlist", "srv_seedlist"),
    ("connect, TLS, SCRAM-SHA-256", "connect"),
    ("TLS with the system's CA certificates", "system_cas"),
    ("SCRAM-SHA-1", "scram_sha1"),
    ("compression", "compression"),
    ("commands", "commands"),
    ("cursors", "cursors"),
    ("transactions", "transactions"),
    ("timeoutMS expiry", "timeout_expiry"),
    ("server goes away and comes back", "server_away"),
    ("close", "close"),
)


class Run:
    """The steps of one mode, sharing the clients they build."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.uris: dict[str, str] = config["uris"]
        self.control = Control(tuple(config["control"]))
        self.dns_delay: float = config["dns_delay"]
        self.server_delay: float = config["server_delay"]
        self.clients: dict[str, Any] = {}
        self.collection = f"cooperative_{config['mode']}"

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        """The steps, in order: each mode has a method of each name with its client."""
        return [(name, getattr(self, method)) for name, method in STEPS]

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    # Shared by both modes: greenpool's own DNS lookups, called directly.

    def dns_lookups(self) -> None:
        srv = self.config["srv_name"]
        started = time.monotonic()
        records = greenpool_dns.srv_records(srv, timeout=10 * self.dns_delay + 5)
        texts = greenpool_dns.txt_records(srv.split("._tcp.", 1)[1],
                                          timeout=10 * self.dns_delay + 5)
        check(records == [(self.config["db_host"], self.config["port"])], f"SRV: {records}")
        check(texts == [self.config["txt"]], f"TXT: {texts}")
        elapsed = time.monotonic() - started
        check(elapsed >= 2 * self.dns_delay, f"two lookups took only {elapsed:.3f} s")

    def dns_time_limit(self) -> None:
        srv, limit = self.config["srv_name"], self.dns_delay / 4
        error = times_out(lambda: greenpool_dns.srv_records(srv, timeout=limit),
                          limit, self.dns_delay / 2)
        check(isinstance(error, ConfigurationError) and srv in str(error)
              and "timed out" in str(error), f"lookup: {error!r}")
        # Through a connection string: connectTimeoutMS bounds its lookups.
        short = f"{self.uris['main']}&connectTimeoutMS={limit * 1000:.0f}"
        error = times_out(lambda: self.new_client(short), limit, self.dns_delay / 2)
        self.check_srv_timeout(error, srv)

    def check_srv_timeout(self, error: Exception, srv: str) -> None:
        check(isinstance(error, ConfigurationError) and srv in str(error)
              and "timed out" in str(error), f"client: {error!r}")

    def new_client(self, uri: str) -> Any:
        raise NotImplementedError

    def run(self, detector: HubBlockDetector) -> None:
        for name, action in self.steps():
            note(f"step: {name}")
            timer = gevent.Timeout(STEP_TIMEOUT, StepTimedOut(f"over {STEP_TIMEOUT:g} s"))
            try:
                with detector.step(name) as step, timer:
                    action()
            except (Exception, StepTimedOut):
                # Noted in the step; the next one runs.
                note(step.error)


class ClientRun(Run):
    """greenpool.Client, unpatched."""

    def new_client(self, uri: str) -> Any:
        return greenpool.Client(uri)

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [*super().steps(),
                ("greenpool.pymongo refuses to run unpatched", self.pymongo_refuses)]

    @property
    def main(self) -> Any:
        return self.clients["main"]

    def srv_seedlist(self) -> None:
        client = greenpool.Client(self.uris["main"])
        self.clients["main"] = client
        expected = ((self.config["db_host"], self.config["port"]),)
        check(client.settings.hosts == expected, f"hosts: {client.settings.hosts}")

    def connect(self) -> None:
        status = self.main.command("admin", {"connectionStatus": 1})
        users = status["authInfo"]["authenticatedUsers"]
        check(users == [{"user": "admin", "db": "admin"}], f"authenticated as {users}")

    def system_cas(self) -> None:
        # Built and closed: the TLS context loads the system's CA store.
        client = greenpool.Client(self.uris["system_cas"])
        check(client.settings.tls, "TLS settings")
        client.close()

    def scram_sha1(self) -> None:
        client = greenpool.Client(self.uris["sha1"])
        self.clients["sha1"] = client
        status = client.command("admin", {"connectionStatus": 1})
        users = status["authInfo"]["authenticatedUsers"]
        check(users == [{"user": "sha1-user", "db": "admin"}], f"authenticated as {users}")

    def compression(self) -> None:
        self.clients["other"] = greenpool.Client(self.uris["other"])
        document = {"text": big_text()}
        for name in ("main", "sha1", "other"):
            client = self.clients[name]
            client.command("test", {"insert": self.collection + "_big",
                                    "documents": [{"_id": name, **document}]})
            found = client.command("test", {"find": self.collection + "_big",
                                            "filter": {"_id": name}})
            check(found["cursor"]["firstBatch"][0]["text"] == document["text"], "read back")

    def commands(self) -> None:
        client, coll = self.main, self.collection
        client.command("test", {"insert": coll, "documents": [{"n": n} for n in range(10)]})
        client.command("test", {"update": coll, "updates": [
            {"q": {"n": {"$lt": 5}}, "u": {"$set": {"low": True}}, "multi": True}]})
        client.command("test", {"delete": coll, "deletes": [{"q": {"n": 9}, "limit": 1}]})
        count = client.command("test", {"count": coll, "query": {"low": True}})["n"]
        check(count == 5, f"count: {count}")

    def cursors(self) -> None:
        client, coll = self.main, self.collection
        with client.find("test", coll, {}, batch_size=3, sort={"n": 1}) as cursor:
            numbers = [document["n"] for document in cursor]
        check(numbers == list(range(9)), f"found {numbers}")
        with client.find("test", coll, {}, batch_size=2) as cursor:
            next(cursor)  # then closed early: killCursors

    def transactions(self) -> None:
        client, coll = self.main, self.collection + "_txn"
        client.command("test", {"create": coll})
        with client.start_session() as session:
            session.start_transaction()
            client.command("test", {"insert": coll, "documents": [{"t": 1}]}, session=session)
            session.abort_transaction()
            session.start_transaction()
            client.command("test", {"insert": coll, "documents": [{"t": 2}]}, session=session)
            session.commit_transaction()
        count = client.command("test", {"count": coll})["n"]
        check(count == 1, f"count after abort and commit: {count}")

    def timeout_expiry(self) -> None:
        limit = self.server_delay / 2
        started = time.monotonic()
        try:
            self.main.command("admin", {"ping": 1}, timeout=limit)
        except Exception as error:
            check(timed_out(error), f"not a timeout: {error!r}")
        else:
            raise AssertionError("a command slower than its timeout succeeded")
        elapsed = time.monotonic() - started
        check(elapsed < limit + max(self.server_delay / 2, LATE),
              f"a {limit} s limit took {elapsed:.3f} s")
        self.main.command("admin", {"ping": 1})  # and the client goes on
        # A new client's first command, with less time than resolving its host takes.
        fresh, limit = greenpool.Client(self.uris["other"]), self.dns_delay / 3
        try:
            error = times_out(lambda: fresh.command("admin", {"ping": 1}, timeout=limit),
                              limit, self.dns_delay / 2)
        finally:
            fresh.close()
        check(timed_out(error) and self.config["db_host"] in str(error), f"{error!r}")

    def server_away(self) -> None:
        self.control("down")
        try:
            # Bounded: once the monitor has seen the server go, the command waits
            # for it to come back.
            self.main.command("admin", {"ping": 1}, timeout=10 * self.server_delay)
        except AutoReconnect as error:
            note(f"while away: {error}")
        else:
            raise AssertionError("a command succeeded while the server was away")
        self.control("up")
        note("back")
        self.main.command("admin", {"ping": 1})
        note("ping answered")

    def pymongo_refuses(self) -> None:
        try:
            greenpool.pymongo.MongoClient(self.uris["main"], connect=False)
        except RuntimeError as error:
            check("monkey-patching" in str(error), f"message: {error}")
        else:
            raise AssertionError("greenpool.pymongo ran without monkey-patching")


class PyMongoRun(Run):
    """greenpool.pymongo.MongoClient, monkey-patched."""

    def new_client(self, uri: str) -> Any:
        return greenpool.pymongo.MongoClient(uri)

    def check_srv_timeout(self, error: Exception, srv: str) -> None:
        # PyMongo's own message: it says the lookup timed out, not of what.
        check(isinstance(error, pymongo.errors.ConfigurationError)
              and "timed out" in str(error), f"client: {error!r}")

    @property
    def db(self) -> Any:
        return self.clients["main"].test

    def srv_seedlist(self) -> None:
        client: Any = greenpool.pymongo.MongoClient(self.uris["main"])
        self.clients["main"] = client
        seeds = client.topology_description._topology_settings.seeds
        expected = [(self.config["db_host"], self.config["port"])]
        check(sorted(seeds) == expected, f"seeds: {seeds}")

    def connect(self) -> None:
        status = self.clients["main"].admin.command("connectionStatus")
        users = status["authInfo"]["authenticatedUsers"]
        check(users == [{"user": "admin", "db": "admin"}], f"authenticated as {users}")

    def system_cas(self) -> None:
        # Built and closed: the TLS context loads the system's CA store.
        greenpool.pymongo.MongoClient(self.uris["system_cas"], connect=False).close()

    def scram_sha1(self) -> None:
        client: Any = greenpool.pymongo.MongoClient(self.uris["sha1"])
        self.clients["sha1"] = client
        status = client.admin.command("connectionStatus")
        users = status["authInfo"]["authenticatedUsers"]
        check(users == [{"user": "sha1-user", "db": "admin"}], f"authenticated as {users}")

    def compression(self) -> None:
        self.clients["other"] = greenpool.pymongo.MongoClient(self.uris["other"])
        document = {"text": big_text()}
        for name in ("main", "sha1", "other"):
            coll = self.clients[name].test[self.collection + "_big"]
            coll.insert_one({"_id": name, **document})
            found = coll.find_one({"_id": name})
            check(found is not None and found["text"] == document["text"], "read back")

    def commands(self) -> None:
        coll = self.db[self.collection]
        coll.insert_many([{"n": n} for n in range(10)])
        coll.update_many({"n": {"$lt": 5}}, {"$set": {"low": True}})
        coll.delete_one({"n": 9})
        count = coll.count_documents({"low": True})
        check(count == 5, f"count: {count}")

    def cursors(self) -> None:
        coll = self.db[self.collection]
        numbers = [document["n"] for document in coll.find({}, batch_size=3).sort("n", 1)]
        check(numbers == list(range(9)), f"found {numbers}")
        cursor = coll.find({}, batch_size=2)
        next(cursor)
        cursor.close()  # killCursors

    def transactions(self) -> None:
        client = self.clients["main"]
        coll = self.db[self.collection + "_txn"]
        self.db.create_collection(coll.name)
        with client.start_session() as session:
            session.start_transaction()
            coll.insert_one({"t": 1}, session=session)
            session.abort_transaction()
            with session.start_transaction():
                coll.insert_one({"t": 2}, session=session)
        count = coll.count_documents({})
        check(count == 1, f"count after abort and commit: {count}")

    def timeout_expiry(self) -> None:
        limit = self.server_delay / 2
        started = time.monotonic()
        try:
            with pymongo.timeout(limit):
                self.clients["main"].admin.command("ping")
        except Exception as error:
            check(timed_out(error), f"not a timeout: {error!r}")
        else:
            raise AssertionError("a command slower than its timeout succeeded")
        elapsed = time.monotonic() - started
        check(elapsed < limit + max(self.server_delay / 2, LATE),
              f"a {limit} s limit took {elapsed:.3f} s")
        self.clients["main"].admin.command("ping")
        # A new client's first command, with less time than resolving its host takes.
        fresh, limit = greenpool.pymongo.MongoClient(self.uris["other"]), self.dns_delay / 3

        def ping() -> None:
            with pymongo.timeout(limit):
                fresh.admin.command("ping")

        try:
            # PyMongo looks at its selection deadline every 0.5 s (MIN_HEARTBEAT_INTERVAL).
            error = times_out(ping, limit, self.dns_delay / 2 + 0.5)
        finally:
            fresh.close()
        check(timed_out(error) and self.config["db_host"] in str(error), f"{error!r}")

    def server_away(self) -> None:
        client = self.clients["main"]
        self.control("down")
        try:
            # Bounded: PyMongo retries the read, and waits for the server to come back.
            with pymongo.timeout(10 * self.server_delay):
                client.admin.command("ping")
        except AutoReconnect as error:
            note(f"while away: {error}")
        else:
            raise AssertionError("a command succeeded while the server was away")
        self.control("up")
        note("back")
        client.admin.command("ping")
        note("ping answered")


def report(detector: HubBlockDetector) -> list[dict[str, Any]]:
    def gap(step: Step) -> dict[str, Any]:
        longest = step.longest
        if longest is None:
            return {"block": 0.0, "late": 0.0, "queued": 0.0, "cpu": 0.0}
        return {"block": longest.block, "late": longest.late, "queued": longest.queued,
                "cpu": longest.cpu}

    return [
        {"name": step.name, "seconds": step.seconds, "error": step.error, "longest": gap(step),
         "blocks": [{"block": g.block, "late": g.late, "queued": g.queued, "cpu": g.cpu,
                     "process_cpu": g.process_cpu, "watcher_late": g.watcher_late, "gc": g.gc,
                     "stack": g.stack} for g in step.blocks(detector.limit)]}
        for step in detector.steps
    ]


def dump_and_exit() -> None:
    print("\n".join(gevent.util.format_run_info()), file=sys.stderr, flush=True)
    os._exit(3)


def main(config: dict[str, Any]) -> None:
    mode = config["mode"]
    patched = is_module_patched("socket")
    if patched != (mode == "pymongo"):
        raise SystemExit(f"mode {mode!r} with socket {'' if patched else 'not '}patched")
    LoopbackSystemResolver.dns_port = config["dns_port"]
    gevent.get_hub().resolver = LoopbackSystemResolver()
    dns.resolver.default_resolver = zone_resolver(config["dns_port"])
    if not patched:
        socket.getaddrinfo = _blocking_getaddrinfo
    # A run that hangs shows where, before the test gives up on it: every greenlet's
    # stack if the hub still runs, every thread's if it does not.
    gevent.spawn_later(config["dump_after"], dump_and_exit)
    faulthandler.dump_traceback_later(config["dump_after"] + 5, exit=True)
    big_text()  # built before the steps: the test's own work is not theirs
    run: Run = ClientRun(config) if mode == "client" else PyMongoRun(config)
    with HubBlockDetector(limit=config["limit"]) as detector:
        run.run(detector)
    Path(config["report"]).write_text(json.dumps(report(detector), indent=1))


if __name__ == "__main__":
    main(CONFIG)
