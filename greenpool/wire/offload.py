"""Work that would hold the hub, done in gevent's threadpool instead.

What lives here: :func:`offload`, which runs a function in the hub's threadpool
(the one gevent's own resolver uses) while the calling greenlet waits there,
so other greenlets run meanwhile. That pays for work that releases the GIL
while it runs: C code waiting on a blocking socket (dnspython's queries),
hashing (PBKDF2), compressing. Work that holds the GIL (BSON, pure Python)
gains nothing: from its thread it would hold the hub just the same.

The wait ends early on a ``gevent.Timeout`` or a kill in the caller (the wait
for a free thread included); the work then finishes in its thread, its result
dropped. A function that can run long must bound itself.

What must not: deciding what is worth a thread (each caller knows its own
cost) and time limits (the caller's). It imports nothing of greenpool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import gevent

__all__ = ["offload"]

_T = TypeVar("_T")


def offload(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` in the hub's threadpool; its result, or its
    exception raised here."""
    result, error = gevent.get_hub().threadpool.spawn(_capture, function, args).get()
    if error is not None:
        raise error
    return result  # type: ignore[no-any-return]


def _capture(
    function: Callable[..., Any], args: tuple[Any, ...]
) -> tuple[Any, BaseException | None]:
    # The exception travels back as a value: raised, gevent's threadpool
    # would also print it as an error of the hub.
    try:
        return function(*args), None
    except BaseException as error:
        return None, error
