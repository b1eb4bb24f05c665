"""What a session and its transactions run with, as PyMongo's ``start_session`` and
``start_transaction`` take it.

* A session is causally consistent unless ``causal_consistency=False`` or it is a
  ``snapshot`` session (the two exclude each other): :func:`session_modes`.
* A transaction's read concern, write concern, read preference and maxCommitTimeMS
  come from the ``start_transaction`` call, else the session's
  ``default_transaction_options`` (PyMongo's
  :class:`~pymongo.client_session.TransactionOptions`), else the client's:
  :func:`transaction_settings`. Its write concern must be acknowledged: its commit
  is what makes it durable.

Rules. Pure functions of values: no I/O, no session state. Messages are greenpool's
own and name the bad value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from pymongo.client_session import TransactionOptions  # type: ignore[attr-defined]
from pymongo.errors import ConfigurationError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import _ServerMode
from pymongo.write_concern import WriteConcern

from greenpool.client.config import readpref
from greenpool.client.operations import concern

__all__ = ["ClientDefaults", "TransactionSettings", "session_modes", "transaction_settings"]


class ClientDefaults(NamedTuple):
    """The client's read concern, write concern and read preference, which a
    transaction inherits when neither the call nor the session sets them."""

    read_concern: ReadConcern
    write_concern: WriteConcern
    read_preference: _ServerMode


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    """One transaction's options, resolved."""

    read_concern: ReadConcern
    write_concern: WriteConcern
    read_preference: _ServerMode
    max_commit_time_ms: int | None

    @property
    def read_concern_field(self) -> dict[str, Any] | None:
        """The readConcern the transaction's first command carries (None: none)."""
        return concern.read_concern_field(self.read_concern)

    @property
    def write_concern_field(self) -> dict[str, Any] | None:
        """The writeConcern its commit and abort carry (None: the server's default)."""
        return concern.write_concern_field(self.write_concern)


def session_modes(causal_consistency: object, default_transaction_options: object,
                  snapshot: object) -> tuple[bool, bool]:
    """``(causally consistent, snapshot)`` for ``start_session``'s arguments,
    checked: a snapshot session cannot be causally consistent (PyMongo's rule)."""
    if causal_consistency is not None and not isinstance(causal_consistency, bool):
        raise TypeError(f"causal_consistency must be True, False or None, "
                        f"not {causal_consistency!r}")
    if snapshot is not None and not isinstance(snapshot, bool):
        raise TypeError(f"snapshot must be True or False, not {snapshot!r}")
    if default_transaction_options is not None and not isinstance(
            default_transaction_options, TransactionOptions):
        raise TypeError(f"default_transaction_options must be a "
                        f"pymongo.client_session.TransactionOptions, "
                        f"not {default_transaction_options!r}")
    if snapshot and causal_consistency:
        raise ConfigurationError("a snapshot session cannot be causally consistent: "
                                 "give causal_consistency=False or leave it out")
    return (not snapshot if causal_consistency is None else causal_consistency), bool(snapshot)


def transaction_settings(read_concern: object, write_concern: object, read_preference: object,
                         max_commit_time_ms: object, defaults: TransactionOptions | None,
                         client: ClientDefaults) -> TransactionSettings:
    """A transaction's options: each given one, else the session's default,
    else the client's; checked."""
    def inherited(given: object, name: str, client_value: Any) -> Any:
        if given is not None:
            return given
        default = getattr(defaults, name, None) if defaults is not None else None
        return client_value if default is None else default

    chosen_read_concern = concern.check_read_concern(
        inherited(read_concern, "read_concern", None), default=client.read_concern)
    chosen_write_concern = concern.check_write_concern(
        inherited(write_concern, "write_concern", None), default=client.write_concern)
    if not chosen_write_concern.acknowledged:
        raise ConfigurationError(
            f"transactions do not support unacknowledged write concern "
            f"({chosen_write_concern.document!r}): a transaction's commit must be "
            f"acknowledged")
    preference = inherited(read_preference, "read_preference", client.read_preference)
    max_commit = inherited(max_commit_time_ms, "max_commit_time_ms", None)
    if max_commit is not None and (isinstance(max_commit, bool) or not isinstance(max_commit, int)
                                   or max_commit <= 0):
        raise ValueError(f"max_commit_time_ms must be a positive int or None, "
                         f"not {max_commit!r}")
    return TransactionSettings(chosen_read_concern, chosen_write_concern,
                               readpref.coerce(preference), max_commit)
