"""What every operation of a Client shares: leasing, sending, server sessions, pinning.

One :class:`Operations` per :class:`~greenpool.Client`. The Client, its cursors
and its sessions all run their commands through it, with its public methods:

* leasing a connection for a purpose (:meth:`~Operations.checkout`,
  :meth:`~Operations.lease`): server selection by the operation's read
  preference (or the server a cursor or a transaction is bound to) and
  checkout from that server's pool, under the operation's deadline if it has
  one; each connection goes back to the pool it came from;
* sending a command on it (:meth:`~Operations.send`): command events, the
  timeoutMS rules (maxTimeMS, the round trip's time limit), the cluster time
  (``$clusterTime`` sent and taken from replies, the Sessions spec's gossip),
  SDAM's verdict on errors (for the server the connection came from), and the
  transaction labels the Transactions spec adds;
* running a command with the retries the Retryable Reads and Writes specs
  allow (:meth:`~Operations.run_command`, :meth:`~Operations.retry_read`;
  :mod:`greenpool.client.operations.retries` decides what is retried): the first attempt
  costs nothing more than before, a retryable write's transaction ID aside;
* lending and taking back implicit server sessions
  (:meth:`~Operations.take_server_session`, :meth:`~Operations.give_server_session`,
  both around one command in :meth:`~Operations.send_in_implicit_session`), each with
  the transaction number its retryable writes reached, ending them all with
  ``endSessions`` at close;
* pinning connections to load-balanced transactions and cursors, and
  unpinning them (:meth:`~Operations.unpin`); pinning a sharded transaction to
  the mongos its first command went to;
* the open cursors and explicit sessions, closed and ended by :meth:`~Operations.close`.

Rules. This module sits below ``client.py``, ``cursor.py`` and ``session.py``,
which import it; it imports none of them, so it sees a session only as the
:class:`SessionLike` protocol and a cursor as something with ``close()``. It
checks no user arguments (the Client does, before an operation starts) and
holds no socket code (the wire layer's :class:`~greenpool.wire.link.Link` does
the I/O). ``Client.command`` and ``send`` are the hot path: keep them free of
extra calls and context managers.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import gevent
from bson.binary import UUID_SUBTYPE, Binary
from bson.int64 import Int64
from pymongo.errors import (
    ConnectionFailure,
    InvalidOperation,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
    WriteConcernError,
)
from pymongo.read_preferences import _ServerMode
from pymongo.server_description import ServerDescription
from pymongo.topology_description import TOPOLOGY_TYPE

from greenpool._compiled import mypyc_attr
from greenpool.address import Address
from greenpool.client.config import readpref
from greenpool.client.config.settings import DEFAULT_MAX_ADAPTIVE_RETRIES
from greenpool.client.operations import commandlog, retries
from greenpool.client.operations.commands import CommandPublisher, is_sensitive
from greenpool.client.operations.timeouts import Deadline, check_seconds, resolve, running
from greenpool.client.topology.sdam import Phase
from greenpool.client.topology.server import Server
from greenpool.client.topology.topology import Topology
from greenpool.pool.connection import Connection, Purpose
from greenpool.wire.messages import next_request_id

if TYPE_CHECKING:
    from greenpool.wire.link import Link

__all__ = ["Operations", "ServerSession", "SessionLike"]

R = TypeVar("R")

# endSessions takes at most this many ids per command (Sessions spec).
_END_SESSIONS_BATCH = 10_000
# The round-trip timeout that stands for none (about 30 years).
_NO_ROUND_TRIP_LIMIT = 1e9
# A commit or abort is the end of a transaction, never a transient part of it.
_FINISHING = frozenset({"commitTransaction", "abortTransaction"})
# A limit that stands for none (retries under a timeoutMS deadline).
_UNLIMITED = 1 << 62
# Where endSessions goes: any server that has sessions.
_ANY_SERVER = readpref.make("primaryPreferred")


class SessionLike(Protocol):
    """What operations need of an explicit session
    (:class:`~greenpool.client.operations.session.Session` is the one there is)."""

    #: Set when a command in the session failed without the server's answer.
    dirty: bool
    #: The connection a load-balanced transaction is pinned to.
    pinned: Connection[Link] | None
    #: The mongos a sharded transaction is pinned to.
    pinned_address: Address | None

    @property
    def lsid(self) -> dict[str, Any]: ...

    @property
    def server_session(self) -> ServerSession:
        """The server session (from the pool) the session's lsid is."""

    @property
    def cluster_time(self) -> Mapping[str, Any] | None:
        """The highest $clusterTime this session has seen."""

    def advance_cluster_time(self, cluster_time: Mapping[str, Any]) -> None:
        """A reply in this session carried ``cluster_time``."""

    @property
    def in_transaction(self) -> bool: ...

    @property
    def deadline(self) -> Deadline | None:
        """The deadline every operation in the session shares, if any."""

    def sending(self, command: MutableMapping[str, Any]) -> None:
        """``command`` is about to go out in this session."""

    def received(self, reply: Mapping[str, Any]) -> None:
        """A reply (or a refusal's) to a command in this session came in."""

    def next_txn_number(self) -> int:
        """A transaction number not used before in this session (for a
        retryable write)."""

    def forget_pin_after(self, error: PyMongoError) -> None:
        """Unpin if ``error`` lets the transaction be retried elsewhere."""

    def not_started(self) -> None:
        """The transaction's first command was refused as overloaded: the next
        attempt starts the transaction."""

    def end(self) -> None: ...


class _Closable(Protocol):
    def close(self) -> None: ...


class ServerSession:
    """One server session of the implicit-session pool (Sessions spec): its
    ``lsid`` document, when it was last given back, the last transaction
    number a retryable write used in it (kept across uses: the server refuses
    a number it has seen in that session), and whether a command in it failed
    so that the server may still hold it busy (then it is never lent again)."""

    __slots__ = ("dirty", "last_used", "lsid", "txn_number")

    def __init__(self) -> None:
        self.lsid: dict[str, Any] = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
        self.last_used = 0.0
        self.txn_number = 0
        self.dirty = False


# Compiled, it still takes the Python subclass that traces (client.operations.traced).
@mypyc_attr(allow_interpreted_subclasses=True)
class Operations:
    """The machinery a Client's operations share; see the module's docstring."""

    def __init__(self, topology: Topology, commands: CommandPublisher, *,
                 timeout: float | None, retry_reads: bool, retry_writes: bool,
                 max_adaptive_retries: int = DEFAULT_MAX_ADAPTIVE_RETRIES,
                 server_api: Mapping[str, Any] | None = None) -> None:
        self.topology = topology
        self.load_balanced = topology.load_balanced
        #: timeoutMS (seconds; None: not set, 0: no limit).
        self.timeout = timeout
        #: retryReads: whether retryable reads are retried.
        self.retry_reads = retry_reads
        #: retryWrites: whether retryable writes (and commit and abort) are retried.
        self.retry_writes = retry_writes
        #: maxAdaptiveRetries: the most retries of an operation once the server
        #: said it is overloaded (Client Backpressure).
        self.max_adaptive_retries = max_adaptive_retries
        #: The backoff's jitter, from [0, 1) (Client Backpressure).
        self.jitter: Callable[[], float] = random.random
        #: The Stable API's fields (apiVersion...), sent with every command
        #: (the Versioned API spec: getMore and a transaction's commands too);
        #: None: no API version declared.
        self.server_api = dict(server_api) if server_api else None
        self._commands = commands
        self._sessions: set[SessionLike] = set()
        self._ended_lsids: list[dict[str, Any]] = []
        self._cursors: weakref.WeakSet[_Closable] = weakref.WeakSet()
        # Idle implicit server sessions, most recently used last.
        self._server_sessions: list[ServerSession] = []
        self._closed = False
        self._closing = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has finished: checkouts are refused."""
        return self._closed

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` has begun (or finished): new work is refused."""
        return self._closing

    def min_round_trip(self, address: Address | None) -> float:
        """The minimum round-trip time in seconds of the server at ``address``
        (0 for one the topology no longer has), which a maxTimeMS computed from a
        deadline leaves out (the CSOT spec)."""
        server = None if address is None else self.topology.servers.get(address)
        return 0.0 if server is None else server.min_round_trip.value

    def check_open(self) -> None:
        """Refuse new work once closing has begun."""
        if self._closing:
            raise InvalidOperation("the greenpool Client is closed")

    def deadline(self, timeout: float | None, session: SessionLike | None) -> Deadline | None:
        """The deadline of an operation starting now (see greenpool.client.operations.timeouts)."""
        if timeout is None and session is None:
            return resolve(None, self.timeout)  # the common case, in one call
        call = check_seconds("timeout", timeout)
        shared = session.deadline if session is not None else None
        if shared is not None:
            # Inside with_transaction the session carries the one deadline.
            if call is not None:
                raise InvalidOperation(
                    f"timeout={timeout!r} cannot be given to an operation in a "
                    f"with_transaction callback whose session has a time limit")
            return shared
        return resolve(call, self.timeout)

    # -- leasing --------------------------------------------------------------------------

    def checkout(self, purpose: Purpose, deadline: Deadline | None = None,
                 preference: _ServerMode = readpref.PRIMARY,
                 address: Address | None = None) -> Connection[Link]:
        """A connection for ``purpose`` from the server selected for
        ``preference`` (or the server at ``address``); check it in with
        ``conn.pool.checkin`` (or use :meth:`lease`, which also handles
        transactions)."""
        if self._closed:
            raise InvalidOperation("the greenpool Client is closed")
        pool = self.select_server(deadline, preference, address).pool
        if deadline is not None:
            # Establishment too, through the Client's connector, which reads
            # the deadline this sets running.
            with running(deadline):
                # The CSOT spec: under timeoutMS the deprecated waitQueueTimeoutMS
                # is ignored; the wait gets what is left of the selection's limit.
                conn = pool.checkout(deadline.bound(None), replaces_wait_queue_timeout=True)
        else:
            conn = pool.checkout()
        conn.purpose = purpose
        return conn

    def select(self, deadline: Deadline | None = None,
               preference: _ServerMode = readpref.PRIMARY) -> ServerDescription:
        """Server selection alone: the description of the server selected for
        ``preference``, within the deadline if there is one (the CSOT spec's
        computedServerSelectionTimeout)."""
        return self.select_server(deadline, preference).description

    def select_server(self, deadline: Deadline | None = None,
                      preference: _ServerMode = readpref.PRIMARY,
                      address: Address | None = None) -> Server:
        """:meth:`select`, giving the :class:`~greenpool.client.topology.server.Server`
        (the one at ``address``, if given)."""
        topology = self.topology
        if address is not None:
            return topology.select_address(address)
        if self._closing:
            # Goodbyes (killCursors, abort, endSessions) never wait for an
            # unreachable server.
            return topology.select(preference, 0)
        if deadline is None:
            return topology.select(preference)
        return topology.select(preference, deadline.bound(topology.server_selection_timeout))

    @contextlib.contextmanager
    def lease(self, session: SessionLike | None, purpose: Purpose,
              keep: Callable[[Connection[Link]], bool] | None = None, name: str = "",
              deadline: Deadline | None = None, preference: _ServerMode = readpref.PRIMARY,
              address: Address | None = None) -> Iterator[Connection[Link]]:
        """A connection for one operation: a transaction's pinned one, or one
        checked out now (from the server selected for ``preference``, or the
        one at ``address``, or a sharded transaction's mongos) and checked in
        afterwards. In load-balanced mode a transaction's first command pins
        its connection to the session, on a sharded cluster its mongos;
        ``keep(conn)``, called after a successful operation, may pin it to
        something else (a cursor) by returning True. ``name`` is the
        command's, for the labels of a failed checkout in a transaction."""
        if session is not None and session.pinned is not None:
            yield session.pinned
            return
        in_transaction = session is not None and session.in_transaction
        if in_transaction and address is None:
            assert session is not None
            address = session.pinned_address
        try:
            conn = self.checkout(Purpose.TRANSACTION if in_transaction else purpose, deadline,
                                 preference, address)
        except PyMongoError as error:
            # No connection (selection, wait queue, cleared pool): inside a
            # transaction that is as transient as a network error.
            _transaction_error(session, name, error)
            raise
        pinned = False
        try:
            yield conn
            pinned = self._pin_to_transaction(session, conn) or (
                keep is not None and keep(conn))
        except BaseException as error:
            # A transaction stays pinned after a refused command, unless the
            # error says the transaction may be retried (elsewhere).
            if isinstance(error, PyMongoError) and not (
                    error.has_error_label("TransientTransactionError")
                    or error.has_error_label("UnknownTransactionCommitResult")):
                pinned = self._pin_to_transaction(session, conn)
            if pinned:
                conn.pinned = True
            elif isinstance(error, Exception):
                conn.pool.checkin(conn)  # its events before the error reaches the caller
            else:
                # A kill: its events later, from a new greenlet. A listener
                # that yields here could let the greenlet's own
                # gevent.Timeout fire and replace the kill.
                conn.pool.checkin_after_error(conn)
            raise
        if pinned:
            conn.pinned = True  # its holder's report says so until unpin
        else:
            conn.pool.checkin(conn)

    # -- pinning --------------------------------------------------------------------------

    def _pin_to_transaction(self, session: SessionLike | None, conn: Connection[Link]) -> bool:
        """Pin a transaction (Transactions spec): in load-balanced mode to
        ``conn`` (True: keep it checked out), on a sharded cluster to its mongos."""
        if session is None or not session.in_transaction:
            return False
        if not self.load_balanced:
            if (session.pinned_address is None
                    and self.topology.description.topology_type == TOPOLOGY_TYPE.Sharded):
                session.pinned_address = conn.address
            return False
        if conn.error is not None:
            return False
        session.pinned = conn
        return True

    def unpin(self, conn: Connection[Link]) -> None:
        """Check in a connection a session or a cursor was pinned to."""
        conn.pool.checkin(conn)

    # -- sending --------------------------------------------------------------------------

    def add_read_preference(self, document: dict[str, Any], preference: _ServerMode,
                            session: SessionLike | None, conn: Connection[Link]) -> None:
        """Add ``$readPreference`` to a read command about to go out on
        ``conn``, where the Server Selection spec says (after selection: it
        depends on the type of the server ``conn`` came from); a write
        (:data:`readpref.WRITE <greenpool.client.config.readpref.WRITE>`) carries none."""
        server = self.topology.server_of(conn)
        if server is not None:
            self._add_read_preference(document, preference, session, server)

    def _add_read_preference(self, document: dict[str, Any], preference: _ServerMode,
                             session: SessionLike | None, server: Server) -> None:
        if preference is readpref.WRITE or (
                preference is readpref.PRIMARY and server.plain_primary_reads):
            return  # the common cases, ahead of command_field's general one
        field = readpref.command_field(
            preference, load_balanced=self.load_balanced,
            server_type=server.description.server_type, direct=self.topology.direct,
            in_transaction=session is not None and session.in_transaction)
        if field is not None:
            document["$readPreference"] = field

    def send(self, conn: Connection[Link], dbname: str, command: dict[str, Any],
             session: SessionLike | None, deadline: Deadline | None = None,
             max_time: bool = True, exhaust: bool = False) -> dict[str, Any]:
        """One round trip on ``conn`` with command events; errors go through SDAM.

        Under a ``deadline`` the round trip gets the time left, and
        ``maxTimeMS`` is added if ``max_time``; with too little time left
        nothing is sent (the caller checks the connection back in).

        ``exhaust`` (an exhaust cursor's getMore): the command goes with
        exhaustAllowed, so the server may stream its replies (moreToCome);
        while the link says more are coming, nothing is sent and the next
        reply is read instead, ``command`` standing for it in the events
        (request id 0, as PyMongo publishes such a getMore)."""
        link = conn.transport
        assert link is not None  # a checked-out connection is established
        round_trip: float | None = None
        if deadline is not None and deadline.bounded:
            # One reading of the clock: what is checked is what is used.
            left = deadline.remaining()
            if max_time:
                server = self.topology.server_of(conn)
                command["maxTimeMS"] = deadline.max_time_ms(
                    server.min_round_trip.value if server is not None else 0.0, left)
            elif left <= 0:
                raise deadline.exceeded(f"no time left for {next(iter(command))}")
            round_trip = left
        elif deadline is not None:
            # timeoutMS=0: no limit, and socketTimeoutMS no longer applies
            # (the link's None would mean socketTimeoutMS).
            round_trip = _NO_ROUND_TRIP_LIMIT
        cluster_time = self.topology.cluster_time
        if session is not None:
            session.sending(command)
            cluster_time = _later(cluster_time, session.cluster_time)
        if cluster_time is not None:
            command["$clusterTime"] = cluster_time
        api = self.server_api
        if api is not None:
            command.update(api)
        events = self._commands
        if not events.listeners and not commandlog.enabled():
            # The hot path: no command events or messages, so no request ID or clock
            # of our own.
            try:
                reply = (link.command(dbname, command, timeout=round_trip) if not exhaust
                         else _exhaust_exchange(link, dbname, command, None, round_trip))
            except PyMongoError as error:
                self._failed(error, conn, session, command)
                raise
            except BaseException as error:
                # Not a refusal nor a network error (a bug, an unencodable
                # document, a kill): whatever the connection's state, it is not
                # known to be clean, so checkin closes it.
                conn.mark_errored(error)
                _killed_in(session, error)
                raise
            if "$clusterTime" in reply:
                self._gossip(reply, session)
            if session is not None:
                session.received(reply)
            return reply
        return self._send_with_events(conn, link, dbname, command, session, round_trip, exhaust)

    def _gossip(self, reply: Mapping[str, Any], session: SessionLike | None) -> None:
        """A reply's ``$clusterTime`` advances the client's and the session's
        (one that is not a well-formed cluster time is not kept)."""
        cluster_time = reply["$clusterTime"]
        if self.topology.advance_cluster_time(cluster_time) and session is not None:
            session.advance_cluster_time(cluster_time)

    def _failed(self, error: PyMongoError, conn: Connection[Link],
                session: SessionLike | None, command: Mapping[str, Any]) -> None:
        """A round trip failed with ``error``: gossip a refusal's cluster time,
        apply SDAM's rules, tell the session (its operationTime, a transaction's
        labels)."""
        details = getattr(error, "details", None)
        if isinstance(details, Mapping) and "$clusterTime" in details:
            self._gossip(details, session)
        self.topology.handle_error(error, Phase.OPERATION, conn)
        if session is not None and not isinstance(error, OperationFailure | NotPrimaryError):
            session.dirty = True  # no answer: the server may still hold the session busy
        _session_error(session, command, error)

    def _send_with_events(self, conn: Connection[Link], link: Link, dbname: str,
                          command: dict[str, Any], session: SessionLike | None,
                          round_trip: float | None, exhaust: bool = False) -> dict[str, Any]:
        """:meth:`send`'s round trip with command started / succeeded / failed events."""
        name = next(iter(command))
        # A reply read off an exhaust stream answers no request of its own.
        request_id = 0 if exhaust and link.more_to_come else next_request_id()
        events = self._commands
        service_id, server_id = conn.service_id, link.server_connection_id
        address = conn.address
        log = commandlog.Where(self.topology.topology_id, name, dbname, request_id, conn.id,
                               server_id, address, service_id) if commandlog.enabled() else None
        events.started(command, dbname, request_id, address, service_id, server_id, log)
        started = time.perf_counter()
        try:
            reply = (link.command(dbname, command, request_id=request_id, timeout=round_trip)
                     if not exhaust else
                     _exhaust_exchange(link, dbname, command, request_id, round_trip))
        except PyMongoError as error:
            seconds = time.perf_counter() - started
            answered = getattr(command, "reply", None)
            if isinstance(error, WriteConcernError) and answered is not None:
                # The command succeeded (ok: 1) with a writeConcernError, which is
                # raised after its reply is published, as PyMongo's events have it.
                events.succeeded(seconds, answered, name, dbname, request_id, address,
                                 service_id, server_id, log)
            else:
                events.failed(seconds, error, command, dbname, request_id, address,
                              service_id, server_id, log)
            self._failed(error, conn, session, command)
            raise
        except BaseException as error:
            conn.mark_errored(error)  # as in send
            _killed_in(session, error)
            if isinstance(error, Exception):
                events.failed(time.perf_counter() - started, error, command, dbname,
                              request_id, address, service_id, server_id, log)
            raise
        if "$clusterTime" in reply:
            self._gossip(reply, session)
        # A redacted command's reply is redacted too (a hello's carries no
        # speculativeAuthenticate when the server skipped it).
        events.succeeded(time.perf_counter() - started,
                         {} if is_sensitive(name, command) else reply, name, dbname, request_id,
                         address, service_id, server_id, log)
        if session is not None:
            session.received(reply)
        return reply

    def run_in_session(self, session: SessionLike, dbname: str, command: dict[str, Any],
                       deadline: Deadline | None = None) -> None:
        """Run a command a session built itself (commit, abort); its errors
        get the RetryableWriteError label where the Retryable Writes spec
        says, for the session to decide (commit and abort are retried whatever
        retryWrites says: the Transactions spec)."""
        if self._closed:
            raise InvalidOperation("the greenpool Client is closed")
        try:
            self._finish_once(session, dbname, command, deadline)
        except PyMongoError as error:
            # An overloaded server's refusal is retried after a backoff, the same
            # command again (Client Backpressure); any other retry is the session's.
            if not retries.is_retryable_overload(error):
                raise
            self._retry(error, lambda: self._finish_once(session, dbname, command, deadline),
                        retries.is_retryable_overload, deadline)

    def _finish_once(self, session: SessionLike, dbname: str, command: dict[str, Any],
                     deadline: Deadline | None) -> None:
        wire_version: int | None = None
        try:
            with self.lease(session, Purpose.TRANSACTION, name=next(iter(command)),
                            deadline=deadline) as conn:
                assert conn.transport is not None
                wire_version = conn.transport.max_wire_version
                self.send(conn, dbname, command, session, deadline)
        except PyMongoError as error:
            retries.label_write_error(error, wire_version)
            raise

    # -- running a command, with retries (Retryable Reads and Writes specs) ------------------

    def run_command(self, dbname: str, command: dict[str, Any], session: SessionLike | None,
                    deadline: Deadline | None, preference: _ServerMode,
                    retry: bool | None = None,
                    keep: Callable[[Connection[Link]], bool] | None = None) -> dict[str, Any]:
        """Run ``command`` (Client.command's work) and return the reply: one
        attempt, then the retries :mod:`greenpool.client.operations.retries` allows
        (``retry``: the caller's override, None to classify by name). A
        retryable write to a server that supports them gets its transaction
        ID first; anything else pays for retrying only once its first
        attempt has failed. ``keep`` is :meth:`lease`'s, called with the
        connection of the attempt that succeeded (a reply whose cursor lives on
        the server that answered), for a command in a session only, and not for
        a transaction's pinned connection."""
        if (retry is not False and next(iter(command)) in retries.WRITE_COMMANDS
                and (retry or self.retry_writes) and retries.is_retryable_write(command)
                and (session is None or not session.in_transaction)):
            # Its error is the caller's to see.
            server = self.select(deadline, preference)
            if server.retryable_writes_supported:
                return self._run_write(dbname, command, session, deadline, preference, server,
                                       keep)
        try:
            return self._command_once(dbname, command, session, deadline, preference, keep)
        except PyMongoError as error:
            return self.retry_read(
                error, lambda: self._command_once(dbname, command, session, deadline,
                                                  preference, keep),
                command, session, deadline, retry)

    def _command_once(self, dbname: str, command: dict[str, Any],
                      session: SessionLike | None, deadline: Deadline | None,
                      preference: _ServerMode,
                      keep: Callable[[Connection[Link]], bool] | None = None
                      ) -> dict[str, Any]:
        if session is None and deadline is None:
            # The hot path: plain try/finally rather than context managers,
            # which cost a few microseconds per command; selection's shortcut
            # (the one server primary reads go to) inline.
            if self._closed:
                raise InvalidOperation("the greenpool Client is closed")
            server = self.topology.primary_server
            if server is None or (preference is not readpref.PRIMARY
                                  and preference is not readpref.WRITE):
                server = self.select_server(None, preference)
            pool = server.pool
            conn = pool.checkout()
            conn.purpose = Purpose.OTHER
            try:
                if preference is not readpref.PRIMARY or not server.plain_primary_reads:
                    self._add_read_preference(command, preference, None, server)
                reply = self.send_in_implicit_session(conn, dbname, command)
            except Exception:
                pool.checkin(conn)
                raise
            except BaseException:
                pool.checkin_after_error(conn)  # a kill: no yield, see lease
                raise
            pool.checkin(conn)
            return reply
        with self.lease(session, Purpose.OTHER, keep, name=next(iter(command)),
                        deadline=deadline, preference=preference) as conn:
            self.add_read_preference(command, preference, session, conn)
            if session is None:
                return self.send_in_implicit_session(conn, dbname, command, deadline)
            return self.send(conn, dbname, command, session, deadline)

    def retry_read(self, error: PyMongoError, again: Callable[[], R],
                   command: dict[str, Any], session: SessionLike | None,
                   deadline: Deadline | None, retry: bool | None) -> R:
        """``error`` ended the first attempt of ``command``: re-raise it, or
        retry with ``again`` as the Retryable Reads spec says (once; under
        a timeoutMS deadline, while time is left) if ``command`` is a read it
        retries (or ``retry`` is True) and ``error`` is retryable; or, after a
        retryable overload error, as the Client Backpressure spec says (any
        command its policy allows, after a backoff). Call it in the
        ``except`` clause that caught ``error``."""
        if retry is False:
            raise error
        # In a transaction only the Client Backpressure retries apply (the
        # Transactions spec): no retryable reads or writes there.
        in_transaction = session is not None and session.in_transaction
        reads = not in_transaction and (
            retry or (self.retry_reads and retries.is_retryable_read(command)))
        overloads = retry or retries.overload_retry_allowed(
            command, retry_reads=self.retry_reads, retry_writes=self.retry_writes)

        def retryable(failed: PyMongoError) -> bool:
            return bool((reads and retries.is_retryable_read_error(failed))
                        or (overloads and retries.is_retryable_overload(failed)))

        if not retryable(error):
            raise error
        return self._retry(error, again, retryable, deadline)

    def retry_overloaded(self, error: PyMongoError, again: Callable[[], R],
                         command: dict[str, Any], deadline: Deadline | None) -> R:
        """``error`` ended an attempt of ``command`` that no other policy
        retries (a getMore): re-raise it, or retry with ``again`` after a
        backoff if it is a retryable overload error the Client Backpressure
        spec's policy allows for ``command``."""
        if not (retries.is_retryable_overload(error) and retries.overload_retry_allowed(
                command, retry_reads=self.retry_reads, retry_writes=self.retry_writes)):
            raise error
        return self._retry(error, again, retries.is_retryable_overload, deadline)

    def _run_write(self, dbname: str, command: dict[str, Any], session: SessionLike | None,
                   deadline: Deadline | None, preference: _ServerMode,
                   server: ServerDescription,
                   keep: Callable[[Connection[Link]], bool] | None) -> dict[str, Any]:
        """A retryable write to ``server``, selected and supporting them: sent
        with a transaction ID (the session's lsid, a new txnNumber) and
        retried after an error labelled RetryableWriteError."""
        implicit = self.take_server_session() if session is None else None
        if implicit is not None:
            implicit.txn_number += 1
            command["lsid"], txn_number = implicit.lsid, implicit.txn_number
        else:
            assert session is not None  # a server with retryable writes has sessions
            txn_number = session.next_txn_number()
        command["txnNumber"] = Int64(txn_number)
        try:
            try:
                return self._write_once(dbname, command, session, deadline, preference,
                                        implicit, server, keep)
            except PyMongoError as error:
                if not _labelled_retryable(error):
                    raise
                return self._retry(
                    error, lambda: self._write_once(dbname, command, session, deadline,
                                                    preference, implicit,
                                                    self._select_for_retry(deadline), keep),
                    _labelled_retryable, deadline)
        finally:
            if implicit is not None:
                self.give_server_session(implicit, implicit.dirty)

    def _write_once(self, dbname: str, command: dict[str, Any], session: SessionLike | None,
                    deadline: Deadline | None, preference: _ServerMode,
                    implicit: ServerSession | None, server: ServerDescription,
                    keep: Callable[[Connection[Link]], bool] | None) -> dict[str, Any]:
        """One attempt of a retryable write on ``server`` (as selected); its
        errors labelled as the spec says, and the implicit server session
        marked dirty unless the server answered or nothing was sent."""
        try:
            return self._command_once(dbname, command, session, deadline, preference, keep)
        except PyMongoError as error:
            retries.label_write_error(error, server.max_wire_version)
            if implicit is not None and not isinstance(
                    error, OperationFailure | NotPrimaryError | ServerSelectionTimeoutError
                    | WaitQueueTimeoutError):
                implicit.dirty = True  # the server may still hold the session busy
            raise
        except BaseException:
            if implicit is not None:
                implicit.dirty = True  # killed: the command may be running still
            raise

    def _select_for_retry(self, deadline: Deadline | None) -> ServerDescription:
        """The server for a retry of a write, selected afresh (after a stepdown,
        the new primary); a retry needs one that supports retryable writes,
        else the previous error is the one to report."""
        server = self.select(deadline)
        if not server.retryable_writes_supported:
            raise _Unsupported
        return server

    def _retry(self, error: PyMongoError, again: Callable[[], R],
               retryable: Callable[[PyMongoError], bool], deadline: Deadline | None) -> R:
        """The attempts after a first one failed with ``error`` (retryable):
        one more, or under a timeoutMS deadline as many as it allows, each on
        a server selected afresh; once an overload error came, at most
        maxAdaptiveRetries in all, each after an overload error waiting its
        backoff first (Client Backpressure), unless that wait would outlast
        the deadline. The error reported is the last one from an attempt that
        reached the server (an earlier one if a retry found no server or no
        connection, or the server did nothing); once a deadline has expired it
        is a timeout error, as the CSOT spec says."""
        reported = last = error
        allowed = 1 if deadline is None else _UNLIMITED
        attempt = 0
        while True:
            attempt += 1
            overloaded = retries.is_overloaded(last)
            if overloaded:
                allowed = self.max_adaptive_retries
            if attempt > allowed:
                raise reported
            if overloaded:
                pause = retries.backoff(attempt, last, self.jitter())
                if deadline is not None and deadline.bounded and pause >= deadline.remaining():
                    raise reported
                gevent.sleep(pause)
            if deadline is not None and deadline.expired():
                raise _timed_out(deadline, reported)
            try:
                return again()
            except _Unsupported:
                raise reported from None
            except PyMongoError as failed:
                last = failed
                if not retries.no_attempt_made(failed):
                    reported = failed
                if deadline is not None and deadline.expired():
                    raise _timed_out(deadline, failed if failed.timeout else reported) from None
                if not retryable(failed):
                    raise reported from None

    # -- implicit sessions (Sessions spec) ------------------------------------------------
    # Without an explicit session a command runs in an implicit one: a
    # server session from the pool, given back after use unless a network
    # error made it dirty.

    def take_server_session(self) -> ServerSession | None:
        """The most recently used idle server session that is not about to
        expire, or a new one; None if the server does not support sessions.

        In load-balanced mode sessions are always supported and never
        expire here: the Load Balancer spec says to ignore
        logicalSessionTimeoutMinutes and not to prune the session pool."""
        if self.load_balanced:
            if self._server_sessions:
                return self._server_sessions.pop()
            return ServerSession()
        minutes = self.topology.session_timeout_minutes
        if minutes is None:
            return None
        now = time.monotonic()
        while self._server_sessions:
            server_session = self._server_sessions.pop()
            if now - server_session.last_used < (minutes - 1) * 60:
                return server_session
        return ServerSession()

    def send_in_implicit_session(self, conn: Connection[Link], dbname: str,
                                 command: dict[str, Any],
                                 deadline: Deadline | None = None) -> dict[str, Any]:
        """:meth:`send` without an explicit session: in an implicit one lent
        by :meth:`take_server_session` (unless the command names its own
        ``lsid``, or the server has no sessions) and given back afterwards.
        After a refusal the lent ``lsid`` is taken out of ``command`` again,
        so that a retry gets one afresh; after a failure that leaves it dirty it
        stays, so that the retry runs in it too (the Sessions spec), and it is
        dropped."""
        server_session = None if "lsid" in command else self.take_server_session()
        if server_session is None:
            return self.send(conn, dbname, command, None, deadline)
        command["lsid"] = server_session.lsid
        dirty = False
        try:
            return self.send(conn, dbname, command, None, deadline)
        except BaseException as error:
            # Unless the server answered, it may still hold the session busy.
            dirty = not isinstance(error, OperationFailure | NotPrimaryError)
            if not dirty:
                del command["lsid"]
            raise
        finally:
            # A kill mid-command breaks the connection: the server may
            # still run the command in this session, so never reuse it.
            self.give_server_session(server_session, dirty or conn.error is not None)

    def give_server_session(self, server_session: ServerSession, dirty: bool) -> None:
        """Take back a server session from :meth:`take_server_session`;
        ``dirty`` if a command in it failed other than by the server's refusal."""
        if dirty:
            # The server may still hold it busy: never reuse it. Its lsid still
            # goes to endSessions at close, which also ends any transaction the
            # server still keeps open in it (rare: a network error, a kill).
            self._ended_lsids.append(server_session.lsid)
            return
        if self._closed:
            self._ended_lsids.append(server_session.lsid)
        else:
            server_session.last_used = time.monotonic()
            self._server_sessions.append(server_session)

    def _end_server_sessions(self) -> None:
        """Tell the server the sessions are over (best effort, as drivers do)."""
        lsids = self._ended_lsids + [each.lsid for each in self._server_sessions]
        self._ended_lsids, self._server_sessions = [], []
        if not lsids:
            return
        for start in range(0, len(lsids), _END_SESSIONS_BATCH):
            batch = lsids[start:start + _END_SESSIONS_BATCH]
            # Any server with sessions, as known now (closing: no waiting).
            with contextlib.suppress(PyMongoError), self.lease(
                    None, Purpose.OTHER, preference=_ANY_SERVER) as conn:
                self.send(conn, "admin", {"endSessions": batch}, None)

    # -- what is open, and closing --------------------------------------------------------

    def session_started(self, session: SessionLike) -> None:
        self._sessions.add(session)

    def lend_server_session(self) -> ServerSession:
        """A server session for an explicit session, for its lifetime: one from
        the pool, or a new one (also when the server's support is not known yet)."""
        return self.take_server_session() or ServerSession()

    def session_ended(self, session: SessionLike) -> None:
        """``session`` ended: its server session goes back to the pool, unless dirty."""
        self._sessions.discard(session)
        self.give_server_session(session.server_session, session.dirty)

    def cursor_opened(self, cursor: _Closable) -> None:
        """``cursor`` holds a server cursor: :meth:`close` closes it if it is still open."""
        self._cursors.add(cursor)

    def cursor_closed(self, cursor: _Closable) -> None:
        self._cursors.discard(cursor)

    def close(self) -> None:
        """Refuse new work; close the open cursors, end the sessions (aborting
        their transactions) and the server sessions. The goodbyes are best
        effort: whatever they raise (a kill included), this ends closed."""
        self._closing = True
        try:
            for cursor in list(self._cursors):
                # A cursor busy in another greenlet keeps its connection
                # until then; the closed pool closes it at checkin.
                with contextlib.suppress(Exception):
                    cursor.close()
            for session in list(self._sessions):
                with contextlib.suppress(Exception):
                    session.end()
            with contextlib.suppress(Exception):
                self._end_server_sessions()
        finally:
            self._closed = True


class _Unsupported(Exception):
    """A retry found a server that does not support retryable writes: the
    previous error is the one to report."""


def _exhaust_exchange(link: Link, dbname: str, command: dict[str, Any],
                      request_id: int | None, timeout: float | None) -> dict[str, Any]:
    """An exhaust cursor's getMore on ``link``: the next reply of the stream
    if more are coming, else ``command`` sent with exhaustAllowed (a server
    that does not stream answers it once, as any getMore)."""
    if link.more_to_come:
        return link.receive(timeout=timeout, codec_options=getattr(command, "codec_options", None))
    return link.command(dbname, command, request_id=request_id or None, timeout=timeout,
                        exhaust_allowed=True)


def _labelled_retryable(error: PyMongoError) -> bool:
    """A retryable write's retryable error: labelled RetryableWriteError, or a
    retryable overload error (Client Backpressure)."""
    return (error.has_error_label(retries.RETRYABLE_WRITE_ERROR)
            or retries.is_retryable_overload(error))


def _timed_out(deadline: Deadline, error: PyMongoError) -> PyMongoError:
    """What to raise once retrying has used up the deadline: ``error`` if it
    is a timeout error itself, else the deadline's timeout error caused by it."""
    if error.timeout:
        return error
    timed_out = deadline.exceeded(f"retrying gave up; last error: {error}")
    timed_out.__cause__ = error
    return timed_out


def _killed_in(session: SessionLike | None, error: BaseException) -> None:
    """A kill (not an Exception) mid-command: the command may be running still."""
    if session is not None and not isinstance(error, Exception):
        session.dirty = True


def _session_error(session: SessionLike | None, command: Mapping[str, Any],
                   error: PyMongoError) -> None:
    """What a failed command in ``session`` means to it: a refusal's reply
    counts as a reply (its operationTime); then the transaction's rules. A
    transaction's first command refused as overloaded did not start it: its
    retry starts it (the Transactions spec's Client Backpressure section)."""
    if session is None:
        return
    if isinstance(error, OperationFailure) and error.details:
        session.received(error.details)
    if command.get("startTransaction") and retries.is_retryable_overload(error):
        session.not_started()
    _transaction_error(session, next(iter(command)), error)


def _transaction_error(session: SessionLike | None, name: str, error: PyMongoError) -> None:
    if session is None or not session.in_transaction:
        return
    # The Transactions spec: a network error inside a transaction (not
    # its commit) makes the whole transaction retryable.
    if (isinstance(error, ConnectionFailure) and name not in _FINISHING
            and not error.has_error_label("TransientTransactionError")):
        error._add_error_label("TransientTransactionError")
    session.forget_pin_after(error)


def _later(first: Mapping[str, Any] | None,
           second: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The later of two $clusterTime documents (either may be None)."""
    if first is None or second is None:
        return first if second is None else second
    return second if second["clusterTime"] > first["clusterTime"] else first
