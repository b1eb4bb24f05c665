"""The pool state table, driven directly: no greenlets, no sockets."""

from __future__ import annotations

import itertools

import pytest

from greenpool.pool.poolstate import TRANSITIONS, Action, PoolState, transition

P, R, C = PoolState.PAUSED, PoolState.READY, PoolState.CLOSED


def test_every_pair_has_an_entry() -> None:
    assert set(TRANSITIONS) == set(itertools.product(PoolState, Action))


@pytest.mark.parametrize(("state", "action", "to", "emit"), [
    (P, Action.READY, R, True),
    (P, Action.CLEAR, P, False),  # clearing a paused pool emits nothing
    (P, Action.CLOSE, C, True),
    (R, Action.READY, R, False),  # readying a ready pool emits nothing
    (R, Action.CLEAR, P, True),
    (R, Action.CLOSE, C, True),
    (C, Action.READY, C, False),  # a closed pool never reopens
    (C, Action.CLEAR, C, False),
    (C, Action.CLOSE, C, False),
])
def test_transitions(state: PoolState, action: Action, to: PoolState, emit: bool) -> None:
    step = transition(state, action)
    assert (step.state, step.emit) == (to, emit)
