"""The errors greenpool raises.

Rules of this module: the exception classes of every layer, and the small helpers that
build their messages; nothing that does I/O or imports another greenpool module but
:mod:`greenpool.address`. Each class derives from the PyMongo error an application
already catches.

Each pool error derives from the PyMongo error an application already catches
for the same condition, so ``except pymongo.errors.AutoReconnect`` and retry
loops written for PyMongo keep working.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pymongo import errors as _pymongo_errors

from greenpool.address import Address, format_address

__all__ = [
    "ConfigurationError",
    "DiscoveryError",
    "OptionTypeError",
    "PoolClearedError",
    "PoolClosedError",
    "WaitQueueTimeoutError",
]


class ConfigurationError(_pymongo_errors.ConfigurationError, ValueError):
    """An option has a bad name, type or value; the message names it."""

    __module__ = "greenpool"


class OptionTypeError(ConfigurationError, TypeError):
    """An option's value is of a type it cannot take; the message names it.

    A :class:`ConfigurationError`, and a ``TypeError`` as PyMongo's
    MongoClient raises for the same argument, so that either ``except``
    clause catches it."""

    __module__ = "greenpool"


class PoolClosedError(_pymongo_errors.PyMongoError):
    """A checkout was attempted on a closed pool."""

    __module__ = "greenpool"

    message = "Attempted to check out a connection from closed connection pool"

    def __init__(self, address: Address) -> None:
        super().__init__(f"{self.message} {format_address(address)}")
        self.address = address


class PoolClearedError(_pymongo_errors.AutoReconnect):
    """The pool was cleared (or is paused): retry the operation.

    Raised to checkouts waiting when the pool is cleared, to checkouts on a
    paused pool, and to operations whose connection was interrupted by a clear.
    It is an :class:`~pymongo.errors.AutoReconnect`, which PyMongo and
    greenpool treat as retryable; it never marks a server Unknown.
    """

    __module__ = "greenpool"

    def __init__(
        self, message: str, address: Address, *, cause: BaseException | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.address = address
        self.cause = cause

    @classmethod
    def cleared(cls, address: Address, cause: BaseException | None) -> PoolClearedError:
        """The spec's error for a checkout refused because of a clear."""
        what = repr(cause) if cause is not None else "an unknown error"
        message = (
            f"Connection pool for {format_address(address)} was cleared because "
            f"another operation failed with: {what}"
        )
        return cls(message, address, cause=cause)

    @classmethod
    def not_ready(cls, address: Address) -> PoolClearedError:
        """A checkout on a pool that was never marked ready."""
        message = (
            f"Connection pool for {format_address(address)} is paused: "
            "the server has not been checked yet"
        )
        return cls(message, address)

    @classmethod
    def interrupted(cls, address: Address) -> PoolClearedError:
        """The spec's error for a connection interrupted by clear(interrupt...)."""
        message = (
            f"Connection to {format_address(address)} interrupted due to server monitor timeout"
        )
        return cls(message, address)

    @classmethod
    def forked(cls, address: Address) -> PoolClearedError:
        """A checkout that began in the parent and woke up in a forked child."""
        message = f"Connection pool for {format_address(address)} was reset after a fork"
        return cls(message, address)


class WaitQueueTimeoutError(_pymongo_errors.WaitQueueTimeoutError):
    """No connection became available within the checkout timeout
    (waitQueueTimeoutMS, or what was left of an operation's timeoutMS).

    ``message`` is the spec's text; ``str(error)`` adds the address and the
    pool's counts at the moment of the timeout, which is what you need to tell
    a pool that is too small from connections that are never checked in.
    In load-balanced mode ``str(error)`` begins with the Load Balancer spec's
    message with the in-use counts by purpose. Then, one per line, come the
    connections' holders, longest-held first (at most
    ``greenpool.pool.holds.LISTED_HOLDERS``): how long each has been held, by
    which greenlet, where it was checked out and where that greenlet is now.
    ``holders`` holds the same, as :class:`greenpool.pool.holds.Holder` records.
    """

    __module__ = "greenpool"

    message = "Timed out while checking out a connection from connection pool"

    def __init__(self, address: Address, text: str, *, holders: tuple[Any, ...] = (),
                 **details: Any) -> None:
        super().__init__(text)
        self.address = address
        self.details = details
        #: The longest-held connections' holders
        #: (:class:`greenpool.pool.holds.Holder`), longest first.
        self.holders = holders


class ProtocolError(_pymongo_errors.ProtocolError):
    """A message on the wire broke the MongoDB wire protocol.

    Raised for a bad header, an unknown opcode, flag bit or section kind, a
    truncated or oversized message, a body that does not decompress, or BSON
    that does not decode. The stream can no longer be trusted: close the
    connection. It is a :class:`pymongo.errors.ProtocolError`, so code that
    catches PyMongo's error keeps working.
    """

    __module__ = "greenpool"


class DiscoveryError(_pymongo_errors.PyMongoError):
    """What server discovery holds against a server (the SDAM spec's rules): a
    member of another replica set, a primary marked stale, a reply that does not
    fit the topology. It is never raised: it is the ``error`` of the server's
    description, which server selection's timeout error names.
    """

    __module__ = "greenpool"


class NotMongoDBError(ProtocolError):
    """The handshake's reply was not a MongoDB message at all: something
    listens at the address (a web server, another service), but it is not a
    MongoDB server. It is the ``__cause__`` of the
    :class:`pymongo.errors.AutoReconnect` the handshake raises.
    """


class AuthenticationError(_pymongo_errors.OperationFailure):
    """Authentication failed: the server refused the credentials, or could not
    prove that it knows them.

    An :class:`pymongo.errors.OperationFailure` whose ``code`` is the server's
    (18, ``AuthenticationFailed``, for a wrong password) or 18 when greenpool
    itself detected the failure (a forged server signature, a downgrade to too
    few iterations, a nonce that is not ours). ``details`` is the server's
    reply when there is one. The message never contains the password.
    """

    __module__ = "greenpool"

    #: The server's code for a failed authentication.
    AUTHENTICATION_FAILED = 18

    def __init__(
        self,
        message: str,
        code: int | None = AUTHENTICATION_FAILED,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code, details)


_E = TypeVar("_E", bound=BaseException)


def caused_by(error: _E, cause: BaseException) -> _E:
    """``error`` with ``cause`` as its ``__cause__``, for ``raise caused_by(error, cause)
    from cause`` in the modules of the compiled build: mypyc compiles ``raise ... from``
    without its cause, and callers read it (a malformed hello is how a server that is not
    MongoDB shows)."""
    error.__cause__ = cause
    return error
