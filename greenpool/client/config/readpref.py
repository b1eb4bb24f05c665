"""Read preferences: which server a read may go to, and what the command says about it.

Rules of this module: parsing and checking read preferences, and the ``$readPreference``
field they put on a command; no server selection (:mod:`greenpool.client.topology.selection`
chooses servers by them) and no I/O.

Once a server is selected, a read preference becomes the ``$readPreference``
field of the command, exactly as the Server Selection spec ("Passing read
preference to mongos and load balancers", "Topology type: Single", "Topology
types: ReplicaSetWithPrimary or ReplicaSetNoPrimary") says:

* to a mongos or a load balancer: nothing for mode primary, otherwise the
  read preference document (``mode``, ``tags``, ``maxStalenessSeconds``);
* to a standalone server: nothing;
* to a replica set member found by discovery: nothing for mode primary,
  otherwise the read preference document;
* to a replica set member of a direct connection: the read preference
  document, with primary sent as ``primaryPreferred`` so that a secondary can
  answer (not inside a transaction, which runs on a primary).

Values are PyMongo's read preference objects
(``pymongo.ReadPreference.SECONDARY``, ``pymongo.read_preferences.Nearest(
tag_sets=[{"dc": "ny"}])``...), a mode name (``"secondaryPreferred"``) or a
document as the unified test format writes it
(``{"mode": "nearest", "tags": [{"dc": "ny"}], "maxStalenessSeconds": 120}``).

>>> command_field(coerce("secondaryPreferred"), load_balanced=True,
...               server_type=SERVER_TYPE.LoadBalancer, direct=False, in_transaction=False)
{'mode': 'secondaryPreferred'}
>>> command_field(coerce("primary"), load_balanced=True,
...               server_type=SERVER_TYPE.LoadBalancer, direct=False, in_transaction=False) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pymongo.errors import ConfigurationError as _PyMongoConfigurationError
from pymongo.read_preferences import (
    _MONGOS_MODES,
    Primary,
    ReadPreference,
    _ServerMode,
    make_read_preference,
)
from pymongo.server_type import SERVER_TYPE

from greenpool.errors import ConfigurationError

__all__ = ["PRIMARY", "PRIMARY_ALONE", "SERVER_TYPE", "WRITE", "coerce", "command_field",
           "make"]

#: The default read preference.
PRIMARY: _ServerMode = ReadPreference.PRIMARY
#: What a write is sent with (the collection API's inserts, updates,
#: deletes, findAndModify and its other writing commands): primary for
#: server selection, and no ``$readPreference`` whatever the server, since
#: the Server Selection spec's rules for sending one are for reads (PyMongo's
#: writes carry none). Told apart from PRIMARY by identity.
WRITE: _ServerMode = Primary()
_PRIMARY_PREFERRED = {"mode": "primaryPreferred"}
_DOCUMENT_KEYS = frozenset({"mode", "tags", "maxStalenessSeconds"})


def make(mode: str, tag_sets: Sequence[Mapping[str, Any]] | None = None,
         max_staleness: int = -1) -> _ServerMode:
    """A read preference from its parts, validated: the mode's name in the
    spec's camel case, a list of tag sets (documents of strings), and
    maxStalenessSeconds (-1 for none, else a positive number of seconds).

    :raises greenpool.ConfigurationError: naming the bad value; primary with a
        non-empty tag set or with maxStalenessSeconds is refused, as the spec
        requires (empty tag sets match any server, so primary takes them).
    """
    if not isinstance(mode, str) or mode not in _MONGOS_MODES:
        raise ConfigurationError(
            f"read preference mode {mode!r} is not one of {', '.join(_MONGOS_MODES)}")
    # No tag sets at all means any server, as [{}] does; an empty list must
    # not reach the server (the spec's document structure: "tags" has at
    # least one document) nor count as tags given with primary.
    tags = None if tag_sets is None else _check_tag_sets(tag_sets) or None
    if (not isinstance(max_staleness, int) or isinstance(max_staleness, bool)
            or (max_staleness != -1 and max_staleness <= 0)):
        raise ConfigurationError(
            f"maxStalenessSeconds must be -1 (no maximum) or a positive int, "
            f"not {max_staleness!r}")
    described = f"mode={mode!r}, tags={tags!r}, maxStalenessSeconds={max_staleness!r}"
    if mode == "primary":
        # Empty tag sets match any server: [{}] is the spec's default, not tags.
        if any(tags or ()) or max_staleness != -1:
            raise ConfigurationError(
                f"invalid read preference ({described}): mode primary takes no tags and no "
                "maxStalenessSeconds; use primaryPreferred to pass them")
        # The one instance: the hot paths know primary reads by identity.
        return PRIMARY
    try:
        return make_read_preference(_MONGOS_MODES.index(mode), tags, max_staleness)
    except _PyMongoConfigurationError:
        # The checks above are all PyMongo makes today; should a release add
        # one, its words are not greenpool's to pass on.
        raise ConfigurationError(f"invalid read preference ({described})") from None


def coerce(value: object) -> _ServerMode:
    """``value`` as a PyMongo read preference: one already, a mode name, or a
    ``{"mode", "tags", "maxStalenessSeconds"}`` document.

    :raises greenpool.ConfigurationError: naming the bad value.
    """
    if isinstance(value, _ServerMode):
        # Every primary read preference is the same (no tags, no staleness):
        # the hot paths know it by identity. WRITE keeps its own (a write's,
        # which carries no $readPreference).
        if value.mode == PRIMARY.mode and value is not WRITE:
            return PRIMARY
        return value
    if isinstance(value, str):
        return make(value)
    if isinstance(value, Mapping):
        unknown = set(value) - _DOCUMENT_KEYS
        if unknown or "mode" not in value:
            raise ConfigurationError(
                f"a read preference document has a 'mode' and may have 'tags' and "
                f"'maxStalenessSeconds', not {dict(value)!r}")
        staleness = value.get("maxStalenessSeconds", -1)
        return make(value["mode"], value.get("tags"), -1 if staleness is None else staleness)
    raise ConfigurationError(
        f"read_preference must be a PyMongo read preference, a mode name or a document, "
        f"not {value!r}")


#: The server types to which a direct connection never sends a primary read
#: preference (see command_field): a shortcut for the hot path.
PRIMARY_ALONE = frozenset({SERVER_TYPE.Standalone, SERVER_TYPE.Unknown, SERVER_TYPE.Mongos})


def command_field(preference: _ServerMode, *, load_balanced: bool, server_type: int,
                  direct: bool, in_transaction: bool) -> dict[str, Any] | None:
    """The ``$readPreference`` a read command carries to this server (of a
    topology of type Single if ``direct``), or None when it must carry none
    (Server Selection spec, for OP_MSG)."""
    if load_balanced or server_type == SERVER_TYPE.Mongos:
        if preference.mode == PRIMARY.mode:
            return None
        return dict(preference.document)
    if server_type in (SERVER_TYPE.Standalone, SERVER_TYPE.Unknown):
        return None
    if preference.mode == PRIMARY.mode:
        # A direct connection to a replica set member: whatever its state, it
        # may answer; inside a transaction the member is the primary. A member
        # discovery selected for a primary read is the primary.
        return None if in_transaction or not direct else dict(_PRIMARY_PREFERRED)
    return dict(preference.document)


def _check_tag_sets(tag_sets: object) -> list[dict[str, str]]:
    if isinstance(tag_sets, (str, bytes, Mapping)) or not isinstance(tag_sets, Sequence):
        raise ConfigurationError(
            f"read preference tags must be a list of documents, not {tag_sets!r}")
    checked = []
    for tag_set in tag_sets:
        if not isinstance(tag_set, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in tag_set.items()):
            raise ConfigurationError(
                f"a read preference tag set must be a document of strings, not {tag_set!r} "
                f"(in {tag_sets!r})")
        checked.append(dict(tag_set))
    return checked
