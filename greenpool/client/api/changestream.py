"""Change streams: ``watch()`` on a collection, a database or the whole deployment, per
the Change Streams spec.

A :class:`ChangeStream` is an aggregate whose first stage is ``$changeStream``, read
through a :class:`~greenpool.client.api.cursor.Cursor` one batch at a time. It keeps
the resume token of the last change it returned (or the batch's
``postBatchResumeToken`` once the batch is used up), and after a resumable error
(a network error, CursorNotFound, or any error the server labels
``ResumableChangeStreamError``) it closes the cursor and opens a new one, once per
error, that starts where the old one stopped: ``resumeAfter`` the token (or
``startAfter`` it, while the stream was started after one and has returned nothing
yet), else ``startAtOperationTime`` of the opening reply. Any other error closes the
stream, but a timeout, which leaves it open: the call that timed out raises it, and
the next call resumes first, with its own time (the CSOT spec). After a timeout
before any change came, close the stream and watch again with a longer time limit:
the server could not get through the oplog in time.

Rules. The stream opens its cursors with the callable its target gives it (the
target's read preference, read concern, session and collation come with that); it
keeps only the stream's own state (options, token, the current batch).
"""

from __future__ import annotations

import contextlib
import copy
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bson.timestamp import Timestamp
from pymongo.errors import ConnectionFailure, InvalidOperation, OperationFailure, PyMongoError

from greenpool.client.api.cursor import Cursor
from greenpool.client.operations.timeouts import timeout
from greenpool.wire.replies import error_code

__all__ = ["ChangeStream", "OpenCursor", "check_watch_options"]

#: Opens the stream's aggregate with the whole pipeline ($changeStream first).
OpenCursor = Callable[[list[Mapping[str, Any]]], Cursor]

_CURSOR_NOT_FOUND = 43
_RESUMABLE_LABEL = "ResumableChangeStreamError"


def resumable(error: PyMongoError) -> bool:
    """Whether a change stream resumes after ``error`` (the spec's "Resumable Error")."""
    if isinstance(error, ConnectionFailure):
        return True
    if isinstance(error, OperationFailure):
        return (error_code(error) == _CURSOR_NOT_FOUND
                or error.has_error_label(_RESUMABLE_LABEL))
    return False


def check_watch_options(pipeline: Any, full_document: Any, full_document_before_change: Any,
                        batch_size: Any, max_await_time_ms: Any,
                        start_at_operation_time: Any) -> list[Mapping[str, Any]]:
    """``watch()``'s arguments checked as PyMongo checks them; the pipeline, a list."""
    if pipeline is None:
        pipeline = []
    if not isinstance(pipeline, list):
        raise TypeError(f"pipeline must be a list, not {pipeline!r}")
    for name, value in (("full_document", full_document),
                        ("full_document_before_change", full_document_before_change)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string or None, not {value!r}")
    for name, value in (("batch_size", batch_size), ("max_await_time_ms", max_await_time_ms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValueError(f"{name} must be None or an int >= 0, not {value!r}")
    if start_at_operation_time is not None and not isinstance(start_at_operation_time,
                                                              Timestamp):
        raise TypeError(f"start_at_operation_time must be a bson.timestamp.Timestamp, not "
                        f"{start_at_operation_time!r}")
    return copy.deepcopy(pipeline)


class ChangeStream:
    """The changes of a collection, a database or the deployment, as PyMongo's
    ``ChangeStream``: iterate it (each ``next()`` waits for a change), or call
    :meth:`try_next` (one getMore at most); :attr:`resume_token` says where it is.
    Made by ``watch()``; see the module's docstring."""

    def __init__(self, open_cursor: OpenCursor, pipeline: list[Mapping[str, Any]], *,
                 time_limit: float | None = None, full_document: str | None = None,
                 full_document_before_change: str | None = None,
                 resume_after: Mapping[str, Any] | None = None,
                 start_after: Mapping[str, Any] | None = None,
                 start_at_operation_time: Timestamp | None = None,
                 show_expanded_events: bool | None = None,
                 all_changes_for_cluster: bool = False) -> None:
        self._open_cursor = open_cursor
        self._pipeline = pipeline
        #: Seconds each next() and try_next() may take, resume included (None: no limit).
        self._limit = time_limit
        stage: dict[str, Any] = {}
        if full_document is not None:
            stage["fullDocument"] = full_document
        if full_document_before_change is not None:
            stage["fullDocumentBeforeChange"] = full_document_before_change
        if show_expanded_events:
            stage["showExpandedEvents"] = True
        if all_changes_for_cluster:
            stage["allChangesForCluster"] = True
        #: The $changeStream stage's options but where it starts.
        self._stage = stage
        self._uses_start_after = start_after is not None
        self._uses_resume_after = resume_after is not None
        self._resume_token = copy.deepcopy(start_after or resume_after)
        self._start_at_operation_time = start_at_operation_time
        self._batch: deque[Any] = deque()
        self._closed = False
        #: Whether the next call resumes first: the last one timed out.
        self._resume_due = False
        self._cursor = self._open()

    @property
    def resume_token(self) -> Mapping[str, Any] | None:
        """The token to resume after the last change returned (a copy), or None."""
        return copy.deepcopy(self._resume_token)

    @property
    def alive(self) -> bool:
        """Whether the stream may return more changes (False once closed, or once the
        server ended it, as after an ``invalidate`` event)."""
        return not self._closed

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        """The next change, waiting for one; StopIteration once the stream is closed."""
        with timeout(self._limit):
            while self.alive:
                change = self.try_next()
                if change is not None:
                    return change
        raise StopIteration

    next = __next__

    def try_next(self) -> Any:
        """The next change, or None if one getMore brought none (or the stream is
        closed)."""
        with timeout(self._limit):
            return self._try_next()

    def _try_next(self) -> Any:
        if self._closed:
            return None
        if self._resume_due or (not self._batch and not self._cursor.alive):
            self._resume()  # after a timeout, or the last resume's opening failed
        try:
            try:
                change = self._next_change()
            except PyMongoError as error:
                if error.timeout and self._limit is not None:
                    # timeoutMS is spent: this call fails and the next resumes, with
                    # its own time (the CSOT spec's change streams).
                    self._resume_due = True
                    raise
                if not resumable(error):
                    raise
                self._resume()
                change = self._next_change()
        except PyMongoError as error:
            if not resumable(error) and not error.timeout:
                self.close()
            raise
        except BaseException:
            self.close()  # killed mid-request: the cursor's state is unknown
            raise
        return self._returned(change)

    def close(self) -> None:
        """Close the stream and its cursor. Idempotent."""
        self._closed = True
        self._batch.clear()
        self._cursor.close()

    def __enter__(self) -> ChangeStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<greenpool.ChangeStream {self._cursor!r}{' closed' if self._closed else ''}>"

    # -- internals ------------------------------------------------------------------------

    def _next_change(self) -> Any:
        if not self._batch:
            self._batch.extend(self._cursor.poll())
        return self._batch.popleft() if self._batch else None

    def _returned(self, change: Any) -> Any:
        """Cache the token ``change`` (None: an empty batch) leaves the stream at."""
        cursor = self._cursor
        if not self._batch and not cursor.alive:
            self._closed = True  # the server ended the stream
        if change is None:
            if cursor.post_batch_resume_token is not None:
                self._resume_token = cursor.post_batch_resume_token
                self._start_at_operation_time = None
            return None
        try:
            token = change["_id"]
        except KeyError:
            self.close()
            raise InvalidOperation("Cannot provide resume functionality when the resume "
                                   "token is missing.") from None
        if not self._batch and cursor.post_batch_resume_token is not None:
            token = cursor.post_batch_resume_token
        self._uses_start_after = False
        self._uses_resume_after = True
        self._resume_token = token
        self._start_at_operation_time = None
        return change

    def _open(self) -> Cursor:
        """The aggregate, from where the stream is."""
        stage = dict(self._stage)
        if self._resume_token is not None:
            stage["startAfter" if self._uses_start_after else "resumeAfter"] = (
                self._resume_token)
        elif self._start_at_operation_time is not None:
            stage["startAtOperationTime"] = self._start_at_operation_time
        cursor = self._open_cursor([{"$changeStream": stage}, *self._pipeline])
        if not cursor.buffered:
            if cursor.post_batch_resume_token is not None:
                self._resume_token = cursor.post_batch_resume_token
            elif (self._start_at_operation_time is None and not self._uses_resume_after
                  and not self._uses_start_after):
                self._start_at_operation_time = cursor.operation_time
        return cursor

    def _resume(self) -> None:
        with contextlib.suppress(PyMongoError):
            self._cursor.close()
        self._batch.clear()
        self._cursor = self._open()
        self._resume_due = False
