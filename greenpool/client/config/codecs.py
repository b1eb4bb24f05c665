"""Codec options: how user documents become BSON and come back.

A :class:`bson.codec_options.CodecOptions` is resolved once per client,
database and collection, each level inheriting its parent's unless given:

* the client's, from the connection string's ``uuidRepresentation`` and
  PyMongo's codec keyword arguments (:data:`KEYWORDS`; a keyword wins over
  the connection string), by :func:`client_codec_options`;
* a database's or a collection's, from ``codec_options=``
  (:func:`check_codec_options`).

The collection API encodes its commands and decodes their replies with the
collection's options (:class:`~greenpool.wire.messages.Outgoing` carries them
to the wire); the command API keeps the default ones.

Rules. Pure functions: no I/O. Bad values get greenpool's own messages,
naming the keyword and the value; bson's error is the cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bson.binary import UuidRepresentation
from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions, DatetimeConversion

__all__ = ["KEYWORDS", "check_codec_options", "client_codec_options",
           "write_reply_options"]

#: The codec keyword arguments a Client takes, as PyMongo's MongoClient does.
KEYWORDS = ("document_class", "tz_aware", "tzinfo", "uuidRepresentation", "type_registry",
            "datetime_conversion", "unicode_decode_error_handler")

#: uuidRepresentation's names (the connection string's and the keyword's).
UUID_REPRESENTATIONS: Mapping[str, int] = {
    "unspecified": UuidRepresentation.UNSPECIFIED,
    "standard": UuidRepresentation.STANDARD,
    "pythonLegacy": UuidRepresentation.PYTHON_LEGACY,
    "javaLegacy": UuidRepresentation.JAVA_LEGACY,
    "csharpLegacy": UuidRepresentation.CSHARP_LEGACY,
}

# Each keyword's CodecOptions field.
_FIELDS = {"uuidRepresentation": "uuid_representation"}


def client_codec_options(uri_uuid_representation: str | None,
                         keywords: Mapping[str, Any]) -> CodecOptions[Any]:
    """The client's codec options: the connection string's
    uuidRepresentation (a name, as the URI parser checked it) under the
    codec ``keywords`` given to the Client (:mod:`greenpool.client.config.arguments`
    took them out of the Client's keyword arguments)."""
    if not keywords and uri_uuid_representation in (None, "unspecified"):
        return DEFAULT_CODEC_OPTIONS
    fields: dict[str, Any] = {}
    if uri_uuid_representation is not None:
        fields["uuid_representation"] = UUID_REPRESENTATIONS[uri_uuid_representation]
    for name, value in keywords.items():
        fields[_FIELDS.get(name, name)] = _converted(name, value)
    try:
        return CodecOptions(**fields)
    except (TypeError, ValueError) as error:
        shown = ", ".join(f"{name}={value!r}" for name, value in keywords.items())
        raise type(error)(f"invalid codec options ({shown}): {error}") from error


def _converted(name: str, value: Any) -> Any:
    """A keyword's value as CodecOptions takes it: names for
    uuidRepresentation and datetime_conversion, as PyMongo accepts them."""
    if name == "uuidRepresentation" and isinstance(value, str):
        if value not in UUID_REPRESENTATIONS:
            raise ValueError(f"uuidRepresentation={value!r}: expected one of "
                             f"{', '.join(UUID_REPRESENTATIONS)}")
        return UUID_REPRESENTATIONS[value]
    if name == "datetime_conversion" and isinstance(value, str):
        member = DatetimeConversion.__members__.get(value.upper())
        if member is None:
            raise ValueError(f"datetime_conversion={value!r}: expected one of "
                             f"{', '.join(m.lower() for m in DatetimeConversion.__members__)}")
        return member
    return value


def check_codec_options(value: object, *, default: CodecOptions[Any]) -> CodecOptions[Any]:
    """``value`` (a ``codec_options=`` argument) or, for None, ``default``."""
    if value is None:
        return default
    if not isinstance(value, CodecOptions):
        raise TypeError(f"codec_options must be a bson.codec_options.CodecOptions, "
                        f"not {value!r}")
    return value


def write_reply_options(codec_options: CodecOptions[Any]) -> CodecOptions[Any]:
    """The options a write's command and reply go with: the collection's
    (for its documents), but replies decode to ``dict`` and replace bad
    UTF-8 (a reply's error message may quote a document's bytes), as PyMongo
    decodes them."""
    if codec_options is DEFAULT_CODEC_OPTIONS:
        return _DEFAULT_WRITE_REPLY_OPTIONS
    return codec_options.with_options(document_class=dict, unicode_decode_error_handler="replace")


_DEFAULT_WRITE_REPLY_OPTIONS = DEFAULT_CODEC_OPTIONS.with_options(
    unicode_decode_error_handler="replace")
