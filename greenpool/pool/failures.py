"""What a failed checkout raises: the refusal, and the wait-queue timeout error.

What lives here: :func:`refusal`, why a pool in a given state refuses a checkout
now, and :func:`timeout_error`, the WaitQueueTimeoutError with the pool's counts
and the connections' holders. Both are functions of what the pool passes in:
they build errors, and the pool raises and reports them (``Pool._fail_checkout``:
the tally, ConnectionCheckOutFailed).

What must not live here: any change to a pool, and any event. Imports: the pool
core only.
"""

from __future__ import annotations

from collections.abc import Sequence

from greenpool.address import Address, format_address
from greenpool.errors import PoolClearedError, PoolClosedError, WaitQueueTimeoutError
from greenpool.pool.connection import PoolStats
from greenpool.pool.holds import LISTED_HOLDERS, Hold, describe_holders, snapshot
from greenpool.pool.poolstate import PoolState

__all__ = ["refusal", "timeout_error"]


def refusal(state: PoolState, address: Address, generation: int,
            cause: BaseException | None) -> BaseException | None:
    """The error a checkout gets from a pool in ``state`` (None: ready, no
    refusal). A paused pool that was never cleared (``generation`` 0) says it
    is not ready yet; one that was cleared cites the clear's ``cause``."""
    if state is PoolState.READY:
        return None
    if state is PoolState.CLOSED:
        return PoolClosedError(address)
    if generation == 0:
        return PoolClearedError.not_ready(address)
    return PoolClearedError.cleared(address, cause)


def timeout_error(stats: PoolStats, holds: Sequence[Hold], waited: float,
                  load_balanced: bool) -> WaitQueueTimeoutError:
    """The error of a checkout that waited ``waited`` seconds in vain, naming
    the pool's counts (by purpose, in load-balanced mode, as the Load Balancer
    spec words it) and the longest holders of its connections."""
    holders = snapshot(holds, LISTED_HOLDERS)
    if load_balanced:
        counts = stats.in_use_by_purpose
        text = (
            "Timeout waiting for connection from the connection pool. "
            f"maxPoolSize: {stats.max_pool_size}, "
            f"connections in use by cursors: {counts['cursor']}, "
            f"connections in use by transactions: {counts['transaction']}, "
            f"connections in use by other operations: {counts['other']}"
        )
    else:
        text = (
            f"{WaitQueueTimeoutError.message} {format_address(stats.address)} after "
            f"{waited * 1000:.0f} ms (maxPoolSize: {stats.max_pool_size}, in use: "
            f"{stats.in_use}, available: {stats.available}, pending: {stats.pending}, "
            f"waiting: {stats.waiting})"
        )
    return WaitQueueTimeoutError(
        stats.address, text + describe_holders(holders, len(holds)), holders=holders,
        waited=waited, max_pool_size=stats.max_pool_size,
        in_use=stats.in_use, in_use_by_purpose=dict(stats.in_use_by_purpose),
        available=stats.available, pending=stats.pending, waiting=stats.waiting,
    )
