"""What the format's session assertions look at (assertSessionTransactionState,
assertSessionDirty, assertSessionPinned): state neither library makes public, read from
each one's session as it keeps it. PyMongo's ``ClientSession`` keeps it in
``_transaction`` and ``_server_session``; greenpool's ``Session`` in ``state``, ``dirty``
and its pins.
"""

from __future__ import annotations

import sys
from typing import Any

from pymongo.client_session import ClientSession

# The format's names for the transaction states each library has.
_STATES = {"NONE": "none", "STARTING": "starting", "IN_PROGRESS": "in_progress",
           "COMMITTED": "committed", "COMMITTED_EMPTY": "committed", "ABORTED": "aborted"}


def transaction_state(session: Any) -> str:
    if isinstance(session, ClientSession):
        # PyMongo's states are _TxnState's integers. _TxnState lives beside the session's
        # _Transaction class, in whichever module a release puts them both.
        states = sys.modules[type(session._transaction).__module__]._TxnState
        names = {value: name for name, value in vars(states).items() if name.isupper()}
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
