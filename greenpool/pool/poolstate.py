"""The pool's state machine, as data.

Rules of this module:

* everything that decides a pool state transition lives here, and nothing
  else does: no I/O, no greenlets, no events, just the table;
* every (state, action) pair has an entry, so there are no illegal moves to
  raise on. Callers race (a monitor may mark a pool ready while the
  application closes it), and the table says what each race ends in.

A pool starts PAUSED. ``ready`` resumes it, ``clear`` pauses it (and bumps
the generation, which is the caller's business, even when it emits nothing),
``close`` ends it. CLOSED is final. A transition reports whether the matching
event (PoolReady, PoolCleared, PoolClosed) must be emitted: "ready on a ready
pool emits nothing" and "clear on a paused pool emits nothing" are the spec's.
Load-balanced clears do not go through this table: they never pause.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["Action", "PoolState", "Transition", "transition"]


class PoolState(enum.Enum):
    """A pool's CMAP state: paused (no checkouts), ready, or closed."""

    PAUSED = "paused"
    READY = "ready"
    CLOSED = "closed"


class Action(enum.Enum):
    READY = "ready"
    CLEAR = "clear"
    CLOSE = "close"


class Transition(NamedTuple):
    state: PoolState
    emit: bool


_P, _R, _C = PoolState.PAUSED, PoolState.READY, PoolState.CLOSED

TRANSITIONS: dict[tuple[PoolState, Action], Transition] = {
    (_P, Action.READY): Transition(_R, emit=True),
    (_P, Action.CLEAR): Transition(_P, emit=False),
    (_P, Action.CLOSE): Transition(_C, emit=True),
    (_R, Action.READY): Transition(_R, emit=False),
    (_R, Action.CLEAR): Transition(_P, emit=True),
    (_R, Action.CLOSE): Transition(_C, emit=True),
    (_C, Action.READY): Transition(_C, emit=False),
    (_C, Action.CLEAR): Transition(_C, emit=False),
    (_C, Action.CLOSE): Transition(_C, emit=False),
}


def transition(state: PoolState, action: Action) -> Transition:
    """Where ``action`` takes a pool in ``state``, and whether to emit."""
    return TRANSITIONS[(state, action)]
