"""How greenpool's pools get into a MongoClient: PyMongo's two private keywords.

Rules of this module: the only place in greenpool that names PyMongo's private
``MongoClient`` keyword arguments. PyMongo builds every pool through ``_pool_class``
and the condition server selection waits on through ``_condition_class``; both are
documented only as "for deep customization", hence the exact version range checked
at import (``versions.py``). :func:`client_kwargs` gives both to a ``MongoClient``,
for :class:`~greenpool.pymongo.MongoClient` and for frameworks that build their own.
:func:`pool_factory` is the ``_pool_class``: application
pools become :class:`~greenpool.pymongo.pool.GreenPool`; the monitor and RTT pools
stay PyMongo's, because nothing ever waits in them and SDAM reads their internals.
:class:`~greenpool.pymongo.condition.KillSafeCondition` is the ``_condition_class``.
"""

from __future__ import annotations

import functools
from typing import Any

import gevent.monkey

from greenpool.pool.longholds import check_threshold
from greenpool.pymongo.before_4_13 import MONITOR_FLAG, MONITOR_VALUE
from greenpool.pymongo.condition import KillSafeCondition
from greenpool.pymongo.internals import Pool
from greenpool.pymongo.pool import GreenPool


def pool_factory(address: Any, options: Any, *args: Any, acquire_sites: bool | None = None,
                 long_hold_threshold: float | None = None, **kwargs: Any) -> Pool:
    """PyMongo's ``_pool_class``: a :class:`GreenPool` for application pools,
    PyMongo's own pool for monitoring (``is_sdam=True``; ``handshake=False``
    before PyMongo 4.13). ``acquire_sites`` and ``long_hold_threshold`` are
    greenpool's, for the GreenPools (see :class:`greenpool.Pool`); PyMongo
    never passes them: :func:`client_kwargs` binds them."""
    flag = args[0] if args else kwargs.get(MONITOR_FLAG, not MONITOR_VALUE)
    if flag == MONITOR_VALUE:
        return Pool(address, options, *args, **kwargs)
    require_patched_threading()
    return GreenPool(address, options, *args, acquire_sites=acquire_sites,
                     long_hold_threshold=long_hold_threshold, **kwargs)


def require_patched_threading() -> None:
    """Refuse to run greenpool's pools unless ``threading`` is gevent's."""
    if not gevent.monkey.is_module_patched("threading"):
        raise RuntimeError(
            "greenpool.pymongo needs gevent's monkey-patching (gevent.monkey.patch_all(), "
            "before PyMongo is used): its pools and PyMongo's monitors must share one hub"
        )


def client_kwargs(*, acquire_sites: bool | None = None, long_hold_threshold: float | None = None,
                  **options: Any) -> dict[str, Any]:
    """The keyword arguments that put greenpool's pools under a ``MongoClient``.

    For a client a framework builds from keyword arguments it passes through
    (Flask-PyMongo's ``PyMongo(app, uri, **kwargs)``, MongoEngine's
    ``connect(**kwargs)``, a Django backend's ``OPTIONS``): ``options``, plus
    what :class:`~greenpool.pymongo.MongoClient` sets itself, so the
    application never names PyMongo's private keywords. The application pools
    become :class:`~greenpool.pymongo.GreenPool` (FIFO waits, kill safety) and
    server selection waits on :class:`~greenpool.pymongo.KillSafeCondition`.
    The pools refuse to start unless gevent has monkey-patched ``threading``.
    ``acquire_sites`` and ``long_hold_threshold`` (greenpool's, never
    connection string options) are the pools' (see :class:`greenpool.Pool`).

    Raises :class:`TypeError` if ``options`` sets either of those keywords to
    something else; ``options`` from an earlier call are kept as they are.
    """
    kwargs = dict(options)
    for keyword, ours in (("_pool_class", pool_factory),
                          ("_condition_class", KillSafeCondition)):
        given = kwargs.setdefault(keyword, ours)
        if not (given is ours or _binds(given, ours)):
            raise TypeError(
                f"greenpool.pymongo sets {keyword} itself, to {ours.__qualname__}; "
                f"got {kwargs[keyword]!r}")
    if (acquire_sites, long_hold_threshold) != (None, None):
        kwargs["_pool_class"] = functools.partial(
            pool_factory, acquire_sites=acquire_sites,
            long_hold_threshold=check_threshold(long_hold_threshold))
    return kwargs


def _binds(given: object, function: object) -> bool:
    """Whether ``given`` is ``function`` with settings bound (an earlier call's)."""
    return isinstance(given, functools.partial) and given.func is function
