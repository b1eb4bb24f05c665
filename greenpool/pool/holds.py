"""Who holds a pool's connections: hold records, sites, and how they read.

What lives here: the pieces both pool routes (:class:`greenpool.Pool` and
``greenpool.pymongo``'s ``GreenPool``) use to say who holds their connections:

* :func:`acquire_site`, called on every checkout of a pool that records
  acquire sites: the first frame outside greenpool, gevent, PyMongo and the
  standard library (the user's code), as a code object and an instruction
  offset. No frame is kept: a kept frame would keep its locals alive (a
  cursor whose ``__del__`` checks in the very connection);
* :class:`Hold`, what a pool knows of one checked-out connection (holder
  greenlet, since when, acquire site, purpose), and :class:`Holder`, the
  snapshot of it users read, with the holder's current site resolved;
* :class:`PoolReport`, a pool's holders and waiters at one moment;
* the text of all of these, for errors and logs.

What a checkout pays: the pool stores the holder greenlet (a
``getcurrent()``) beside the time it reads anyway; with acquire sites, also
:func:`acquire_site`: a frame object for each frame it walks, a dictionary
lookup per frame (the verdict on each file is cached) and a tuple.
Everything else (line numbers, names, the holder's current frame) is worked
out only when someone asks.

What must not live here: any pool state, any waiting, any event delivery
(``monitoring.py`` reports long holds, ``longholds.py`` watches for them).
Imports: the standard library, gevent, greenlet and PyMongo's packages (to
know their files), greenpool's base.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, NamedTuple

import bson
import gevent
import greenlet
import pymongo
from gevent import getcurrent

from greenpool.address import Address, format_address

__all__ = [
    "LISTED_HOLDERS", "Hold", "Holder", "PoolReport", "Site", "acquire_site", "describe_holders",
    "records_sites", "snapshot",
]

#: How many holders an exhaustion error names (the longest-held first).
LISTED_HOLDERS = 5

_now = time.monotonic
_getframe = sys._getframe

#: Where a checkout came from: a code object and the offset of the
#: instruction it was at (resolved to a line only when read).
RawSite = tuple[CodeType, int]


def _package_dir(module: Any) -> str:
    return os.path.dirname(str(module.__file__)) + os.sep


_GREENPOOL = os.path.dirname(os.path.dirname(__file__)) + os.sep
_GEVENT = (_package_dir(gevent), _package_dir(greenlet))
# PyMongo's distribution: pymongo, bson and gridfs side by side.
_LIBRARIES = (_GREENPOOL, *_GEVENT, _package_dir(pymongo), _package_dir(bson),
              os.path.join(os.path.dirname(_package_dir(pymongo).rstrip(os.sep)), "gridfs")
              + os.sep)
# The standard library counts as library code too: @contextmanager frames
# sit between a ``with`` and greenpool, and a holder blocked in http.client
# or time.sleep is best shown at the application's line that called it.
_STDLIB = _package_dir(contextlib)
_INSTALLED = ("site-packages", "dist-packages")  # beneath the stdlib on some systems

# co_filename -> whether it is library code; filled as files are met.
_library: dict[str, bool] = {}


def _classify(filename: str) -> bool:
    verdict = _library[filename] = filename.startswith(_LIBRARIES) or (
        filename.startswith(_STDLIB) and not any(part in filename for part in _INSTALLED))
    return verdict


def _is_library(filename: str) -> bool:
    verdict = _library.get(filename)
    return _classify(filename) if verdict is None else verdict


def records_sites(acquire_sites: bool | None, long_hold_threshold: float | None) -> bool:
    """Whether a pool records acquire sites: as asked, or by default (None)
    when it reports long holds, as HikariCP records the borrow site only
    with leak detection on: the walk costs 0.25 µs on a bare pool's checkout
    and 0.15-0.2 µs more per frame of library code above it."""
    return long_hold_threshold is not None if acquire_sites is None else bool(acquire_sites)


def acquire_site(depth: int = 2) -> RawSite | None:
    """Where the checkout under way was asked for: the first frame outside
    greenpool, gevent, PyMongo and the standard library, from ``depth``
    frames up (2: the caller of the function that calls this). When every
    frame is library code (a greenlet of greenpool's own, such as a cursor's
    reaper), the outermost frame outside the standard library."""
    frame: FrameType | None = _getframe(depth)
    first = frame
    library = _library
    while frame is not None:  # _is_library inline: this runs on every checkout
        code = frame.f_code
        internal = library.get(code.co_filename)
        if internal is None:
            internal = _classify(code.co_filename)
        if not internal:
            return code, frame.f_lasti
        frame = frame.f_back
    return None if first is None else _outermost_package_frame(first)


def _outermost_package_frame(frame: FrameType) -> RawSite:
    found = frame
    walked: FrameType | None = frame
    while walked is not None:
        if walked.f_code.co_filename.startswith(_LIBRARIES):
            found = walked
        walked = walked.f_back
    return found.f_code, found.f_lasti


@dataclass(frozen=True)
class Site:
    """A place in the code: ``file:line in function``; for where a holder
    is now, also the library function it is inside (``Client.command``)."""

    filename: str
    lineno: int
    function: str
    inside: str | None = None

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno} in {self.function}"
        return where if self.inside is None else f"{where}, inside {self.inside}"

    @classmethod
    def of(cls, raw: RawSite) -> Site:
        """The site a checkout recorded cheaply (a code object and an instruction
        offset), resolved to its file, line and function when a report reads it."""
        code, offset = raw
        line = code.co_firstlineno
        for start, end, number in code.co_lines():
            if start <= offset < end:
                line = number if number is not None else line
                break
        return cls(code.co_filename, line, code.co_qualname)

    @classmethod
    def of_frame(cls, frame: FrameType, inside: FrameType | None = None) -> Site:
        """Where ``frame`` is now; ``inside`` names the pool or driver frame it waits in."""
        return cls(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_qualname,
                   None if inside is None else inside.f_code.co_qualname)


class Hold(NamedTuple):
    """What a pool knows of one checked-out connection."""

    connection_id: int
    #: The greenlet that checked it out.
    greenlet: Any
    #: When (``time.monotonic()``).
    since: float
    site: RawSite | None
    #: ``"other"``, ``"cursor"`` or ``"transaction"``.
    purpose: str
    #: Kept past its operation by a cursor or a transaction (load-balanced mode).
    pinned: bool


@dataclass(frozen=True)
class Holder:
    """One checked-out connection and its holder, as of a moment.

    ``acquired_at`` is where it was checked out (the first frame outside
    greenpool, gevent, PyMongo and the standard library), ``now_at`` where
    its holder greenlet is
    now, found the same way (None once that greenlet has ended: the
    connection was never checked in).
    """

    connection_id: int
    #: Seconds since it was checked out.
    held_for: float
    #: The holder greenlet's name (gevent's ``Greenlet.name``).
    greenlet: str
    acquired_at: Site | None
    now_at: Site | None
    #: ``"other"``, ``"cursor"`` or ``"transaction"``.
    purpose: str = "other"
    pinned: bool = False
    #: The holder greenlet has ended without checking the connection in.
    ended: bool = False

    def __str__(self) -> str:
        held = _duration(self.held_for)
        what = f"connection {self.connection_id}, held {held} by {self.greenlet}"
        if self.pinned:
            what += f" (pinned to a {self.purpose})"
        elif self.purpose != "other":
            what += f" (for a {self.purpose})"
        parts = [] if self.acquired_at is None else [f"checked out at {self.acquired_at}"]
        if self.ended:
            parts.append("its greenlet has ended without checking it in")
        elif self.now_at is not None:
            parts.append(f"now at {self.now_at}")
        return f"{what}: {'; '.join(parts)}" if parts else what

    def fields(self) -> dict[str, Any]:
        """For structured logs: the fields, sites as text."""
        return {
            "driverConnectionId": self.connection_id,
            "heldMS": self.held_for * 1000,
            "holder": self.greenlet,
            "acquireSite": None if self.acquired_at is None else str(self.acquired_at),
            "currentSite": None if self.now_at is None else str(self.now_at),
            "purpose": self.purpose,
            "pinned": self.pinned,
            "ended": self.ended,
        }


def holder_of(hold: Hold, now: float) -> Holder:
    """The snapshot of ``hold`` at ``now``, with the holder's current site."""
    glet = hold.greenlet
    ended = bool(getattr(glet, "dead", False))
    frame = None if ended else _frame_of(glet)
    return Holder(
        connection_id=hold.connection_id,
        held_for=max(now - hold.since, 0.0),
        greenlet=greenlet_name(glet),
        acquired_at=None if hold.site is None else Site.of(hold.site),
        now_at=None if frame is None else current_site(frame),
        purpose=hold.purpose, pinned=hold.pinned, ended=ended,
    )


def snapshot(holds: Iterable[Hold], limit: int | None = None) -> tuple[Holder, ...]:
    """The holders, longest-held first; only the first ``limit`` when given
    (their current frames are looked at, nobody else's)."""
    now = _now()
    chosen = (sorted(holds, key=_since) if limit is None
              else heapq.nsmallest(limit, holds, key=_since))
    return tuple(holder_of(hold, now) for hold in chosen)


def _since(hold: Hold) -> float:
    return hold.since


def describe_holders(holders: Iterable[Holder], total: int) -> str:
    """The lines an exhaustion error adds: ``holders`` (the longest-held
    ``total`` were asked for), one per line."""
    listed = list(holders)
    lines = [f"  {holder}" for holder in listed]
    if not lines:
        return ""
    more = total - len(lines)
    if more > 0:
        lines.append(f"  ... and {more} more")
    if all(holder.acquired_at is None for holder in listed):
        lines.append("  (where each was checked out: acquire_sites=True records it)")
    return "\nHeld by, longest first:\n" + "\n".join(lines)


# -- greenlets and their frames -----------------------------------------------------------


def greenlet_name(glet: Any) -> str:
    """A greenlet's name as gevent gives it (``Greenlet-12``), or what it is."""
    name = getattr(glet, "name", None)
    if isinstance(name, str) and name:
        return name
    if getattr(glet, "parent", True) is None:
        return "the main greenlet"
    return f"greenlet {id(glet):#x}"


def _frame_of(glet: Any) -> FrameType | None:
    """The frame ``glet`` runs in now: its suspended top frame, or ours."""
    if glet is getcurrent():
        return _getframe(2)
    frame: FrameType | None = getattr(glet, "gr_frame", None)
    return frame


def current_site(frame: FrameType) -> Site:
    """Where a greenlet whose top frame is ``frame`` is: the innermost frame
    outside the libraries, and the library function it called; without
    one (a greenlet of greenpool's own), the innermost frame outside gevent."""
    fallback = None
    called = None
    walked: FrameType | None = frame
    while walked is not None:
        filename = walked.f_code.co_filename
        if not _is_library(filename):
            return Site.of_frame(walked, called)
        if fallback is None and not filename.startswith(_GEVENT):
            fallback = walked
        called = walked
        walked = walked.f_back
    return Site.of_frame(fallback if fallback is not None else frame)


def current_stack(glet: Any) -> str:
    """``glet``'s stack now, most recent call last, as a traceback shows it."""
    import traceback

    if getattr(glet, "dead", False):
        return "  (the greenlet has ended)\n"
    frame = _frame_of(glet)
    if frame is None:
        return "  (the greenlet has not started)\n"
    return "".join(traceback.format_stack(frame))


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


# -- a pool's report ----------------------------------------------------------------------


@dataclass(frozen=True)
class PoolReport:
    """A pool's holders and waiters at one moment (``str()`` reads it out)."""

    address: Address
    #: Every holder, longest-held first.
    holders: tuple[Holder, ...]
    #: Checkouts waiting for a connection.
    waiting: int
    #: How long the longest-waiting checkout has waited (seconds), if any.
    oldest_wait: float | None
    in_use: int
    available: int
    pending: int
    #: 0: no limit.
    max_pool_size: int

    def __str__(self) -> str:
        limit = f"maxPoolSize {self.max_pool_size}" if self.max_pool_size else "no maxPoolSize"
        waits = "nobody waiting" if not self.waiting else (
            f"{self.waiting} waiting, the longest for {_duration(self.oldest_wait or 0.0)}")
        head = (f"Connection pool {format_address(self.address)}: {self.in_use} in use "
                f"({limit}), {self.available} available, {self.pending} pending; {waits}")
        return head + describe_holders(self.holders, len(self.holders))

    def fields(self) -> dict[str, Any]:
        """For structured logs: the CMAP logging spec's names where it has them."""
        host, port = self.address
        fields: dict[str, Any] = {
            "message": "Connection pool report", "serverHost": host,
            "inUse": self.in_use, "available": self.available, "pending": self.pending,
            "maxPoolSize": self.max_pool_size, "waiting": self.waiting,
            "oldestWaitMS": None if self.oldest_wait is None else self.oldest_wait * 1000,
            "holders": [holder.fields() for holder in self.holders],
        }
        if port is not None:
            fields["serverPort"] = port
        return fields
