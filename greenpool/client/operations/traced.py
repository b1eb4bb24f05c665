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

Which span is current is kept in ``contextvars``, which gevent keeps per greenlet; a
kill that lands mid-operation ends its spans with the error on them (``finally``).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "tracing (the tracing= option or OTEL_PYTHON_INSTRUMENTATION_MONGODB_ENABLED) "
        "needs the OpenTelemetry API: pip install 'greenpool[otel]'") from error

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

_CLIENT = trace.SpanKind.CLIENT
_FINISHING = frozenset({"commitTransaction", "abortTransaction"})


class _Operation:
    """The open operation span of a greenlet; ``named`` once its first command named it."""

    __slots__ = ("named", "span")

    def __init__(self, span: trace.Span, named: bool) -> None:
        self.span = span
        self.named = named


#: The operation the current greenlet is in, if any.
_CURRENT: ContextVar[_Operation | None] = ContextVar("greenpool_operation", default=None)


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
        try:
            with self._operation(dbname, command, session):
                super().run_in_session(session, dbname, command, deadline)
        finally:
            if next(iter(command)) in _FINISHING:
                self._end_transaction(session)

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
        # An operation that leases first (a cursor, a bulk write): its span opens
        # now, before selection, and its first command names it.
        with self._operation(None, None, session), leased as conn:
            yield conn

    def send(self, conn: Connection[Link], dbname: str, command: dict[str, Any],
             session: SessionLike | None, deadline: Deadline | None = None,
             max_time: bool = True) -> dict[str, Any]:
        if is_sensitive(next(iter(command)), command):
            return super().send(conn, dbname, command, session, deadline, max_time)
        if _CURRENT.get() is None:  # a getMore on a pinned connection, a killCursors
            with self._operation(dbname, command, session):
                return self._send_in_span(conn, dbname, command, session, deadline, max_time)
        return self._send_in_span(conn, dbname, command, session, deadline, max_time)

    def session_ended(self, session: SessionLike) -> None:
        super().session_ended(session)
        self._end_transaction(session)

    # -- the spans ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _operation(self, dbname: str | None, command: dict[str, Any] | None,
                   session: SessionLike | None) -> Iterator[None]:
        """An operation span, current in the block; ``command`` None: named later, by
        the first command sent in it."""
        if command is None:
            name, attributes = "operation", dict(spans.SYSTEM)
        else:
            assert dbname is not None
            name, attributes = spans.operation_attributes(dbname, command)
        parent = self._parent(session, command)
        span = self._tracer.start_span(name, parent, _CLIENT, attributes)
        token = _CURRENT.set(_Operation(span, command is not None))
        attached = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield
        except BaseException as error:
            _record(span, error)
            raise
        finally:
            otel_context.detach(attached)
            _CURRENT.reset(token)
            span.end()

    def _send_in_span(self, conn: Connection[Link], dbname: str, command: dict[str, Any],
                      session: SessionLike | None, deadline: Deadline | None,
                      max_time: bool) -> dict[str, Any]:
        operation = _CURRENT.get()
        assert operation is not None
        if not operation.named:
            name, attributes = spans.operation_attributes(dbname, command)
            operation.span.update_name(name)
            operation.span.set_attributes(attributes)
            operation.named = True
        link = conn.transport
        span = self._tracer.start_span(next(iter(command)), kind=_CLIENT, attributes=(
            spans.command_attributes(dbname, command, conn,
                                     None if link is None else link.server_connection_id)))
        try:
            reply = super().send(conn, dbname, command, session, deadline, max_time)
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
        self._end_transaction(session)  # one left open by a transaction never finished
        span = self._tracer.start_span("transaction", kind=_CLIENT,
                                       attributes=dict(spans.SYSTEM))
        self._transactions[session] = (number, span)
        return trace.set_span_in_context(span)

    def _end_transaction(self, session: SessionLike) -> None:
        entry = self._transactions.pop(session, None)
        if entry is not None:
            entry[1].end()


def _record(span: trace.Span, error: BaseException) -> None:
    """``error`` ended what ``span`` covers: its exception event and status."""
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
