"""OpenTelemetry tracing of a Client's operations and commands (the OpenTelemetry spec).

Rules of this module: :class:`TracedOperations`, the
:class:`~greenpool.client.operations.operations.Operations` of a Client that traces,
and nothing a Client that does not trace runs. The Client picks the class once, at
construction: without tracing it makes plain ``Operations``, so its command path is
the same code, instruction for instruction, as before tracing existed (the spec allows
a no-op cost; greenpool pays none). It imports the OpenTelemetry API (the ``otel``
extra), never the SDK: the application's tracer provider gets the spans.

The spans, all of kind CLIENT, through the global tracer provider's tracer
``greenpool``:

* an **operation span** around each operation, opened where the operation starts
  (before server selection) and named after its first command (``find db.coll``,
  ``dropCollection db.coll``): :meth:`~TracedOperations.run_command` (with its retries),
  :meth:`~TracedOperations.run_in_session` (commit, abort), and each
  :meth:`~TracedOperations.lease` or :meth:`~TracedOperations.send` that no operation
  encloses (a cursor's find and getMore, a bulk write's batches);
* a **command span** inside it for each command sent (each attempt of a retried one),
  security-sensitive commands excepted, as command monitoring leaves them out;
* a **transaction span** per transaction of a session, from its first operation to
  its commit or abort, around their operation spans.

The operation a greenlet is in is kept in a ``contextvars`` variable, which gevent
keeps per greenlet, and each span is given its parent explicitly (greenpool attaches
nothing to OpenTelemetry's context: no span of the application opens inside one of
greenpool's). A kill that lands mid-operation ends its spans with the error on them
(``finally``).

Retries that run after the attempt's own call has returned (a cursor's, after its
lease; a session's second commit) adopt the failed attempt's operation span, so every
attempt is a command span of one operation, as the spec says: a failed attempt's span
stays open until the hub's next turn (the retry follows it without a yield), and ends
then, as of the failure, if no retry came.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

import gevent

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "tracing (the tracing= option or OTEL_PYTHON_INSTRUMENTATION_MONGODB_ENABLED) "
        "needs the OpenTelemetry API: pip install 'greenpool[otel]'") from error

from pymongo.errors import PyMongoError
from pymongo.read_preferences import _ServerMode

from greenpool._version import __version__
from greenpool.address import Address
from greenpool.client.config import readpref
from greenpool.client.operations import spans
from greenpool.client.operations.commands import is_sensitive
from greenpool.client.operations.operations import Operations, SessionLike
from greenpool.client.operations.timeouts import Deadline
from greenpool.pool.connection import Connection, Purpose

if TYPE_CHECKING:
    from greenpool.wire.link import Link

__all__ = ["TracedOperations"]

R = TypeVar("R")

_CLIENT = trace.SpanKind.CLIENT
_FINISHING = frozenset({"commitTransaction", "abortTransaction"})


class _Operation:
    """The operation a greenlet is in: its span, or, for one that leased before it
    sent anything, where and when its span is to start once its first command names
    it (a lease that sends nothing, as a bulk write's look at the server's limits,
    makes no span). ``failed``: the error of an attempt that a retry may adopt (the
    retry of a commit or abort, ``retry_of``, or any retry for a leased one);
    ``after``: what to do once the span ended (a commit's: end the transaction's)."""

    __slots__ = ("after", "failed", "failed_at", "parent", "retry_of", "settled", "span",
                 "start")

    def __init__(self, span: trace.Span | None, parent: otel_context.Context | None,
                 start: int | None = None, retry_of: tuple[int, str] | None = None,
                 after: Callable[[], None] | None = None) -> None:
        self.span = span
        self.parent = parent
        self.start = start
        self.retry_of = retry_of
        self.after = after
        self.failed: BaseException | None = None
        self.failed_at = 0
        self.settled = False  # ended, or adopted by the retry that ends it

    def end(self, error: BaseException | None = None, end_time: int | None = None) -> None:
        """End the span, recording ``error`` if it ended the operation."""
        self.settled = True
        assert self.span is not None
        if error is not None:
            _record(self.span, error)
        self.span.end(end_time)
        if self.after is not None:
            self.after()

    def defer(self, error: PyMongoError) -> None:
        """``error`` ended this attempt: a retry may follow (and adopt the span) before
        the hub's next turn, else the span ends then, as of now, with ``error``."""
        self.failed, self.failed_at = error, time.time_ns()
        _FAILED.set(self)
        gevent.get_hub().loop.run_callback(_settle, self)


#: The operation the current greenlet is in, if any.
_CURRENT: ContextVar[_Operation | None] = ContextVar("greenpool_operation", default=None)
#: The current greenlet's last leased operation that failed with a PyMongoError, which
#: the retry that follows (a cursor's, after its lease) adopts.
_FAILED: ContextVar[_Operation | None] = ContextVar("greenpool_failed", default=None)


class TracedOperations(Operations):
    """:class:`Operations` with the spec's spans; see the module's docstring.
    ``query_text_max_length``: ``db.query.text``'s length (0: no such attribute)."""

    def __init__(self, *args: Any, query_text_max_length: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tracer = trace.get_tracer("greenpool", __version__)
        self._query_text_max_length = query_text_max_length
        # Each session's transaction span: (its transaction number, the span).
        self._transactions: weakref.WeakKeyDictionary[SessionLike, tuple[int, trace.Span]] = (
            weakref.WeakKeyDictionary())

    # -- where operations start ------------------------------------------------------------

    def run_command(self, dbname: str, command: dict[str, Any], session: SessionLike | None,
                    deadline: Deadline | None, preference: _ServerMode,
                    retry: bool | None = None,
                    keep: Callable[[Connection[Link]], bool] | None = None) -> dict[str, Any]:
        with self._operation(dbname, command, session):
            return super().run_command(dbname, command, session, deadline, preference,
                                       retry, keep)

    def run_in_session(self, session: SessionLike, dbname: str, command: dict[str, Any],
                       deadline: Deadline | None = None) -> None:
        # A commit or abort the session retries after an error (in a second call)
        # is one operation: the retry adopts the first attempt's span.
        name = next(iter(command))
        retry_of = (id(session), name)
        failed = _FAILED.get()
        if failed is not None and failed.retry_of == retry_of and _adoptable(failed):
            with self._adopted(failed):
                super().run_in_session(session, dbname, command, deadline)
            return
        after = (lambda: self._end_transaction(session)) if name in _FINISHING else None
        with self._operation(dbname, command, session, retry_of=retry_of, after=after):
            super().run_in_session(session, dbname, command, deadline)

    @contextlib.contextmanager
    def lease(self, session: SessionLike | None, purpose: Purpose,
              keep: Callable[[Connection[Link]], bool] | None = None, name: str = "",
              deadline: Deadline | None = None, preference: _ServerMode = readpref.PRIMARY,
              address: Address | None = None) -> Iterator[Connection[Link]]:
        leased = super().lease(session, purpose, keep, name, deadline, preference, address)
        if _CURRENT.get() is not None:
            with leased as conn:
                yield conn
            return
        # An operation that leases first (a cursor, a bulk write): it starts now,
        # before selection; its span, from now, once a command names it.
        operation = _Operation(None, self._parent(session, None), time.time_ns())
        token = _CURRENT.set(operation)
        try:
            with leased as conn:
                yield conn
        except BaseException as error:
            if operation.span is None:  # it failed before sending: name it as it can
                operation.span = self._tracer.start_span(
                    name or "operation", operation.parent, _CLIENT, dict(spans.SYSTEM),
                    start_time=operation.start)
            if isinstance(error, PyMongoError):
                # A cursor retries after its lease, in retry_read or
                # retry_overloaded: the retry adopts this span.
                operation.defer(error)
            else:
                operation.end(error)  # a kill, a bug: no retry follows
            raise
        else:
            if operation.span is not None:
                operation.end()
        finally:
            _CURRENT.reset(token)

    def retry_read(self, error: PyMongoError, again: Callable[[], R],
                   command: dict[str, Any], session: SessionLike | None,
                   deadline: Deadline | None, retry: bool | None) -> R:
        failed = _FAILED.get()
        if failed is None or failed.failed is not error or not _adoptable(failed):
            return super().retry_read(error, again, command, session, deadline, retry)
        with self._adopted(failed):
            return super().retry_read(error, again, command, session, deadline, retry)

    def retry_overloaded(self, error: PyMongoError, again: Callable[[], R],
                         command: dict[str, Any], deadline: Deadline | None) -> R:
        failed = _FAILED.get()
        if failed is None or failed.failed is not error or not _adoptable(failed):
            return super().retry_overloaded(error, again, command, deadline)
        with self._adopted(failed):
            return super().retry_overloaded(error, again, command, deadline)

    def send(self, conn: Connection[Link], dbname: str, command: dict[str, Any],
             session: SessionLike | None, deadline: Deadline | None = None,
             max_time: bool = True, exhaust: bool = False) -> dict[str, Any]:
        if is_sensitive(next(iter(command)), command):
            return super().send(conn, dbname, command, session, deadline, max_time)
        if _CURRENT.get() is None:  # a getMore on a pinned connection, a killCursors
            with self._operation(dbname, command, session):
                return self._send_in_span(conn, dbname, command, session, deadline, max_time,
                                          exhaust)
        return self._send_in_span(conn, dbname, command, session, deadline, max_time, exhaust)

    def session_ended(self, session: SessionLike) -> None:
        super().session_ended(session)
        self._end_transaction(session, forget=True)

    # -- the spans ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _operation(self, dbname: str, command: dict[str, Any], session: SessionLike | None,
                   retry_of: tuple[int, str] | None = None,
                   after: Callable[[], None] | None = None) -> Iterator[None]:
        """An operation span for the block, named after its first command; with
        ``retry_of``, a PyMongoError leaves it for a retry to adopt."""
        name, attributes = spans.operation_attributes(dbname, command)
        operation = _Operation(
            self._tracer.start_span(name, self._parent(session, command), _CLIENT,
                                    attributes), None, retry_of=retry_of, after=after)
        token = _CURRENT.set(operation)
        try:
            yield
        except PyMongoError as error:
            if retry_of is not None:
                operation.defer(error)
            else:
                operation.end(error)
            raise
        except BaseException as error:
            operation.end(error)
            raise
        else:
            operation.end()
        finally:
            _CURRENT.reset(token)

    def _send_in_span(self, conn: Connection[Link], dbname: str, command: dict[str, Any],
                      session: SessionLike | None, deadline: Deadline | None,
                      max_time: bool, exhaust: bool = False) -> dict[str, Any]:
        operation = _CURRENT.get()
        assert operation is not None
        if operation.span is None:
            name, attributes = spans.operation_attributes(dbname, command)
            operation.span = self._tracer.start_span(name, operation.parent, _CLIENT,
                                                     attributes, start_time=operation.start)
        link = conn.transport
        span = self._tracer.start_span(
            next(iter(command)), trace.set_span_in_context(operation.span), _CLIENT,
            spans.command_attributes(dbname, command, conn,
                                     None if link is None else link.server_connection_id))
        try:
            reply = super().send(conn, dbname, command, session, deadline, max_time, exhaust)
            span.set_attributes(spans.reply_attributes(reply))
            return reply
        except BaseException as error:
            span.set_attributes(spans.error_attributes(error))
            _record(span, error)
            raise
        finally:
            # After the send, which adds the session's fields to the command.
            span.set_attributes(spans.sent_attributes(command, self._query_text_max_length))
            span.end()

    @contextlib.contextmanager
    def _adopted(self, operation: _Operation) -> Iterator[None]:
        """The block retries ``operation``, whose attempt failed: its span stays open
        around it, and ends with it."""
        operation.settled = True
        _FAILED.set(None)
        token = _CURRENT.set(operation)
        try:
            yield
        except BaseException as error:
            operation.end(error)
            raise
        else:
            operation.end()
        finally:
            _CURRENT.reset(token)

    def _parent(self, session: SessionLike | None,
                command: dict[str, Any] | None) -> otel_context.Context | None:
        """The context an operation span opens in: its session's transaction span
        (opened by the transaction's first operation), else the current one."""
        if session is None:
            return None
        number = getattr(session, "txn_number", None)
        entry = self._transactions.get(session)
        finishing = command is not None and next(iter(command)) in _FINISHING
        if entry is not None and entry[0] == number and (finishing or session.in_transaction):
            return trace.set_span_in_context(entry[1])
        if not session.in_transaction or finishing or not isinstance(number, int):
            return None
        self._end_transaction(session, forget=True)  # one a transaction left open
        span = self._tracer.start_span("transaction", kind=_CLIENT,
                                       attributes=dict(spans.SYSTEM))
        self._transactions[session] = (number, span)
        return trace.set_span_in_context(span)

    def _end_transaction(self, session: SessionLike, forget: bool = False) -> None:
        """End ``session``'s transaction span (a commit or abort ran); unless
        ``forget``, a retried commit of the same transaction still nests in it."""
        entry = self._transactions.pop(session, None) if forget else (
            self._transactions.get(session))
        if entry is not None and entry[1].is_recording():
            entry[1].end()


def _record(span: trace.Span, error: BaseException) -> None:
    """``error`` ended what ``span`` covers: its exception event and status."""
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def _adoptable(operation: _Operation) -> bool:
    """Whether a retry starting now may adopt ``operation``'s failed attempt."""
    return not operation.settled and _CURRENT.get() is None


def _settle(operation: _Operation) -> None:
    """End a failed attempt's span that no retry adopted."""
    if not operation.settled:
        operation.end(operation.failed, operation.failed_at)
