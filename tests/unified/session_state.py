"""What the format's session assertions look at (assertSessionTransactionState,
assertSessionDirty, assertSessionPinned): state neither library makes public, read from
each one's session as it keeps it. PyMongo's ``ClientSession`` keeps it in
``_transaction`` and ``_server_session``; greenpool's ``Session`` in ``state``, ``dirty``
and its pins.
"""

from __future__ import annotations

from typing import Any

from pymongo.client_session import ClientSession

try:  # where PyMongo keeps its transaction states moved in 4.10
    from pymongo.client_session_shared import _TxnState
except ImportError:  # pragma: no cover - older PyMongo
    from pymongo.client_session import _TxnState  # type: ignore[attr-defined,no-redef]

# The format's names for the transaction states each library has.
_STATES = {"NONE": "none", "STARTING": "starting", "IN_PROGRESS": "in_progress",
           "COMMITTED": "committed", "COMMITTED_EMPTY": "committed", "ABORTED": "aborted"}


def transaction_state(session: Any) -> str:
    if isinstance(session, ClientSession):
        # PyMongo's states are _TxnState's integers.
        names = {value: name for name, value in vars(_TxnState).items() if name.isupper()}
        return _STATES[names[session._transaction.state]]
    return _STATES[session.state.name]


def dirty(session: Any) -> bool:
    if isinstance(session, ClientSession):
        return bool(session._server_session.dirty)
    return bool(session.dirty)


def pinned(session: Any) -> bool:
    if isinstance(session, ClientSession):
        return session._pinned_address is not None or session._pinned_connection is not None
    return session.pinned is not None or session.pinned_address is not None
