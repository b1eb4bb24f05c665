"""Exhaust cursors on greenpool.Client (``CursorType.EXHAUST``, ``add_option(64)``).

Two servers. SecantusDB streams an exhaust getMore's batches (replies flagged
moreToCome), end to end. The fake server (tests/fake_server.py) is scripted: a
getMore answered with a :class:`~tests.fake_server.Stream` or a
:class:`~tests.fake_server.Live` stream of spec-shaped replies, or once per
getMore (a server that ignores exhaustAllowed), and it records what the Client
sent: one getMore with exhaustAllowed for a whole streamed run. The kill tests
throw ``GreenletExit`` or ``gevent.Timeout`` into the iterating greenlet at
every point of a streamed run where it can yield (in listeners, and blocked on
the stream's next reply); after each, the pool's counters add up, no
connection still receiving a stream is back in the pool, and the next exhaust
find reads everything on the same client.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import bson
import gevent
import gevent.event
import pytest
from gevent import socket as gsocket
from pymongo import CursorType, MongoClient, monitoring
from pymongo.errors import AutoReconnect, InvalidOperation, OperationFailure

import greenpool
from tests.events import AllEvents
from tests.fake_server import EXHAUST_ALLOWED, HANG_UP, FakeServer, Live, Request, Stream
from tests.servers import unique

pytestmark = pytest.mark.timeout(120)

NS = "db.c"
ID = 7


def first(documents: list[Any], cursor_id: int = ID) -> dict[str, Any]:
    return {"ok": 1.0, "cursor": {"id": cursor_id, "ns": NS, "firstBatch": documents}}


def more(documents: list[Any], cursor_id: int = ID) -> dict[str, Any]:
    return {"ok": 1.0, "cursor": {"id": cursor_id, "ns": NS, "nextBatch": documents}}


def docs(start: int, stop: int) -> list[dict[str, int]]:
    return [{"_id": n} for n in range(start, stop)]


def streamed(request: Request) -> Stream:
    """The rest of the documents, _id 2 to 9, in four replies (moreToCome on all
    but the last, whose cursor id is 0), as mongod streams them."""
    assert request.flags & EXHAUST_ALLOWED
    return Stream([more(docs(2, 4)), more(docs(4, 6)), more(docs(6, 8)),
                   more(docs(8, 10), cursor_id=0)])


@pytest.fixture
def server() -> Iterator[FakeServer]:
    handlers = {"find": lambda _r: first(docs(0, 2)), "getMore": streamed}
    with FakeServer(hello={"logicalSessionTimeoutMinutes": 30}, handlers=handlers) as fake:
        yield fake


def connect(server: FakeServer, *listeners: Any) -> greenpool.Client:
    host, port = server.address
    return greenpool.Client(f"mongodb://{host}:{port}/?directConnection=true",
                            event_listeners=list(listeners))


def sent(server: FakeServer, name: str) -> list[Request]:
    return [request for request in server.requests if request.name == name]


def ids(documents: list[Any]) -> list[int]:
    return [document["_id"] for document in documents]


def assert_settled(client: greenpool.Client) -> None:
    """The pool's counts add up: nothing in use, every connection available."""
    gevent.sleep(0)  # events of a checkin_after_error
    stats = client.stats()
    assert (stats.in_use, stats.pending, stats.total) == (0, 0, stats.available), stats


def killed(runner: gevent.Greenlet, kill: Any) -> bool:
    """Whether ``kill`` ended ``runner`` (gevent counts a GreenletExit as success)."""
    return isinstance(runner.exception, kill) or isinstance(runner.value, kill)


def closed_with_error(events: AllEvents) -> list[int]:
    return [event.connection_id for event in events.of(monitoring.ConnectionClosedEvent)
            if event.reason == "error"]


# -- the surface: PyMongo's rules ------------------------------------------------------------


def test_exhaust_takes_no_limit_as_pymongo(server: FakeServer) -> None:
    with connect(server) as client:
        c = client.db.c
        for make in (lambda: c.find(cursor_type=CursorType.EXHAUST, limit=3),
                     lambda: c.find(cursor_type=CursorType.EXHAUST).limit(3),
                     lambda: c.find(cursor_type=CursorType.EXHAUST).limit(0),
                     lambda: c.find().limit(3).add_option(64),
                     lambda: c.find().add_option(64).limit(1),
                     lambda: c.find(cursor_type=CursorType.EXHAUST)[0],
                     lambda: c.find_one({}, cursor_type=CursorType.EXHAUST)):
            with pytest.raises(InvalidOperation, match=r"Can't use limit and exhaust together\."):
                make()
        # remove_option(64): an ordinary cursor again, which takes a limit.
        assert c.find(cursor_type=CursorType.EXHAUST).remove_option(64).limit(2) is not None
        with pytest.raises(ValueError, match="cursor_type must be"):
            c.find(cursor_type=CursorType.EXHAUST | 2)
    assert sent(server, "find") == []


def test_removing_the_exhaust_option_sends_ordinary_get_mores(server: FakeServer) -> None:
    server.handlers["getMore"] = lambda r: more(docs(2, 4), cursor_id=0)
    with connect(server) as client:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST).remove_option(64)
        assert ids(cursor.to_list()) == list(range(4))
    (get_more,) = sent(server, "getMore")
    assert not get_more.flags & EXHAUST_ALLOWED


def test_a_mongos_before_7_1_is_refused_before_the_find(server: FakeServer) -> None:
    server.hello.update(msg="isdbgrid")  # maxWireVersion 21
    server.handlers["getMore"] = lambda _r: more(docs(2, 4), cursor_id=0)
    with connect(server) as client:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST)
        with pytest.raises(InvalidOperation,
                           match=r"Exhaust cursors require MongoDB 7\.1\+ when connected to "
                                 r"mongos\."):
            next(cursor)
        assert sent(server, "find") == []
        assert client.db.c.find().to_list()  # an ordinary cursor is fine
        assert_settled(client)


def test_a_mongos_of_7_1_streams(server: FakeServer) -> None:
    server.hello.update(msg="isdbgrid", maxWireVersion=22)
    with connect(server) as client:
        found = client.db.c.find(cursor_type=CursorType.EXHAUST).to_list()
    assert ids(found) == list(range(10))
    assert len(sent(server, "getMore")) == 1


# -- the streaming path, scripted ------------------------------------------------------------


def test_a_streamed_run_sends_one_get_more(server: FakeServer) -> None:
    events = AllEvents()
    with connect(server, events) as client:
        cursor = client.db.c.find({"x": 1}, cursor_type=CursorType.EXHAUST, batch_size=2)
        assert ids(list(cursor)) == list(range(10))
        assert not cursor.alive and cursor.cursor_id == 0
        assert_settled(client)
        assert client.stats().total == 1
        assert client.db.command("ping")["ok"] == 1  # the same connection, clean
        assert client.stats().total == 1
    (find,) = sent(server, "find")
    (get_more,) = sent(server, "getMore")
    assert not find.flags & EXHAUST_ALLOWED and get_more.flags & EXHAUST_ALLOWED
    assert (get_more.command["getMore"], get_more.command["collection"],
            get_more.command["batchSize"]) == (ID, "c", 2)
    assert find.connection == get_more.connection
    assert [r.name for r in server.requests if r.connection == find.connection
            and r.name in ("find", "getMore", "ping")] == ["find", "getMore", "ping"]
    assert sent(server, "killCursors") == [] and server.hangups == []
    # One started/succeeded pair per reply, as PyMongo publishes them: the getMore
    # sent, then each streamed reply's with request id 0.
    pairs = [(type(e).__name__, e.command_name, e.request_id) for e in
             events.of(monitoring.CommandStartedEvent, monitoring.CommandSucceededEvent)
             if e.command_name == "getMore"]
    sent_id = pairs[0][2]
    assert sent_id != 0
    assert pairs == [("CommandStartedEvent", "getMore", sent_id),
                     ("CommandSucceededEvent", "getMore", sent_id)] + [
        ("CommandStartedEvent", "getMore", 0), ("CommandSucceededEvent", "getMore", 0)] * 3
    replies = [e.reply["cursor"] for e in events.of(monitoring.CommandSucceededEvent)
               if e.command_name == "getMore"]
    assert [ids(r["nextBatch"]) for r in replies] == [[2, 3], [4, 5], [6, 7], [8, 9]]
    assert [r["id"] for r in replies] == [ID, ID, ID, 0]
    started = [e.command for e in events.of(monitoring.CommandStartedEvent)
               if e.command_name == "getMore"]
    assert all(c["getMore"] == ID and c["$db"] == "db" for c in started)


def test_a_server_that_does_not_stream_gets_a_get_more_per_batch(server: FakeServer) -> None:
    left = [more(docs(2, 4)), more(docs(4, 6)), more(docs(6, 8), cursor_id=0)]
    server.handlers["getMore"] = lambda _r: left.pop(0)  # no moreToCome
    with connect(server) as client:
        found = client.db.c.find(cursor_type=CursorType.EXHAUST).to_list()
        assert_settled(client)
    assert ids(found) == list(range(8))
    get_mores = sent(server, "getMore")
    assert len(get_mores) == 3 and all(r.flags & EXHAUST_ALLOWED for r in get_mores)
    assert len({r.connection for r in server.requests if r.name in ("find", "getMore")}) == 1


def test_add_option_64_streams(server: FakeServer) -> None:
    with connect(server) as client:
        assert ids(client.db.c.find().add_option(64).to_list()) == list(range(10))
    assert len(sent(server, "getMore")) == 1


def test_raw_batches_stream_as_bytes(server: FakeServer) -> None:
    with connect(server) as client:
        batches = list(client.db.c.find_raw_batches(cursor_type=CursorType.EXHAUST))
    assert [ids(bson.decode_all(batch)) for batch in batches] == [
        [0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert len(sent(server, "getMore")) == 1


def test_a_stream_whose_last_reply_keeps_more_to_come_costs_its_connection(
        server: FakeServer) -> None:
    # A broken server: cursor id 0, yet moreToCome. Nothing else may use the link.
    server.handlers["getMore"] = lambda _r: Stream([more(docs(2, 4), cursor_id=0), more([])])
    events = AllEvents()
    with connect(server, events) as client:
        assert ids(client.db.c.find(cursor_type=CursorType.EXHAUST).to_list()) == list(
            range(4))
        assert_settled(client)
        assert closed_with_error(events) == [1]
        assert client.db.command("ping")["ok"] == 1


# -- ending a stream early: close, garbage collection, errors ---------------------------------


def paced(replies: list[dict[str, Any]], gate: gevent.event.Event | None = None,
          end: Any = None) -> Callable[[Request], Live]:
    """A getMore handler streaming ``replies`` one at a time, each after ``gate``
    is set (and cleared again), then ``end`` (a reply without moreToCome, or HANG_UP)."""
    def handler(request: Request) -> Live:
        def replies_() -> Iterator[Any]:
            for reply in replies:
                if gate is not None:
                    gate.wait()
                    gate.clear()
                yield reply, True
            if end is not None:
                if gate is not None:
                    gate.wait()
                yield end if end is HANG_UP else (end, False)
        return Live(replies_())
    return handler


def wait_hangup(server: FakeServer) -> None:
    """Wait until the client has closed the connection its last find came on
    (seen on the server's socket, whatever the server's script is doing)."""
    sock = sent(server, "find")[-1].sock
    with gevent.Timeout(10, AssertionError("the stream's connection stayed open")):
        while True:
            gsocket.wait_read(sock.fileno())
            try:
                if sock.recv(1, gsocket.MSG_PEEK) == b"":
                    return
            except ConnectionError:
                return
            gevent.sleep(0.005)  # a request, not the end: not what a closed stream sends


@pytest.mark.parametrize("how", ["close", "with", "gc", "client close"])
def test_a_cursor_closed_mid_stream_closes_its_connection(server: FakeServer, how: str) -> None:
    gate = gevent.event.Event()
    server.handlers["getMore"] = paced([more(docs(2, 4)), more(docs(4, 6))], gate)
    events = AllEvents()
    client = connect(server, events)
    try:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST)
        gate.set()
        assert ids([next(cursor) for _ in range(4)]) == [0, 1, 2, 3]  # one streamed reply
        assert client.stats().in_use == 1
        if how == "close":
            cursor.close()
        elif how == "with":
            with cursor:
                pass
        elif how == "gc":
            del cursor
            gc.collect()
        else:
            client.close()
        wait_hangup(server)
        if how != "client close":
            assert_settled(client)
            assert closed_with_error(events) == [1]
            assert client.stats().total == 0
            assert client.db.command("ping")["ok"] == 1  # on a new connection
            assert client.stats().total == 1
    finally:
        client.close()
    assert sent(server, "killCursors") == []


def test_a_cursor_killed_on_the_server_mid_stream_ends_it(server: FakeServer) -> None:
    gate = gevent.event.Event()
    refusal = {"ok": 0.0, "code": 43, "codeName": "CursorNotFound", "errmsg": "gone"}
    server.handlers["getMore"] = paced([more(docs(2, 4))], gate, end=refusal)
    events = AllEvents()
    with connect(server, events) as client:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST)
        gate.set()
        assert ids([next(cursor) for _ in range(4)]) == [0, 1, 2, 3]
        gate.set()
        with pytest.raises(OperationFailure) as caught:
            next(cursor)
        assert caught.value.code == 43
        assert not cursor.alive
        # The error reply ended the stream: the connection is clean, checked in.
        assert_settled(client)
        assert client.stats().total == 1 and closed_with_error(events) == []
        assert client.db.command("ping")["ok"] == 1
    assert sent(server, "killCursors") == []
    assert [e.command_name for e in events.of(monitoring.CommandFailedEvent)
            if e.command_name != "endSessions"] == ["getMore"]


def test_a_server_refusing_mid_stream_ends_the_cursor_without_kill_cursors(
        server: FakeServer) -> None:
    gate = gevent.event.Event()
    refusal = {"ok": 0.0, "code": 2, "codeName": "BadValue", "errmsg": "no"}
    server.handlers["getMore"] = paced([more(docs(2, 4))], gate, end=refusal)
    with connect(server) as client:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST)
        gate.set()
        assert ids(cursor.to_list(4)) == [0, 1, 2, 3]
        gate.set()
        with pytest.raises(OperationFailure):
            cursor.to_list()
        assert cursor.to_list() == []
        cursor.close()
        assert_settled(client)
    assert sent(server, "killCursors") == []


def test_a_network_error_mid_stream_costs_the_connection_only(server: FakeServer) -> None:
    gate = gevent.event.Event()
    server.handlers["getMore"] = paced([more(docs(2, 4))], gate, end=HANG_UP)
    events = AllEvents()
    with connect(server, events) as client:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST)
        gate.set()
        assert ids(cursor.to_list(4)) == [0, 1, 2, 3]
        gate.set()
        with pytest.raises(AutoReconnect):
            next(cursor)
        assert not cursor.alive
        assert_settled(client)
        assert closed_with_error(events) == [1]
        server.handlers["getMore"] = streamed
        assert ids(client.db.c.find(cursor_type=CursorType.EXHAUST).to_list()) == list(
            range(10))
    assert sent(server, "killCursors") == []


def test_the_time_limit_bounds_each_streamed_reply(server: FakeServer) -> None:
    gate = gevent.event.Event()
    server.handlers["getMore"] = paced([more(docs(2, 4)), more(docs(4, 6))], gate)
    host, port = server.address
    with greenpool.Client(f"mongodb://{host}:{port}/?directConnection=true"
                          "&socketTimeoutMS=200") as client:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST)
        gate.set()
        assert ids(cursor.to_list(4)) == [0, 1, 2, 3]
        with pytest.raises(AutoReconnect, match="timed out"):
            next(cursor)  # the second streamed reply never comes
        assert not cursor.alive
        assert_settled(client)
        assert client.stats().total == 0
    assert sent(server, "killCursors") == []


# -- kills at every yield point of a streamed run ---------------------------------------------


class Sweep(monitoring.CommandListener, monitoring.ConnectionPoolListener):
    """Yield points: every command and pool event of the iterating greenlet, and
    each wait for a streamed reply (the server's script calls :meth:`server_point`
    before sending each). The run whose point is ``kill_at`` throws ``kill()``
    into the iterating greenlet there."""

    def __init__(self) -> None:
        self.kill_at: int | None = None
        self.kill: Callable[[], BaseException] = gevent.GreenletExit
        self.count = 0
        self.victim: gevent.Greenlet | None = None
        self.killed_where = ""

    def arm(self, kill_at: int | None, kill: Callable[[], BaseException],
            victim: gevent.Greenlet | None) -> None:
        self.kill_at, self.kill, self.victim, self.count = kill_at, kill, victim, 0
        self.killed_where = ""

    def _point(self, where: str) -> None:
        if gevent.getcurrent() is not self.victim:
            return
        if self.count == self.kill_at:
            self.killed_where = where
            gevent.get_hub().loop.run_callback(self.victim.throw, self.kill())
        self.count += 1
        gevent.sleep(0)

    def server_point(self) -> None:
        """In the server: the victim is blocked on the stream's next reply."""
        victim = self.victim
        if victim is None or victim.dead:
            return
        if self.count == self.kill_at:
            self.killed_where = "waiting for a streamed reply"
            victim.kill(self.kill(), block=True, timeout=5)
        self.count += 1

    def started(self, event: Any) -> None:
        self._point(f"started {event.command_name}")

    def succeeded(self, event: Any) -> None:
        self._point(f"succeeded {event.command_name}")

    def failed(self, event: Any) -> None:
        self._point(f"failed {event.command_name}")

    def connection_checked_out(self, event: Any) -> None:
        self._point("checked out")

    def connection_checked_in(self, event: Any) -> None:
        self._point("checked in")

    def _ignore(self, event: Any) -> None:
        pass

    pool_created = pool_ready = pool_cleared = pool_closed = _ignore
    connection_created = connection_ready = connection_closed = _ignore
    connection_check_out_started = connection_check_out_failed = _ignore


def swept_server(sweep: Sweep) -> FakeServer:
    def get_more(request: Request) -> Live:
        def replies() -> Iterator[Any]:
            batches = [docs(2, 4), docs(4, 6), docs(6, 8)]
            for index, batch in enumerate(batches):
                if index:  # the first answers the getMore sent
                    sweep.server_point()
                yield more(batch, cursor_id=ID if index < len(batches) - 1 else 0), (
                    index < len(batches) - 1)
        return Live(replies())

    handlers = {"find": lambda _r: first(docs(0, 2)), "getMore": get_more}
    return FakeServer(hello={"logicalSessionTimeoutMinutes": 30}, handlers=handlers)


def iterate(client: greenpool.Client, seen: list[int]) -> None:
    for document in client.db.c.find(cursor_type=CursorType.EXHAUST):
        seen.append(document["_id"])


def run_stream(client: greenpool.Client, seen: list[int], ended: list[type]) -> None:
    try:
        iterate(client, seen)
    except BaseException as error:
        # Kept as its type only: the traceback (and the abandoned cursor in its
        # frames) goes, as it would in an application that dropped the greenlet.
        ended.append(type(error))


@pytest.mark.parametrize("kill", [gevent.GreenletExit, gevent.Timeout],
                         ids=["GreenletExit", "Timeout"])
def test_a_kill_at_any_point_of_a_stream_leaks_nothing(kill: Any) -> None:
    sweep = Sweep()
    with swept_server(sweep) as server, connect(server, sweep) as client:
        def run(kill_at: int | None) -> tuple[list[type], list[int]]:
            seen: list[int] = []
            ended: list[type] = []
            runner = gevent.spawn(run_stream, client, seen, ended)
            sweep.arm(kill_at, kill, runner)
            runner.join(10)
            assert runner.dead
            points, where = sweep.count, sweep.killed_where
            sweep.arm(None, kill, None)
            sweep.count, sweep.killed_where = points, where
            return ended, seen

        ended, seen = run(None)
        assert ended == [] and seen == list(range(8))
        points = sweep.count
        assert points >= 10, points
        wheres = set()
        for kill_at in range(points):
            ended, seen = run(kill_at)
            wheres.add(sweep.killed_where)
            assert ended == [kill] or (ended == [] and seen == list(range(8))), (
                kill_at, sweep.killed_where, ended)
            gc.collect()  # the killed cursor, if anything still holds it
            gevent.sleep(0.01)  # its reaper, and any events flushed later
            assert_settled(client)
            # Nothing left mid-stream went back: the next stream reads all, on
            # a connection that answers its own requests only.
            ended, seen = run(None)
            assert ended == [] and seen == list(range(8)), (kill_at, sweep.killed_where, ended)
            assert_settled(client)
        assert {"waiting for a streamed reply", "started getMore",
                "succeeded getMore", "checked out"} <= wheres


def test_a_kill_while_waiting_for_a_streamed_reply_closes_the_connection(
        server: FakeServer) -> None:
    gate = gevent.event.Event()
    server.handlers["getMore"] = paced([more(docs(2, 4)), more(docs(4, 6))], gate)
    events = AllEvents()
    with connect(server, events) as client:
        cursor = client.db.c.find(cursor_type=CursorType.EXHAUST)
        gate.set()
        assert ids(cursor.to_list(4)) == [0, 1, 2, 3]
        reader = gevent.spawn(cursor.next)
        link: Any = cursor._cursor._conn.transport  # type: ignore[union-attr]
        with gevent.Timeout(10):
            while not link.busy:  # blocked on the next reply
                gevent.sleep(0.001)
        reader.kill(gevent.Timeout())
        assert isinstance(reader.exception, gevent.Timeout)
        assert not cursor.alive
        assert_settled(client)
        assert closed_with_error(events) == [1]
        wait_hangup(server)
        server.handlers["getMore"] = streamed
        assert ids(client.db.c.find(cursor_type=CursorType.EXHAUST).to_list()) == list(
            range(10))
    assert sent(server, "killCursors") == []


# -- SecantusDB, end to end -------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(mongodb_uri: str) -> Iterator[tuple[greenpool.Client, AllEvents, Any]]:
    events = AllEvents()
    with greenpool.Client(mongodb_uri, event_listeners=[events]) as client:
        collection = client.exhaust[unique("exhaust")]
        collection.insert_many([{"n": n, "pad": "x" * (n % 7)} for n in range(100)])
        yield client, events, collection
        collection.drop()


def test_secantusdb_streams_every_batch_in_order(real: Any) -> None:
    client, events, collection = real
    assert_settled(client)
    before = client.stats().total
    events.clear()
    cursor = collection.find({}, {"_id": 0, "n": 1}, cursor_type=CursorType.EXHAUST,
                             batch_size=3).sort("n")
    assert [document["n"] for document in cursor] == list(range(100))
    assert_settled(client)
    assert client.stats().total == before  # none leaked, none closed
    get_mores = [e for e in events.of(monitoring.CommandStartedEvent)
                 if e.command_name == "getMore"]
    assert len(get_mores) >= 33
    assert get_mores[0].request_id != 0
    assert all(e.request_id == 0 for e in get_mores[1:])  # streamed, not sent
    finds = [e for e in events.of(monitoring.CommandStartedEvent) if e.command_name == "find"]
    assert {e.connection_id for e in finds + get_mores} == {finds[0].connection_id}
    assert collection.count_documents({}) == 100  # the connection carries the next command


def test_secantusdb_a_cursor_closed_mid_stream(real: Any) -> None:
    client, events, collection = real
    events.clear()
    cursor = collection.find({}, cursor_type=CursorType.EXHAUST, batch_size=2).sort("n")
    assert [document["n"] for document in cursor.to_list(7)] == list(range(7))
    assert client.stats().in_use == 1
    cursor.close()
    assert_settled(client)
    assert len(closed_with_error(events)) == 1
    assert "killCursors" not in [e.command_name for e in events.of(
        monitoring.CommandStartedEvent)]
    assert collection.find_one({"n": 5})["n"] == 5


def test_secantusdb_a_kill_mid_stream(real: Any, mongodb_uri: str) -> None:
    _client, events, collection = real

    class KillOnThirdGetMore(monitoring.CommandListener):
        count = 0

        def started(self, event: Any) -> None:
            if event.command_name == "getMore":
                self.count += 1
                if self.count == 3:
                    raise_in_runner()

        def succeeded(self, event: Any) -> None:
            pass

        def failed(self, event: Any) -> None:
            pass

    runner: list[gevent.Greenlet] = []

    def raise_in_runner() -> None:
        gevent.get_hub().loop.run_callback(runner[0].throw, gevent.GreenletExit())
        gevent.sleep(0)

    seen: list[int] = []
    with greenpool.Client(mongodb_uri, event_listeners=[KillOnThirdGetMore(), events]) as other:
        events.clear()
        coll = other[collection.database.name][collection.name]
        runner.append(gevent.spawn(lambda: seen.extend(
            d["n"] for d in coll.find({}, cursor_type=CursorType.EXHAUST,
                                      batch_size=4).sort("n"))))
        runner[0].join(10)
        assert killed(runner[0], gevent.GreenletExit)
        # The find's batch, the getMore's, and the first streamed one.
        assert seen == list(range(12))
        assert_settled(other)
        assert len(closed_with_error(events)) == 1 and other.stats().total == 0
        assert coll.count_documents({}) == 100


def test_secantusdb_raw_batches_as_pymongo(real: Any, mongodb_uri: str) -> None:
    _client, _events, collection = real
    stock: MongoClient[Any]
    with MongoClient(mongodb_uri) as stock:
        same: Any = stock[collection.database.name][collection.name]
        theirs: list[bytes] = list(same.find_raw_batches(
            {}, {"_id": 0}, cursor_type=CursorType.EXHAUST, batch_size=10).sort("n"))
    ours = list(collection.find_raw_batches({}, {"_id": 0}, cursor_type=CursorType.EXHAUST,
                                            batch_size=10).sort("n"))
    assert ours == theirs and len(ours) >= 10
