"""MongoDB's messages without sockets: OP_MSG, OP_COMPRESSED, and the legacy
OP_QUERY/OP_REPLY pair that the initial handshake still uses.

What lives here: the message framing. Everything turns documents into bytes
and bytes into documents, so a connection drives it with whatever transport
it has, and tests need none::

    request_id, data = encode_command({"ping": 1}, "admin", compressor=compressor)
    sock.sendall(data)
    header = parse_header(recv_exactly(HEADER_SIZE), max_message_size=limit)
    message = decode_message(
        header, recv_exactly(header.length - HEADER_SIZE), max_message_size=limit
    )
    assert message.response_to == request_id
    reply = check_reply(message.document)  # greenpool.wire.replies

A malformed message raises :class:`greenpool.errors.ProtocolError`: the
stream can no longer be trusted and the connection must be closed.

What must not: sockets and I/O (:mod:`greenpool.wire.link`), the compressors
themselves (:mod:`greenpool.wire.compression`; OP_COMPRESSED's framing is
here, its payload is theirs), and what a reply means
(:mod:`greenpool.wire.replies`). It imports nothing of greenpool but
:mod:`greenpool.errors`, :mod:`greenpool.wire.compression` and
:mod:`greenpool._compiled` (mypyc's class options).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import bson
from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from bson.errors import InvalidBSON
from pymongo.errors import DocumentTooLarge, InvalidName

from greenpool._compiled import mypyc_attr
from greenpool.errors import ProtocolError, caused_by
from greenpool.wire.compression import Compressor, decompress, may_compress

__all__ = [
    "CHECKSUM_PRESENT",
    "COMMAND_OVERHEAD",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "EXHAUST_ALLOWED",
    "HEADER_SIZE",
    "MAX_MESSAGE_SIZE_CEILING",
    "MORE_TO_COME",
    "OP_COMPRESSED",
    "OP_MSG",
    "OP_QUERY",
    "OP_REPLY",
    "QUERY_FAILURE",
    "LegacyReply",
    "Message",
    "MessageHeader",
    "Outgoing",
    "check_database_name",
    "decode_message",
    "decode_reply",
    "encode_command",
    "encode_outgoing",
    "encode_query",
    "message_size_limit",
    "next_request_id",
    "pack_header",
    "parse_header",
    "parse_reply_header",
]

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013
HEADER_SIZE = 16
#: The server's default ``maxMessageSizeBytes``; use the hello reply's value once known.
DEFAULT_MAX_MESSAGE_SIZE = 48_000_000
#: The largest message greenpool sends or accepts, whatever a hello claims: every
#: MongoDB release advertises 48,000,000 bytes, and a reply holds one document of
#: at most maxBsonObjectSize (16 MiB) besides its framing. The headroom allows a
#: compatible server's larger claim; the bound keeps a hostile or broken one from
#: making one reply cost gigabytes (a compressed reply inflates to at most this).
MAX_MESSAGE_SIZE_CEILING = 64 * 1024 * 1024

# OP_MSG flag bits. Bits 0-15 are "required": a parser must refuse any it does
# not know. Bits 16-31 are optional and may be ignored.
CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1
#: The client accepts a stream of replies (moreToCome) to this request.
EXHAUST_ALLOWED = 1 << 16
_REQUIRED_FLAG_BITS = 0xFFFF
_KNOWN_REQUIRED_FLAGS = CHECKSUM_PRESENT | MORE_TO_COME

_HEADER = struct.Struct("<iiii")
_UINT32 = struct.Struct("<I")
_INT32 = struct.Struct("<i")
# OP_COMPRESSED's prefix: originalOpcode, uncompressedSize, compressorId.
_COMPRESSED_PREFIX = struct.Struct("<iiB")
_INT32_MAX = 2**31 - 1

# A process-wide counter: next() on itertools.count is atomic under the GIL,
# and gevent never switches inside it.
_request_ids = itertools.count()


def next_request_id() -> int:
    """A fresh requestID: positive, and wrapping within int32."""
    return next(_request_ids) % _INT32_MAX + 1


def message_size_limit(claimed: int) -> int:
    """The maximum message size to use with a server whose hello claims
    ``claimed`` (its ``maxMessageSizeBytes``): the claim, but never more than
    :data:`MAX_MESSAGE_SIZE_CEILING`, since a hello's limits are the server's
    word too.

    >>> message_size_limit(48_000_000), message_size_limit(2**31 - 1)
    (48000000, 67108864)
    """
    return min(claimed, MAX_MESSAGE_SIZE_CEILING)


# -- header --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageHeader:
    """The 16-byte standard message header."""

    #: The whole message's length in bytes, this header included.
    length: int
    request_id: int
    #: The requestID this message answers; 0 for a request.
    response_to: int
    op_code: int


def pack_header(length: int, request_id: int, response_to: int, op_code: int) -> bytes:
    """The 16 bytes of a message header (little-endian int32s)."""
    return _HEADER.pack(length, request_id, response_to, op_code)


def parse_header(
    data: bytes | bytearray, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> MessageHeader:
    """Parse and check the first 16 bytes of ``data``.

    Raises :class:`ProtocolError` if there are fewer than 16 bytes, if the
    length could not hold the header or exceeds ``max_message_size`` (the
    server's ``maxMessageSizeBytes``), or if the opcode is not one greenpool
    speaks (OP_MSG, OP_COMPRESSED).
    """
    header = _unpack_header(data, max_message_size)
    if header.op_code not in (OP_MSG, OP_COMPRESSED):
        raise ProtocolError(f"unknown opcode {header.op_code}")
    return header


def _unpack_header(data: bytes | bytearray, max_message_size: int) -> MessageHeader:
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"message header is {len(data)} bytes; it must be {HEADER_SIZE}")
    header = MessageHeader(*_HEADER.unpack_from(data))
    if header.length < HEADER_SIZE:
        raise ProtocolError(f"message length {header.length} is shorter than its own header")
    if header.length > max_message_size:
        raise ProtocolError(
            f"message length {header.length} exceeds the maximum message size {max_message_size}"
        )
    return header


# -- OP_COMPRESSED ------------------------------------------------------------------------


def _wrap(op_code: int, body: bytes, compressor: Compressor, request_id: int) -> bytes:
    compressed = compressor.compress(body)
    prefix = _COMPRESSED_PREFIX.pack(op_code, len(body), compressor.compressor_id)
    length = HEADER_SIZE + len(prefix) + len(compressed)
    return pack_header(length, request_id, 0, OP_COMPRESSED) + prefix + compressed


def _unwrap(body: bytes | bytearray, max_message_size: int) -> tuple[int, bytes]:
    if len(body) < _COMPRESSED_PREFIX.size:
        raise ProtocolError(f"OP_COMPRESSED body is {len(body)} bytes, too short for its prefix")
    op_code, size, compressor_id = _COMPRESSED_PREFIX.unpack_from(body)
    if not 0 <= size <= max_message_size - HEADER_SIZE:
        raise ProtocolError(
            f"OP_COMPRESSED declares {size} uncompressed bytes; "
            f"the maximum message size is {max_message_size}"
        )
    compressed = bytes(memoryview(body)[_COMPRESSED_PREFIX.size :])  # one copy
    return op_code, decompress(compressor_id, compressed, size)


# -- OP_MSG --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """A decoded OP_MSG, whether or not it came compressed."""

    request_id: int
    response_to: int
    flags: int
    #: The body section, with each document sequence merged in as an array.
    document: dict[str, Any]

    @property
    def more_to_come(self) -> bool:
        """The sender will send another message without waiting for a request."""
        return bool(self.flags & MORE_TO_COME)


# What PyMongo's database name check refuses (pymongo.database._check_name).
_DATABASE_NAME_FORBIDDEN = (" ", ".", "$", "/", "\\", "\x00", '"')
# Names that passed check_database_name, so that checking one again is a set
# lookup; bounded, so a program that makes up names cannot grow it forever.
_GOOD_DATABASE_NAMES: set[str] = set()
_GOOD_DATABASE_NAMES_MAX = 1000


def check_database_name(name: object) -> None:
    """Refuse a database name the server would misread, as PyMongo does:
    :class:`pymongo.errors.InvalidName` for an empty name or one containing
    a space, ``.``, ``$``, ``/``, ``\\``, ``"`` or NUL; ``TypeError`` for a
    name that is not a str. ``$external`` (where users authenticated outside
    MongoDB live) is allowed."""
    if type(name) is str and name in _GOOD_DATABASE_NAMES:
        return  # the hot path: a program uses a few names over and over
    if not isinstance(name, str):
        raise TypeError(f"a database name must be a str, not {name!r}")
    if name == "$external":
        return
    if not name:
        raise InvalidName("database name cannot be the empty string")
    for character in _DATABASE_NAME_FORBIDDEN:
        if character in name:
            raise InvalidName(
                f"invalid database name {name!r}: database names cannot contain the "
                f"character {character!r}")
    if type(name) is str and len(_GOOD_DATABASE_NAMES) < _GOOD_DATABASE_NAMES_MAX:
        _GOOD_DATABASE_NAMES.add(name)


def encode_command(
    command: Mapping[str, Any],
    db: str,
    *,
    request_id: int | None = None,
    more_to_come: bool = False,
    exhaust_allowed: bool = False,
    compressor: Compressor | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
) -> tuple[int, bytes]:
    """Encode ``command`` for database ``db`` as one OP_MSG; return ``(request_id, bytes)``.

    The command is sent as a single body section (kind 0) with ``$db`` added.
    ``more_to_come`` sets the flag that tells the server not to reply;
    ``exhaust_allowed`` the one that lets it answer with a stream of replies
    (without it, a reply flagged moreToCome is a protocol error).
    With a ``compressor`` the message is wrapped in OP_COMPRESSED, except for
    the commands the compression spec forbids (:data:`NO_COMPRESSION`).

    Raises :class:`pymongo.errors.DocumentTooLarge` if the message would
    exceed ``max_message_size``, and ``ValueError`` for an empty command or a
    ``$db`` that contradicts ``db``.
    """
    if not command:
        raise ValueError("a command needs at least one field: its name")
    name = next(iter(command))
    if command.get("$db", db) != db:
        raise ValueError(f"command has $db {command['$db']!r} but is sent to {db!r}")
    document = bson.encode({**command, "$db": db}, codec_options=codec_options)
    flags = (MORE_TO_COME if more_to_come else 0) | (EXHAUST_ALLOWED if exhaust_allowed else 0)
    body = _UINT32.pack(flags) + b"\x00" + document
    _check_size(name, HEADER_SIZE + len(body), max_message_size)
    if request_id is None:
        request_id = next_request_id()
    if compressor is None or not may_compress(name):
        return request_id, pack_header(HEADER_SIZE + len(body), request_id, 0, OP_MSG) + body
    message = _wrap(OP_MSG, body, compressor, request_id)
    _check_size(name, len(message), max_message_size)
    return request_id, message


def _check_size(name: str, length: int, max_message_size: int) -> None:
    if length > max_message_size:
        raise DocumentTooLarge(
            f"command {name!r} is {length} bytes, over the maximum message size {max_message_size}"
        )


# -- OP_MSG with options: codecs, a document sequence, no reply --------------------------

#: What a command may add around a document of maxBsonObjectSize (PyMongo's figure).
COMMAND_OVERHEAD = 16_382


@mypyc_attr(native_class=False)  # compiled, still a dict whose instances take attributes
class Outgoing(dict[str, Any]):
    """A command document that says how it goes on the wire, for the
    collection API: what :meth:`greenpool.wire.link.Link.command` does with
    a plain ``dict`` (the command API's path) it does here with
    ``codec_options`` (encoding the command, decoding the reply), and

    * ``sequence``: the field (``documents``, ``updates``, ``deletes``) whose
      documents go as an OP_MSG document sequence (payload type 1), already
      encoded (``encoded``); the field itself keeps the documents as given,
      for command events;
    * ``more_sequences``: further document sequences after that one, each
      ``(field, encoded documents)`` (a ``bulkWrite``'s ``nsInfo`` beside its
      ``ops``); the fields keep their documents for command events too;
    * ``unacknowledged``: sent with moreToCome (w=0); no reply is read, and
      the link answers ``{"ok": 1}``;
    * ``reply``: set by the link to the last reply it read for the command,
      so that a caller that caught the reply's error (a writeConcernError,
      raised when the reply has no writeErrors, as PyMongo raises it) still
      has its counts (a bulk write's batch).
    """

    # Class-level defaults: a command that needs none of these options costs
    # no more to make than a dict (instances set only what differs).
    codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS
    sequence: str | None = None
    encoded: Sequence[bytes] = ()
    more_sequences: Sequence[tuple[str, Sequence[bytes]]] = ()
    unacknowledged = False
    reply: dict[str, Any] | None = None


def encode_outgoing(
    command: Outgoing,
    db: str,
    *,
    request_id: int | None = None,
    compressor: Compressor | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    max_bson_size: int | None = None,
    exhaust_allowed: bool = False,
) -> tuple[int, bytes]:
    """Encode ``command`` as one OP_MSG as its options say (see
    :class:`Outgoing`): the body with the command's codec options, then its
    document sequence if it has one; moreToCome if unacknowledged;
    exhaustAllowed if ``exhaust_allowed`` (an exhaust cursor's getMore). Size,
    compression and errors are as for :func:`encode_command`; besides, a
    body over ``max_bson_size`` (the server's maxBsonObjectSize) and the room
    a command may add to it raises :class:`pymongo.errors.DocumentTooLarge`,
    as PyMongo refuses one, before anything is sent."""
    if not command:
        raise ValueError("a command needs at least one field: its name")
    name = next(iter(command))
    field = command.sequence
    body_fields = {key: value for key, value in command.items() if key != field}
    if field is not None:
        for extra, _ in command.more_sequences:
            del body_fields[extra]
    body_fields["$db"] = db
    document = bson.encode(body_fields, codec_options=command.codec_options)
    if max_bson_size is not None and len(document) > max_bson_size + COMMAND_OVERHEAD:
        raise DocumentTooLarge(
            f"command {name!r} is {len(document)} bytes, over the server's limit of "
            f"{max_bson_size + COMMAND_OVERHEAD} (maxBsonObjectSize and a command's room)")
    flags = (MORE_TO_COME if command.unacknowledged else 0) | (
        EXHAUST_ALLOWED if exhaust_allowed else 0)
    parts = [_UINT32.pack(flags), b"\x00", document]
    if field is not None:
        parts += _document_sequence(field, command.encoded)
        for extra, encoded in command.more_sequences:
            parts += _document_sequence(extra, encoded)
    body = b"".join(parts)
    _check_size(name, HEADER_SIZE + len(body), max_message_size)
    if request_id is None:
        request_id = next_request_id()
    if compressor is None or not may_compress(name):
        return request_id, pack_header(HEADER_SIZE + len(body), request_id, 0, OP_MSG) + body
    message = _wrap(OP_MSG, body, compressor, request_id)
    _check_size(name, len(message), max_message_size)
    return request_id, message


def _document_sequence(field: str, encoded: Sequence[bytes]) -> list[bytes]:
    """The parts of one OP_MSG kind-1 section: ``field``'s encoded documents."""
    identifier = field.encode() + b"\x00"
    payload = b"".join(encoded)
    return [b"\x01", _INT32.pack(_INT32.size + len(identifier) + len(payload)), identifier,
            payload]


def decode_message(
    header: MessageHeader,
    body: bytes | bytearray,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    codec_options: CodecOptions[dict[str, Any]] = DEFAULT_CODEC_OPTIONS,
) -> Message:
    """Decode the ``body`` (everything after the header) of an OP_MSG or OP_COMPRESSED.

    Document sequences (kind 1 sections) are merged into the body document
    as arrays named by their identifiers, as drivers present them. The
    decompressed size is bounded by ``max_message_size``. ``codec_options``
    must decode to a mutable mapping (the default, ``dict``, does).

    Raises :class:`ProtocolError` for anything malformed: a body whose size
    disagrees with the header, an unknown opcode, compressor, flag bit or
    section kind, a missing or repeated body section, a truncated section,
    or invalid BSON.
    """
    if len(body) != header.length - HEADER_SIZE:
        raise ProtocolError(
            f"message body is {len(body)} bytes; its header says {header.length - HEADER_SIZE}"
        )
    op_code = header.op_code
    if op_code == OP_COMPRESSED:
        op_code, body = _unwrap(body, max_message_size)
        if op_code != OP_MSG:
            raise ProtocolError(f"OP_COMPRESSED wraps opcode {op_code}; greenpool expects OP_MSG")
    elif op_code != OP_MSG:
        raise ProtocolError(f"unknown opcode {op_code}")
    flags, document = _decode_op_msg(body, codec_options)
    return Message(header.request_id, header.response_to, flags, document)


def _decode_op_msg(
    body: bytes | bytearray, codec_options: CodecOptions[dict[str, Any]]
) -> tuple[int, dict[str, Any]]:
    if len(body) < _UINT32.size:
        raise ProtocolError("OP_MSG is too short for its flag bits")
    (flags,) = _UINT32.unpack_from(body)
    unknown = flags & _REQUIRED_FLAG_BITS & ~_KNOWN_REQUIRED_FLAGS
    if unknown:
        raise ProtocolError(f"OP_MSG sets unknown required flag bits 0x{unknown:04x}")
    end = len(body)
    if flags & CHECKSUM_PRESENT:
        # The CRC-32C trailer is skipped, not verified: the standard library
        # has no CRC-32C and a pure-Python one costs seconds on a large reply,
        # while TCP (and TLS, when used) already guard the bytes in transit.
        end -= 4
        if end < _UINT32.size:
            raise ProtocolError("OP_MSG is too short for its checksum")
    return flags, _read_sections(body, _UINT32.size, end, codec_options)


def _read_sections(
    body: bytes | bytearray, pos: int, end: int, codec_options: CodecOptions[dict[str, Any]]
) -> dict[str, Any]:
    document: dict[str, Any] | None = None
    sequences: dict[str, list[dict[str, Any]]] = {}
    while pos < end:
        kind = body[pos]
        pos += 1
        if kind == 0:
            if document is not None:
                raise ProtocolError("OP_MSG has more than one body section")
            size = _bson_size(body, pos, end)
            # A view, not a slice: the body document is most of a large reply.
            document = _decode(memoryview(body)[pos : pos + size], codec_options)
            pos += size
        elif kind == 1:
            identifier, documents, pos = _read_sequence(body, pos, end, codec_options)
            if identifier in sequences:
                raise ProtocolError(f"OP_MSG repeats the document sequence {identifier!r}")
            sequences[identifier] = documents
        else:
            raise ProtocolError(f"OP_MSG has a section of unknown kind {kind}")
    if document is None:
        raise ProtocolError("OP_MSG has no body section")
    for identifier, documents in sequences.items():
        if identifier in document:
            raise ProtocolError(f"{identifier!r} is both a body field and a document sequence")
        document[identifier] = documents
    return document


def _bson_size(body: bytes | bytearray, pos: int, end: int) -> int:
    if pos + _INT32.size > end:
        raise ProtocolError("OP_MSG is truncated inside a BSON document's length")
    size = _int32_at(body, pos)
    if size < 5 or pos + size > end:
        raise ProtocolError(f"BSON document claims {size} bytes; {end - pos} remain in OP_MSG")
    return size


def _int32_at(body: bytes | bytearray, pos: int) -> int:
    return int(_INT32.unpack_from(body, pos)[0])


def _read_sequence(
    body: bytes | bytearray, pos: int, end: int, codec_options: CodecOptions[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]], int]:
    if pos + _INT32.size > end:
        raise ProtocolError("OP_MSG is truncated inside a document sequence's size")
    size = _int32_at(body, pos)
    stop = pos + size
    if size < _INT32.size + 1 or stop > end:
        raise ProtocolError(f"document sequence claims {size} bytes; {end - pos} remain in OP_MSG")
    terminator = body.find(b"\x00", pos + _INT32.size, stop)
    if terminator < 0:
        raise ProtocolError("document sequence identifier is not terminated")
    try:
        identifier = body[pos + _INT32.size : terminator].decode()
    except UnicodeDecodeError as exc:
        raise caused_by(ProtocolError(
            "document sequence identifier is not UTF-8"), exc) from exc
    try:
        documents = bson.decode_all(body[terminator + 1 : stop], codec_options)
    except InvalidBSON as exc:
        raise caused_by(ProtocolError(
            f"document sequence {identifier!r} holds invalid BSON: {exc}"), exc) from exc
    return identifier, documents, stop


def _decode(
    data: bytes | memoryview, codec_options: CodecOptions[dict[str, Any]]
) -> dict[str, Any]:
    try:
        return bson.decode(data, codec_options)
    except InvalidBSON as exc:
        raise caused_by(ProtocolError(f"OP_MSG body is invalid BSON: {exc}"), exc) from exc


# -- OP_QUERY and OP_REPLY ----------------------------------------------------------------
#
# Servers removed these for everything but the first hello: a driver that does
# not know the server's version yet sends its initial handshake (legacy hello,
# ``isMaster``) as an OP_QUERY to ``admin.$cmd`` and gets an OP_REPLY back,
# because every server, old or new, understands that exchange.

#: OP_REPLY's QueryFailure flag: the one document is an ``$err`` document.
QUERY_FAILURE = 1 << 1
# OP_REPLY's prefix: responseFlags, cursorID, startingFrom, numberReturned.
_REPLY_PREFIX = struct.Struct("<iqii")
# OP_QUERY's numberToSkip and numberToReturn; -1 returns one document and
# closes the cursor, which is what a command wants.
_QUERY_SKIP_RETURN = struct.Struct("<ii")


def encode_query(
    command: Mapping[str, Any],
    db: str,
    *,
    request_id: int | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
) -> tuple[int, bytes]:
    """Encode ``command`` as an OP_QUERY on ``<db>.$cmd``; return ``(request_id, bytes)``.

    Only for the initial handshake: OP_QUERY is never compressed and carries
    no ``$db`` (the namespace names the database). Raises
    :class:`pymongo.errors.DocumentTooLarge` over ``max_message_size``, and
    ``ValueError`` for an empty command or a database name with a NUL.
    """
    if not command:
        raise ValueError("a command needs at least one field: its name")
    if "\x00" in db:
        raise ValueError(f"database name {db!r} contains a NUL character")
    name = next(iter(command))
    body = (
        _INT32.pack(0)  # flags: none apply to a command
        + f"{db}.$cmd".encode()
        + b"\x00"
        + _QUERY_SKIP_RETURN.pack(0, -1)
        + bson.encode(command, codec_options=codec_options)
    )
    _check_size(name, HEADER_SIZE + len(body), max_message_size)
    if request_id is None:
        request_id = next_request_id()
    return request_id, pack_header(HEADER_SIZE + len(body), request_id, 0, OP_QUERY) + body


def parse_reply_header(
    data: bytes | bytearray, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> MessageHeader:
    """Parse and check the header of the answer to an OP_QUERY.

    Like :func:`parse_header`, but the only opcode accepted is OP_REPLY.
    """
    header = _unpack_header(data, max_message_size)
    if header.op_code != OP_REPLY:
        raise ProtocolError(f"expected an OP_REPLY (opcode 1) but got opcode {header.op_code}")
    return header


@dataclass(frozen=True, slots=True)
class LegacyReply:
    """A decoded OP_REPLY."""

    request_id: int
    response_to: int
    flags: int
    cursor_id: int
    starting_from: int
    documents: list[dict[str, Any]]

    def command_reply(self) -> dict[str, Any]:
        """The reply's one document, as a command reply must hold exactly one.

        Raises :class:`ProtocolError` if it holds none or several.
        """
        if len(self.documents) != 1:
            raise ProtocolError(
                f"an OP_REPLY to a command must hold one document, not {len(self.documents)}"
            )
        return self.documents[0]


def decode_reply(
    header: MessageHeader,
    body: bytes | bytearray,
    *,
    codec_options: CodecOptions[dict[str, Any]] = DEFAULT_CODEC_OPTIONS,
) -> LegacyReply:
    """Decode the ``body`` (everything after the header) of an OP_REPLY.

    A QueryFailure reply (:data:`QUERY_FAILURE`) decodes like any other: its
    document is ``{"$err": ..., "code": ...}``, which
    :func:`~greenpool.wire.replies.check_reply` raises as an ``OperationFailure``.

    Raises :class:`ProtocolError` for a body whose size disagrees with the
    header, another opcode, a body too short for its prefix, a negative
    document count or one that disagrees with the documents present, a
    truncated document, trailing bytes, or invalid BSON.
    """
    if header.op_code != OP_REPLY:
        raise ProtocolError(f"expected an OP_REPLY (opcode 1) but got opcode {header.op_code}")
    if len(body) != header.length - HEADER_SIZE:
        raise ProtocolError(
            f"message body is {len(body)} bytes; its header says {header.length - HEADER_SIZE}"
        )
    if len(body) < _REPLY_PREFIX.size:
        raise ProtocolError(f"OP_REPLY body is {len(body)} bytes, too short for its prefix")
    flags, cursor_id, starting_from, number_returned = _REPLY_PREFIX.unpack_from(body)
    if number_returned < 0:
        raise ProtocolError(f"OP_REPLY claims {number_returned} documents")
    documents = _reply_documents(body, _REPLY_PREFIX.size, codec_options)
    if len(documents) != number_returned:
        raise ProtocolError(
            f"OP_REPLY claims {number_returned} documents but holds {len(documents)}"
        )
    return LegacyReply(
        header.request_id, header.response_to, flags, cursor_id, starting_from, documents
    )


def _reply_documents(
    body: bytes | bytearray, pos: int, codec_options: CodecOptions[dict[str, Any]]
) -> list[dict[str, Any]]:
    documents = []
    end = len(body)
    while pos < end:
        if pos + _INT32.size > end:
            raise ProtocolError("OP_REPLY is truncated inside a BSON document's length")
        size = _int32_at(body, pos)
        if size < 5 or pos + size > end:
            raise ProtocolError(
                f"BSON document claims {size} bytes; {end - pos} remain in OP_REPLY"
            )
        try:
            documents.append(bson.decode(body[pos : pos + size], codec_options))
        except InvalidBSON as exc:
            raise caused_by(ProtocolError(f"OP_REPLY holds invalid BSON: {exc}"),
                            exc) from exc
        pos += size
    return documents
