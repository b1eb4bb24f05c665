"""Which listener methods greenpool calls, decided per listener object.

PyMongo's rule (``pymongo.monitoring``): each registered listener of an
interface (ConnectionPoolListener, CommandListener, the SDAM ones) gets the
interface's method called for every event, whatever its class overrides, and
an exception it raises is reported and ignored. greenpool keeps that rule for
every event it publishes (CMAP, command, SDAM), with one difference: a method
that resolves to one of PyMongo's abstract stubs, which only raise
NotImplementedError, is not called (PyMongo calls it and prints the error).
What counts is what the method resolves to on the listener object: a method of
its class, a callable set on the instance, or what its class's
``__getattr__``/``__getattribute__`` answers.

Deciding once. For a listener whose class looks attributes up the ordinary way
(no ``__getattr__`` or ``__getattribute__`` of its own), what each method
resolves to is decided once, when the listener is handed over (a callable set
on the instance later is not seen). An event that none of a publisher's
listeners takes is then not built at all: a plain subclass that overrides two
methods costs nothing for the other events. A listener whose class answers
lookups itself (a proxy, a ``unittest.mock.Mock``) may take any event: it is
asked again at every event, as PyMongo asks it.

What lives here: :func:`handler`, the rule for one listener and method at one
moment, and :class:`Subscribers`, a publisher's listeners of one interface
sorted by method once. What must not live here: building events, logging
them, any pool state. Imports: the standard library and PyMongo's listener
interfaces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from pymongo import monitoring as _m

__all__ = ["Subscribers", "answers_itself", "handler"]

_ERRORS = logging.getLogger("greenpool")

#: PyMongo's abstract stubs: the methods of its listener interfaces, each of
#: which only raises NotImplementedError.
_STUBS = frozenset(
    function
    for interface in (_m.CommandListener, _m.ConnectionPoolListener,
                      _m.ServerHeartbeatListener, _m.ServerListener, _m.TopologyListener)
    for name, function in vars(interface).items()
    if not name.startswith("_") and callable(function))


def handler(listener: object, method: str) -> Callable[[Any], Any] | None:
    """What greenpool calls for ``method`` on ``listener`` now: what the
    attribute resolves to, or None when that is one of PyMongo's abstract
    stubs (or nothing)."""
    found = getattr(listener, method, None)
    if found is None or getattr(found, "__func__", None) in _STUBS:
        return None
    return found  # type: ignore[no-any-return]


def answers_itself(listener: object) -> bool:
    """Whether ``listener``'s class answers attribute lookups itself
    (``__getattr__``, or a ``__getattribute__`` of its own): then what its
    methods resolve to can change from one event to the next."""
    cls = type(listener)
    return cls.__getattribute__ is not object.__getattribute__ or hasattr(cls, "__getattr__")


class Subscribers:
    """A publisher's listeners, sorted by method once: see the module docstring."""

    __slots__ = ("_asked", "_takers", "listeners")

    def __init__(self, listeners: Iterable[object], methods: Iterable[str]) -> None:
        #: The listeners, in the order they were given.
        self.listeners = tuple(listeners)
        #: The listeners asked again at every event.
        self._asked = tuple(each for each in self.listeners if answers_itself(each))
        #: method -> the listeners that may take its events, in order.
        self._takers: dict[str, tuple[object, ...]] = {
            method: tuple(each for each in self.listeners
                          if each in self._asked or handler(each, method) is not None)
            for method in methods}

    def takers(self, method: str) -> tuple[object, ...]:
        """The listeners that may take ``method``'s events (empty: build none)."""
        return self._takers[method]

    def notify(self, method: str, event: object) -> None:
        """Call ``method`` with ``event`` on each listener that takes it; an
        exception a listener raises is logged on ``greenpool`` and ignored."""
        asked = self._asked
        for listener in self._takers[method]:
            try:
                call = (handler(listener, method) if asked and listener in asked
                        else getattr(listener, method))
                if call is not None:
                    call(event)
            except Exception:
                _ERRORS.exception("greenpool: listener %r raised in %s", listener, method)
