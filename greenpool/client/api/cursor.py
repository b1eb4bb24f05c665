"""Cursors: a server-side cursor's documents, batch by batch.

A :class:`Cursor` runs its opening command at once (``find``, ``aggregate``,
``listCollections``...), then yields documents, fetching the next batch with
``getMore`` when one runs out. Closing it before the end, or leaving its
``with`` block, sends ``killCursors``.

Connections. The opening command goes to the server selected for the
cursor's read preference; its getMore and killCursors go to that same server
(:attr:`Cursor.address`), which holds the server cursor. Outside
load-balanced mode each round trip checks a connection out of that server's
pool and back in (any of its connections reaches the cursor). In
load-balanced mode the cursor is *pinned*: the connection that opened it is
kept (counted as in use "by cursors") until the server returns cursor id 0
or the cursor is closed, because only that connection reaches the service
holding the cursor. killCursors goes over that same connection, which is
checked in whatever the result. After a network error on a getMore the
connection stays pinned and close checks it in without killCursors. Inside
a load-balanced transaction the transaction's connection is used instead.

One greenlet at a time: a ``next()`` or ``close()`` while another greenlet
is in the middle of one raises :class:`~pymongo.errors.InvalidOperation`
rather than interleaving two requests on one connection.

A cursor that is dropped without being closed is closed in a new greenlet
(killCursors, and its pinned connection checked in).

Tailable cursors (``tailable: true`` in the opening command) stay open at
the end of the data: each ``next()`` that finds no buffered document sends
one getMore, and stops the iteration if it brings nothing (``alive`` stays
true; a later ``next()`` asks again), as PyMongo's tailable cursors do. A
getMore carries the cursor's ``comment`` (the CRUD spec: a find's or an
aggregate's comment goes on every getMore) and, given ``max_await_time_ms``,
``maxTimeMS``: how long the server waits for new data (awaitData), within the
time left under timeoutMS (the CSOT spec).

Exhaust cursors (``exhaust=True``: PyMongo's ``CursorType.EXHAUST``). The
opening command goes as usual; its connection then stays with the cursor
(pinned, in any topology) while the server cursor lives, and the getMore
goes with the exhaustAllowed flag: the server streams the remaining batches
as replies flagged moreToCome, each read off that connection without a
request (one started/succeeded event pair per reply, as PyMongo publishes
them). A server that does not stream answers the getMore once, and the
cursor sends the next itself. The connection goes back to the pool when the
server's cursor id is 0. While replies are still coming the connection
cannot carry anything else: closing the cursor then (``close()``, garbage
collection) closes the connection instead of sending killCursors (which,
on the server, ends the cursor), as does any failure or kill
(``GreenletExit``, ``gevent.Timeout``) of a getMore on it; a getMore the
server refuses ends the cursor without killCursors, its connection checked
in. A mongos before MongoDB 7.1 (wire version 22), which cannot continue
an exhaust stream, is refused with InvalidOperation before the opening
command goes out, as PyMongo refuses it. In a load-balanced transaction the
cursor reads on the transaction's connection, one getMore per batch.

Raw batches (``raw_batches=True``: PyMongo's ``find_raw_batches`` and
``aggregate_raw_batches``): the replies decode as RawBSONDocument, and each
non-empty batch is buffered as one ``bytes``, its documents' BSON as the
server sent them, one after another (``bson.decode_all`` reads it); nothing
is decoded or encoded again.

A getMore the server refuses ends the cursor, as PyMongo's does: it is
closed, with killCursors unless the error says the server no longer has it.

Retries. The opening command is retried as :meth:`greenpool.Client.command`
would retry it (a retryable read, or ``retry=True``), on a connection and an
implicit session taken afresh; a ``getMore`` is retried only after a
retryable overload error (the Client Backpressure spec: the server refused
it unread), never after another error (the Retryable Reads spec: the server
cursor may have moved on).

Rules. A cursor does all its I/O through the
:class:`~greenpool.client.operations.operations.Operations` it is given, with that
class's public methods (lease, send, retry, take and give back an implicit
server session, unpin); it keeps only its own state (buffer, id, pinned
connection, implicit server session). This module never imports
:mod:`greenpool.client.api.client`, not even lazily: the Client builds cursors,
not the other way round.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import gevent
from bson.raw_bson import RawBSONDocument
from pymongo.errors import ConnectionFailure, InvalidOperation, OperationFailure, PyMongoError
from pymongo.read_preferences import _ServerMode

from greenpool.client.config import readpref
from greenpool.client.operations.retries import has_write_stage
from greenpool.client.operations.timeouts import Deadline, check_seconds, resolve
from greenpool.pool.connection import Connection, Purpose
from greenpool.wire.messages import Outgoing
from greenpool.wire.replies import error_code

if TYPE_CHECKING:
    from greenpool.address import Address
    from greenpool.client.operations.operations import Operations, ServerSession
    from greenpool.client.operations.session import Session
    from greenpool.wire.link import Link

__all__ = ["Cursor"]

#: The wire version (MongoDB 5.0) from which $out and $merge run on secondaries.
_WRITE_STAGE_ON_SECONDARIES = 13
#: The wire version (MongoDB 7.1) from which a mongos continues an exhaust stream.
_MONGOS_EXHAUST = 22
# Errors that say the server no longer has the cursor: CursorNotFound,
# QueryPlanKilled, CursorKilled (no killCursors for them).
_CURSOR_GONE = frozenset({43, 175, 237})
#: The CSOT spec's timeoutMode values.
CURSOR_LIFETIME = "cursorLifetime"
ITERATION = "iteration"


class Cursor:
    """The documents of a server-side cursor; see the module's docstring.

    Made by :meth:`greenpool.Client.cursor` and :meth:`greenpool.Client.find`.
    """

    def __init__(self, operations: Operations, dbname: str, command: dict[str, Any], *,
                 batch_size: int | None, session: Session | None,
                 timeout: float | None = None, timeout_mode: str | None = None,
                 read_preference: _ServerMode | None = None,
                 retry: bool | None = None, comment: Any = None,
                 max_await_time_ms: int | None = None, raw_batches: bool = False,
                 exhaust: bool = False) -> None:
        self._operations = operations
        #: Whether the getMores go as an exhaust stream (see the module's docstring).
        self._exhaust = exhaust
        #: The opening command's read preference (getMore and killCursors
        #: carry none).
        self._read_preference = read_preference
        self._db = dbname
        self._session = session
        self._batch_size = batch_size
        #: Documents; or, for raw batches, each batch's bytes.
        self._buffer: deque[Any] = deque()
        self._id = 0
        self._collection = ""
        #: The last reply's ``cursor.postBatchResumeToken`` and the opening
        #: reply's ``operationTime`` (what a change stream resumes from).
        self.post_batch_resume_token: Mapping[str, Any] | None = None
        self.operation_time: Any = None
        #: The server that opened the cursor (set by the opening command).
        self._address: Address | None = None
        #: The connection this cursor is pinned to (load-balanced mode).
        self._conn: Connection[Link] | None = None
        self._user: gevent.Greenlet | None = None
        self._closed = False
        #: The implicit server session (no explicit session): False before
        #: the first command asks for one, None if the server has none.
        self._server_session: ServerSession | bool | None = False
        #: Whether a command of this cursor failed other than by the server's
        #: refusal (network error, kill): its implicit session is not reused.
        self._lsid_dirty = False
        # The implicit server session a failure left dirty (dropped from the
        # pool), which the retry of the opening command still runs in.
        self._dropped: ServerSession | None = None
        #: Whether the buffer holds each batch's BSON bytes, not its documents.
        self._raw_batches = raw_batches
        if raw_batches:
            _decode_raw(command)
        #: The opening command's codec options, which its getMores' replies
        #: decode with too (the collection API's; None: the default).
        self._codec_options = command.codec_options if type(command) is Outgoing else None
        #: What every getMore carries: the comment (given, else the opening
        #: command's) and maxTimeMS for an awaitData wait.
        self._comment = command.get("comment") if comment is None else comment
        self._max_await_ms = max_await_time_ms
        self._tailable = bool(command.get("tailable"))
        deadline = operations.deadline(timeout, session)
        self._mode = _timeout_mode(command, timeout_mode, deadline)
        _check_max_await(max_await_time_ms, deadline)
        #: The deadline of the cursor's lifetime (cursorLifetime mode), or the
        #: one whose limit each next() gets anew (iteration mode).
        self._deadline = deadline
        try:
            self._open(command, deadline, retry)
        except BaseException:
            self._end_implicit_session()
            raise
        if self._id:
            operations.cursor_opened(self)
        else:
            self._end_implicit_session()

    @property
    def id(self) -> int:
        """The server's cursor id; 0 once the server has no more documents."""
        return self._id

    @property
    def address(self) -> Address | None:
        """The ``(host, port)`` of the server holding the cursor (PyMongo's
        ``Cursor.address``); None before the opening command went out."""
        return self._address

    @property
    def session(self) -> Session | None:
        """The explicit session the cursor runs in (None: an implicit one, or none)."""
        return self._session

    @property
    def batch_size(self) -> int | None:
        """Each getMore's batchSize (None: the server's choice)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValueError(f"batch_size must be None or an int >= 0, not {value!r}")
        self._batch_size = value or None

    @property
    def alive(self) -> bool:
        """Whether more documents may come: buffered ones, or a live server cursor."""
        return bool(self._buffer) or (self._id != 0 and not self._closed)

    @property
    def buffered(self) -> int:
        """How many documents are buffered (no round trip needed for them)."""
        return len(self._buffer)

    @property
    def pinned(self) -> bool:
        """Whether the cursor holds a connection of its own (load-balanced mode)."""
        return self._conn is not None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> Any:
        """The next document (for raw batches, the next batch's bytes)."""
        with self._exclusive():
            if not self._buffer and not self._fill():
                raise StopIteration
            return self._buffer.popleft()

    def next_batch(self) -> list[Any]:
        """Every document buffered now, or, with none buffered, the next
        batch from the server; an empty list at the end. One call per batch
        rather than per document: for callers that drain the cursor."""
        with self._exclusive():
            if not self._buffer and not self._fill():
                return []
            batch = list(self._buffer)
            self._buffer.clear()
            return batch

    def poll(self) -> list[Any]:
        """Every document buffered now, or, with none buffered, what one
        getMore brings: perhaps nothing while the cursor stays open (a change
        stream's ``try_next``). An empty list at the end too."""
        with self._exclusive():
            if not self._buffer and self._id != 0 and not self._closed:
                deadline = self._deadline
                if self._mode == ITERATION and deadline is not None:
                    # The limit anew, within an enclosing block's (a change stream's
                    # next() bounds its getMores and its resume together).
                    deadline = resolve(deadline.limit, None)
                self._get_more(deadline)
            batch = list(self._buffer)
            self._buffer.clear()
            return batch

    def _fill(self) -> bool:
        """Fetch batches until one has documents (a tailable cursor: one
        batch); False at the end (the pinned connection released) or when a
        tailable cursor's batch is empty. Buffered documents come back even
        after the time is up; only a getMore needs time (the CSOT spec)."""
        deadline = self._deadline
        fresh = self._mode == ITERATION
        while not self._buffer:
            if self._id == 0 or self._closed:
                self._release()
                return False
            if fresh and deadline is not None:
                # Iteration mode: each call gets the original limit anew, within
                # an enclosing block's (as poll()'s getMore).
                deadline = resolve(deadline.limit, None)
                fresh = False
            self._get_more(deadline)
            if self._tailable:
                return bool(self._buffer)
        return True

    def close(self, *, timeout: float | None = None) -> None:
        """Kill the server cursor if it is still open; release the connection.

        Idempotent. killCursors errors are ignored: the server reaps
        abandoned cursors anyway. Under a time limit killCursors gets the
        cursor's full limit afresh, or ``timeout`` (seconds) if given.
        """
        deadline = self._deadline
        if timeout is not None or deadline is not None:
            limit = check_seconds("timeout", timeout)
            deadline = Deadline.after(limit if limit is not None else
                                      deadline.limit if deadline is not None else 0.0)
        with self._exclusive():
            if self._closed:
                return
            self._closed = True
            self._buffer.clear()
            self._operations.cursor_closed(self)
            try:
                # Mid-stream, no killCursors: the connection cannot carry it, and
                # closing it (_release) ends the server cursor.
                if self._id and not self._streaming and (
                        self._conn is None or self._conn.error is None):
                    with contextlib.suppress(PyMongoError):
                        self._round_trip({"killCursors": self._collection,
                                          "cursors": [self._id]}, None, deadline)
            finally:
                self._id = 0
                self._release()
                self._end_implicit_session()

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._closed or (self._id == 0 and self._conn is None):
            return
        conn, self._conn = self._conn, None
        if conn is not None and conn.transport is not None and conn.transport.more_to_come:
            # An exhaust stream still coming: _reap closes the connection
            # instead of sending killCursors on it.
            conn.mark_errored(_mid_stream(self))
        server_session = self._server_session
        implicit = None if isinstance(server_session, bool | None) else server_session
        lsid = self._session.lsid if self._session is not None else (
            implicit.lsid if implicit is not None else None)
        if conn is not None or not self._operations.closed:
            # Even for a closed client: the pinned connection must be checked in.
            gevent.spawn(_reap, self._operations, self._db, self._collection, self._id, conn,
                         lsid, implicit if not self._lsid_dirty else None, self._address)

    def __repr__(self) -> str:
        return (f"<greenpool.Cursor {self._db}.{self._collection} id={self._id}"
                f"{' pinned' if self._conn is not None else ''}"
                f"{' closed' if self._closed else ''}>")

    # -- internals ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        current = gevent.getcurrent()
        if self._user is not None and self._user is not current:
            raise InvalidOperation(
                f"{self!r} is in use by another greenlet; a cursor serves one greenlet "
                f"at a time")
        outer = self._user is None
        self._user = current
        try:
            yield
        finally:
            if outer:
                self._user = None

    def _open(self, command: dict[str, Any], deadline: Deadline | None,
              retry: bool | None) -> None:
        """Run the opening command, retried as the Retryable Reads spec says."""
        # maxTimeMS only where the limit covers the server's whole work, or
        # bounds an awaitData cursor's first batch (the CSOT spec).
        max_time = self._mode == CURSOR_LIFETIME or bool(command.get("awaitData")) or (
            self._mode == ITERATION and _opens_change_stream(command))
        try:
            self._round_trip(command, "firstBatch", deadline, max_time=max_time)
        except PyMongoError as error:
            self._operations.retry_read(
                error, lambda: self._retry_open(command, deadline, max_time),
                command, self._session, deadline, retry)

    def _retry_open(self, command: dict[str, Any], deadline: Deadline | None,
                    max_time: bool) -> None:
        # A new attempt: in the implicit session of the failed one if that left it
        # dirty (the Sessions spec's retry re-uses it, and it is dropped after),
        # else in one taken afresh (the last one goes back to the pool).
        self._end_implicit_session()
        dropped, self._dropped = self._dropped, None
        if dropped is not None:
            self._server_session, self._lsid_dirty = dropped, True
        else:
            self._server_session, self._lsid_dirty = False, False
        self._round_trip(command, "firstBatch", deadline, max_time=max_time)

    def _get_more(self, deadline: Deadline | None) -> None:
        """One getMore (for an exhaust cursor mid-stream, the next reply read)."""
        command: dict[str, Any] = {"getMore": self._id, "collection": self._collection}
        if self._codec_options is not None:
            command = Outgoing(command)
            command.codec_options = self._codec_options
        if self._batch_size:
            command["batchSize"] = self._batch_size
        if self._max_await_ms is not None:
            command["maxTimeMS"] = self._await_ms(deadline)
        if self._comment is not None:
            command["comment"] = self._comment
        try:
            self._more(command, deadline)
        except BaseException as error:
            if not (self._exhaust and self._stream_failed(error)):
                self._get_more_failed(error, deadline)
            raise
        if self._id == 0:
            self._release()
            self._end_implicit_session()

    def _get_more_failed(self, error: BaseException, deadline: Deadline | None) -> None:
        """What a failed getMore leaves of the cursor (the error is re-raised)."""
        if isinstance(error, OperationFailure):
            if error.timeout:
                return
            if error_code(error) in _CURSOR_GONE:
                self._id = 0
            if self._conn is None:
                # Refused: the cursor ends here, as PyMongo's does; close()
                # kills it on the server unless the error says the server has.
                self.close()
            # A pinned connection stays pinned until the caller closes the
            # cursor, which kills it over that connection (Load Balancer spec).
        elif isinstance(error, ConnectionFailure):
            if error.timeout and deadline is not None and self._conn is None:
                # Out of time: the server cursor still lives, and close()
                # kills it over another connection (the CSOT spec's close).
                self._lsid_dirty = True
                return
            # The server cursor is unreachable now: close must not try to
            # kill it, and a pinned connection stays pinned until close.
            self._id = 0
            self._end_implicit_session()

    def _stream_failed(self, error: BaseException) -> bool:
        """An exhaust cursor's getMore failed (or was killed) on its
        connection: True if that ended the cursor, as PyMongo's ends. It ends
        when replies may still be coming (the connection is closed: nothing
        else can use it) or the server refused the getMore (no killCursors;
        the connection, clean, checked in). Otherwise (nothing sent yet: out
        of time, a kill before the send) the cursor stays as a pinned one
        does. Nothing here yields while a kill propagates."""
        conn = self._conn
        if conn is None:
            return False
        link = conn.transport
        streaming = conn.error is not None or link is None or link.more_to_come
        if not (streaming or isinstance(error, OperationFailure)):
            return False
        if streaming:
            conn.mark_errored(error)
        self._conn, self._id, self._closed = None, 0, True
        self._buffer.clear()
        self._operations.cursor_closed(self)
        if isinstance(error, Exception):
            self._operations.unpin(conn)
        else:
            conn.pool.checkin_after_error(conn)  # a kill: its events later
        self._end_implicit_session()
        return True

    def _await_ms(self, deadline: Deadline | None) -> int:
        """An awaitData getMore's maxTimeMS: max_await_time_ms, within the
        time left less the cursor's server's minimum round trip (the CSOT spec)."""
        assert self._max_await_ms is not None
        if deadline is None or not deadline.bounded:
            return self._max_await_ms
        left = deadline.max_time_ms(self._operations.min_round_trip(self._address))
        return min(self._max_await_ms, left)

    def _more(self, command: dict[str, Any], deadline: Deadline | None) -> None:
        """The getMore round trip, retried only after retryable overload errors
        (Client Backpressure); never a reply read off an exhaust stream, which
        no request of ours asked for (as PyMongo)."""
        def again() -> None:
            # Never maxTimeMS on a getMore: the server reads it as the wait
            # of an awaitData cursor, or refuses it (CSOT spec).
            self._round_trip(command, "nextBatch", deadline, max_time=False)

        received = self._streaming
        try:
            again()
        except PyMongoError as error:
            if received:
                raise
            self._operations.retry_overloaded(error, again, command, deadline)

    @property
    def _streaming(self) -> bool:
        """Whether the server is still streaming this exhaust cursor's replies
        to its connection (the next one is read, nothing sent)."""
        conn = self._conn
        link = None if conn is None else conn.transport
        return link is not None and link.more_to_come

    def _read(self, reply: Mapping[str, Any], field: str) -> None:
        cursor = reply.get("cursor")
        if not isinstance(cursor, Mapping) or not isinstance(cursor.get(field), list):
            raise InvalidOperation(f"the server's reply has no cursor.{field}: {reply!r}")
        cursor_id = cursor.get("id", 0)
        if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
            raise InvalidOperation(f"the server's reply has a cursor id that is not an integer: "
                                   f"{cursor_id!r}")
        self._id = cursor_id
        self.post_batch_resume_token = cursor.get("postBatchResumeToken")
        if field == "firstBatch":
            self.operation_time = reply.get("operationTime")
        namespace = cursor.get("ns")
        if isinstance(namespace, str) and "." in namespace:
            self._db, self._collection = namespace.split(".", 1)
        if not self._raw_batches:
            self._buffer.extend(cursor[field])
        elif cursor[field]:
            # The documents' bytes as the server sent them (RawBSONDocument
            # slices of the reply), one stream per batch; an empty batch is
            # not one, as in PyMongo's raw batch cursors.
            self._buffer.append(b"".join(document.raw for document in cursor[field]))

    def _round_trip(self, command: dict[str, Any], batch: str | None = None,
                    deadline: Deadline | None = None, *, max_time: bool = True) -> None:
        """Send ``command``; read the reply's ``batch`` (firstBatch,
        nextBatch) before the connection is released or kept for pinning."""
        try:
            self._send(command, batch, deadline, max_time)
        except OperationFailure:
            raise  # the server answered: the session is fine
        except BaseException:
            self._lsid_dirty = True
            raise

    def _send(self, command: dict[str, Any], batch: str | None, deadline: Deadline | None,
              max_time: bool) -> None:
        ops, session = self._operations, self._session
        if session is not None:
            session.decorate(command)
        if self._conn is not None:
            self._attach_lsid(command)
            reply = ops.send(self._conn, self._db, command, session, deadline, max_time,
                             self._exhaust and batch == "nextBatch")
            if batch is not None:
                self._read(reply, batch)
            return
        opening = batch == "firstBatch"
        preference = (self._read_preference if opening and self._read_preference is not None
                      else readpref.PRIMARY)
        with ops.lease(session, Purpose.CURSOR, keep=self._keep, deadline=deadline,
                       preference=preference,
                       address=None if opening else self._address) as conn:
            self._attach_lsid(command)
            if opening:
                self._address = conn.address
                if self._exhaust:
                    _check_exhaust_supported(conn)
                if self._read_preference is not None:
                    preference = _opening_preference(self._read_preference, command, conn,
                                                     ops.load_balanced)
                    ops.add_read_preference(command, preference, session, conn)
            reply = ops.send(conn, self._db, command, session, deadline, max_time)
            if batch is not None:
                self._read(reply, batch)

    def _attach_lsid(self, command: dict[str, Any]) -> None:
        """Without an explicit session, every command of the cursor runs in
        one implicit session, taken (after server selection) by the first."""
        if self._session is not None:
            return
        if self._server_session is False:
            self._server_session = self._operations.take_server_session()
        if not isinstance(self._server_session, bool | None):
            command["lsid"] = self._server_session.lsid

    def _end_implicit_session(self) -> None:
        server_session, self._server_session = self._server_session, None
        if not isinstance(server_session, bool | None):
            self._operations.give_server_session(server_session, self._lsid_dirty)
            if self._lsid_dirty:
                self._dropped = server_session

    def _keep(self, conn: Connection[Link]) -> bool:
        """Pin ``conn`` (in load-balanced mode, or for an exhaust cursor,
        while the server cursor lives)."""
        if (not (self._operations.load_balanced or self._exhaust) or self._id == 0
                or self._closed or conn.error is not None):
            return False
        self._conn = conn
        return True

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            link = conn.transport
            if link is not None and link.more_to_come:
                # Replies still coming (closed mid-stream, or a server that
                # ended the cursor but not its stream): nothing else may use it.
                conn.mark_errored(_mid_stream(self))
            self._operations.unpin(conn)


def _timeout_mode(command: Mapping[str, Any], mode: str | None,
                  deadline: Deadline | None) -> str:
    """The cursor's timeoutMode, checked as the CSOT spec requires."""
    tailable = bool(command.get("tailable"))
    if mode is None:
        return ITERATION if tailable else CURSOR_LIFETIME
    if mode not in (CURSOR_LIFETIME, ITERATION):
        raise ValueError(f"timeout_mode must be {CURSOR_LIFETIME!r} or {ITERATION!r}, "
                         f"not {mode!r}")
    if deadline is None:
        raise InvalidOperation(f"timeout_mode={mode!r} needs a time limit (timeout= or "
                               f"timeoutMS)")
    if tailable and mode == CURSOR_LIFETIME:
        raise InvalidOperation("a tailable cursor only supports timeout_mode='iteration'")
    if mode == ITERATION and has_write_stage(command):
        raise InvalidOperation("timeout_mode='iteration' cannot bound an aggregate with "
                               "$out or $merge")
    return mode


def _mid_stream(cursor: Cursor) -> InvalidOperation:
    """Why an exhaust cursor's connection is closed, not reused (its error)."""
    return InvalidOperation(f"{cursor!r} ended while the server was still streaming its "
                            "replies: the connection cannot be reused")


def _check_exhaust_supported(conn: Connection[Link]) -> None:
    """Refuse an exhaust cursor on a mongos older than MongoDB 7.1, which
    cannot continue the stream (PyMongo's rule and words; a load balancer's
    mongos is not refused: its cursors are pinned anyway)."""
    link = conn.transport
    hello = None if link is None else link.hello
    if (link is not None and hello is not None and hello.get("msg") == "isdbgrid"
            and link.service_id is None and link.max_wire_version < _MONGOS_EXHAUST):
        raise InvalidOperation("Exhaust cursors require MongoDB 7.1+ when connected to mongos.")


def _decode_raw(command: dict[str, Any]) -> None:
    """Have the replies to ``command`` and its getMores decode as
    RawBSONDocument, whose documents are slices of the reply's bytes (the
    command itself still encodes with the collection's codec options)."""
    if type(command) is not Outgoing:
        raise TypeError("a cursor of raw batches needs an Outgoing command")
    command.codec_options = command.codec_options.with_options(document_class=RawBSONDocument)


def _opens_change_stream(command: Mapping[str, Any]) -> bool:
    """Whether ``command`` is a change stream's aggregate (which, like an awaitData
    cursor's opening, is bounded by maxTimeMS in iteration mode: the CSOT spec)."""
    pipeline = command.get("pipeline")
    return (isinstance(pipeline, list) and bool(pipeline) and isinstance(pipeline[0], Mapping)
            and "$changeStream" in pipeline[0])


def _opening_preference(preference: _ServerMode, command: Mapping[str, Any],
                        conn: Connection[Link], load_balanced: bool) -> _ServerMode:
    """The read preference the opening command carries: the cursor's, but
    primary for an aggregate with ``$out`` or ``$merge`` on a server older
    than MongoDB 5.0 (wire version 13), where such a pipeline runs on the
    primary only (the CRUD spec's "Read preferences and server selection";
    behind a load balancer the spec assumes 5.0)."""
    if (preference.mode != readpref.PRIMARY.mode and not load_balanced
            and conn.transport is not None
            and conn.transport.max_wire_version < _WRITE_STAGE_ON_SECONDARIES
            and has_write_stage(command)):
        return readpref.PRIMARY
    return preference


def _check_max_await(max_await_ms: int | None, deadline: Deadline | None) -> None:
    """Refuse a wait for new data as long as the time limit, or longer (the
    CSOT spec): the client would give up before the server answered."""
    if max_await_ms is None:
        return
    if isinstance(max_await_ms, bool) or not isinstance(max_await_ms, int) or max_await_ms < 0:
        raise ValueError(f"max_await_time_ms must be an int >= 0, not {max_await_ms!r}")
    if deadline is not None and deadline.bounded and max_await_ms >= deadline.limit * 1000:
        raise InvalidOperation(
            f"max_await_time_ms={max_await_ms} must be less than the time limit of "
            f"{deadline.limit * 1000:g} ms (timeoutMS): the wait would outlast it")


def _reap(ops: Operations, db: str, collection: str, cursor_id: int,
          conn: Connection[Link] | None, lsid: dict[str, Any] | None,
          give_back: ServerSession | None, address: Address | None) -> None:
    """Close an abandoned cursor: killCursors in the cursor's session (its
    implicit server session, ``give_back``, goes back to the pool afterwards
    unless it was left dirty), then check its connection in."""
    command: dict[str, Any] = {"killCursors": collection, "cursors": [cursor_id]}
    if lsid is not None:
        command["lsid"] = lsid
    dirty = False
    try:
        if cursor_id and not ops.closed and (conn is None or conn.error is None):
            try:
                if conn is not None:
                    ops.send(conn, db, command, None)
                else:
                    with ops.lease(None, Purpose.CURSOR, address=address) as leased:
                        ops.send(leased, db, command, None)
            except ConnectionFailure:
                dirty = True
            except PyMongoError:
                pass  # the server reaps abandoned cursors anyway
    finally:
        if conn is not None:
            ops.unpin(conn)
        if give_back is not None:
            ops.give_server_session(give_back, dirty)
