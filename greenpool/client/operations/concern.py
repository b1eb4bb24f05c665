"""Read and write concern: where they come from and when they are sent.

The Read and Write Concern spec, with PyMongo's classes
(:class:`~pymongo.write_concern.WriteConcern`,
:class:`~pymongo.read_concern.ReadConcern`) so that user code passes the
objects it already builds:

* from the connection string (``w``, ``wTimeoutMS``, ``journal``,
  ``readConcernLevel``: :func:`from_settings`), then per database and
  collection (``get_database``, ``get_collection``, ``with_options``), each
  level inheriting its parent's unless given;
* on the wire (:func:`write_concern_field`, :func:`read_concern_field`):
  nothing for the server's default (``WriteConcern()``, ``ReadConcern()``),
  the document for anything else (``{w: 1}`` and ``{level: "local"}``
  included); never inside a transaction (the transaction's commit carries
  it), never on ``getMore``, never added to a generic command;
* an unacknowledged write concern (w=0, no journal) is sent with OP_MSG's
  moreToCome and has no reply; an explicit session with one is refused
  (:func:`check_session`), as PyMongo refuses it.

Rules. Pure functions of values: no I/O, no Client. Messages are greenpool's
own and name the bad value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.errors import ConfigurationError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

__all__ = [
    "check_read_concern",
    "check_session",
    "check_write_concern",
    "from_settings",
    "make_write_concern",
    "read_concern_field",
    "write_concern_field",
]


def make_write_concern(w: int | str | None = None, wtimeout: int | None = None,
                       journal: bool | None = None, fsync: bool | None = None) -> WriteConcern:
    """A write concern from the spec's fields (``w``, ``wtimeoutMS``,
    ``journal``) and PyMongo's ``fsync``, checked with greenpool's messages:
    ``w`` a number of servers >= 0 or a mode name, ``wtimeout`` milliseconds
    >= 0, ``journal`` and ``fsync`` bools, and not ``w=0`` with
    ``journal=True`` (the spec's one inconsistent write concern) or
    ``fsync=True``, nor both journal and fsync (as PyMongo refuses them):
    ConfigurationError."""
    if w is not None and (isinstance(w, bool) or not isinstance(w, int | str)
                          or (isinstance(w, int) and w < 0)):
        raise ValueError(f"w must be a number of servers >= 0 or a mode name such as "
                         f"'majority', not {w!r}")
    if wtimeout is not None and (isinstance(wtimeout, bool) or not isinstance(wtimeout, int)
                                 or wtimeout < 0):
        raise ValueError(f"wtimeoutMS must be a whole number of milliseconds >= 0, "
                         f"not {wtimeout!r}")
    if journal is not None and not isinstance(journal, bool):
        raise TypeError(f"journal must be True or False, not {journal!r}")
    if fsync is not None and not isinstance(fsync, bool):
        raise TypeError(f"fsync must be True or False, not {fsync!r}")
    if w == 0 and journal:
        raise ConfigurationError("w=0 and journal=True conflict: an unacknowledged write "
                                 "cannot wait for the journal")
    if w == 0 and fsync:
        raise ConfigurationError("w=0 and fsync=True conflict: an unacknowledged write "
                                 "cannot wait for the disk")
    if journal is not None and fsync is not None:
        raise ConfigurationError(f"journal={journal} and fsync={fsync}: give one of them, "
                                 "not both")
    return WriteConcern(w=w, wtimeout=wtimeout, j=journal, fsync=fsync)


def from_settings(extra: Mapping[str, Any]) -> tuple[WriteConcern, ReadConcern]:
    """The write and read concern a connection string asks for, from its
    validated options (``ClientSettings.extra``, keyed by lower-case name)."""
    write_concern = make_write_concern(extra.get("w"), extra.get("wtimeoutms"),
                                       extra.get("journal"), extra.get("fsync"))
    return write_concern, ReadConcern(extra.get("readconcernlevel"))


def check_write_concern(value: object, *, default: WriteConcern) -> WriteConcern:
    """``value`` (a ``write_concern=`` argument) or, for None, ``default``."""
    if value is None:
        return default
    if not isinstance(value, WriteConcern):
        raise TypeError(f"write_concern must be a pymongo.write_concern.WriteConcern, "
                        f"not {value!r}")
    return value


def check_read_concern(value: object, *, default: ReadConcern) -> ReadConcern:
    """``value`` (a ``read_concern=`` argument) or, for None, ``default``."""
    if value is None:
        return default
    if not isinstance(value, ReadConcern):
        raise TypeError(f"read_concern must be a pymongo.read_concern.ReadConcern, "
                        f"not {value!r}")
    return value


def write_concern_field(write_concern: WriteConcern) -> dict[str, Any] | None:
    """The ``writeConcern`` document to send, or None for the server's default."""
    return None if write_concern.is_server_default else write_concern.document


def timed(field: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``writeConcern`` document of an operation under timeoutMS: without
    ``wtimeout``, which timeoutMS replaces (the CSOT spec ignores deprecated
    timeout options then), and None if nothing else is left, as PyMongo sends it."""
    if field is None or "wtimeout" not in field:
        return field
    return {key: value for key, value in field.items() if key != "wtimeout"} or None


def read_concern_field(read_concern: ReadConcern) -> dict[str, Any] | None:
    """The ``readConcern`` document to send, or None for the server's default."""
    return read_concern.document or None


def check_session(session: object, write_concern: WriteConcern) -> None:
    """Refuse an explicit session with an unacknowledged write concern: its
    writes would go without the session's guarantees (PyMongo refuses it too).
    In a transaction the collection's write concern does not apply (the
    transaction's does, on its commit), so there is nothing to refuse."""
    if (session is not None and not write_concern.acknowledged
            and not getattr(session, "in_transaction", False)):
        raise ConfigurationError(
            f"an explicit session cannot be used with an unacknowledged write concern "
            f"({write_concern!r}): unacknowledged writes run outside any session")
