"""greenpool.wire.messages: headers, OP_MSG, OP_COMPRESSED, negotiation and reply checking.

Messages under test are built here with ``struct`` and ``bson`` directly, not
with greenpool's encoder, so a symmetric mistake in encoder and decoder
cannot hide.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import struct
import uuid
import warnings
import zlib
from typing import Any

import bson
import gevent
import pytest
import snappy
import zstandard
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from pymongo.errors import (
    CursorNotFound,
    DocumentTooLarge,
    DuplicateKeyError,
    ExecutionTimeout,
    NotPrimaryError,
    OperationFailure,
    WriteConcernError,
    WTimeoutError,
)
from pymongo.errors import ProtocolError as PyMongoProtocolError

from greenpool.errors import ConfigurationError, ProtocolError
from greenpool.wire import compression, replies
from greenpool.wire import messages as wire

ALL_COMPRESSORS = ["noop", "snappy", "zlib", "zstd"]
RAW_COMPRESS = {
    0: lambda data: data,
    1: snappy.compress,
    2: zlib.compress,
    3: lambda data: zstandard.ZstdCompressor().compress(data),
}


# -- builders, independent of greenpool's encoder ----------------------------------------


def body_section(document: dict[str, Any]) -> bytes:
    return b"\x00" + bson.encode(document)


def sequence_section(identifier: str, documents: list[dict[str, Any]]) -> bytes:
    payload = identifier.encode() + b"\x00" + b"".join(bson.encode(d) for d in documents)
    return b"\x01" + struct.pack("<i", 4 + len(payload)) + payload


def op_msg_body(*sections: bytes, flags: int = 0, trailer: bytes = b"") -> bytes:
    return struct.pack("<I", flags) + b"".join(sections) + trailer


def frame(
    body: bytes, op_code: int = wire.OP_MSG, request_id: int = 7, response_to: int = 3
) -> bytes:
    return struct.pack("<iiii", 16 + len(body), request_id, response_to, op_code) + body


def op_msg(*sections: bytes, flags: int = 0, trailer: bytes = b"") -> bytes:
    return frame(op_msg_body(*sections, flags=flags, trailer=trailer))


def op_compressed(
    inner: bytes, compressor_id: int, *, op_code: int = wire.OP_MSG, size: int | None = None
) -> bytes:
    data = RAW_COMPRESS[compressor_id](inner)
    declared = len(inner) if size is None else size
    return frame(struct.pack("<iiB", op_code, declared, compressor_id) + data, wire.OP_COMPRESSED)


def decode(data: bytes, **options: Any) -> wire.Message:
    header = wire.parse_header(
        data, **{k: v for k, v in options.items() if k == "max_message_size"}
    )
    return wire.decode_message(header, data[wire.HEADER_SIZE :], **options)


# -- header ------------------------------------------------------------------------------


def test_header_round_trip() -> None:
    data = wire.pack_header(100, 12, 34, wire.OP_MSG)
    assert data == struct.pack("<iiii", 100, 12, 34, 2013)
    assert wire.parse_header(data) == wire.MessageHeader(100, 12, 34, 2013)


def test_parse_header_reads_the_first_sixteen_bytes_of_a_message() -> None:
    data = op_msg(body_section({"ok": 1}))
    header = wire.parse_header(data)
    assert (header.length, header.request_id, header.response_to) == (len(data), 7, 3)


def test_short_header() -> None:
    with pytest.raises(ProtocolError, match="header is 15 bytes"):
        wire.parse_header(b"\x00" * 15)


@pytest.mark.parametrize("length", [-1, 0, 15])
def test_header_length_shorter_than_the_header(length: int) -> None:
    with pytest.raises(ProtocolError, match="shorter than its own header"):
        wire.parse_header(wire.pack_header(length, 1, 0, wire.OP_MSG))


def test_header_length_over_the_default_maximum() -> None:
    wire.parse_header(wire.pack_header(48_000_000, 1, 0, wire.OP_MSG))
    with pytest.raises(ProtocolError, match="exceeds the maximum message size 48000000"):
        wire.parse_header(wire.pack_header(48_000_001, 1, 0, wire.OP_MSG))


def test_header_length_over_the_servers_maximum() -> None:
    with pytest.raises(ProtocolError, match="1001 exceeds the maximum message size 1000"):
        wire.parse_header(wire.pack_header(1001, 1, 0, wire.OP_MSG), max_message_size=1000)


@pytest.mark.parametrize("op_code", [1, 2004, 2011, 2014, -1])
def test_unknown_opcode(op_code: int) -> None:
    with pytest.raises(ProtocolError, match=f"unknown opcode {op_code}"):
        wire.parse_header(wire.pack_header(40, 1, 0, op_code))


def test_protocol_error_is_pymongos() -> None:
    with pytest.raises(PyMongoProtocolError):
        wire.parse_header(b"")


# -- request ids -------------------------------------------------------------------------


def test_request_ids_increase() -> None:
    first, second = wire.next_request_id(), wire.next_request_id()
    assert 0 < first < second


def test_request_ids_wrap_within_int32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "_request_ids", itertools.count(2**31 - 2))
    assert [wire.next_request_id() for _ in range(3)] == [2**31 - 1, 1, 2]


def test_request_ids_are_unique_across_greenlets() -> None:
    def take() -> list[int]:
        ids = []
        for _ in range(200):
            ids.append(wire.next_request_id())
            gevent.sleep(0)
        return ids

    jobs = [gevent.spawn(take) for _ in range(10)]
    gevent.joinall(jobs, timeout=10, raise_error=True)
    ids = [i for job in jobs for i in job.value]
    assert len(set(ids)) == len(ids) == 2000


# -- OP_MSG encode -----------------------------------------------------------------------


def test_encode_command_layout() -> None:
    request_id, data = wire.encode_command({"ping": 1}, "admin", request_id=42)
    document = bson.encode({"ping": 1, "$db": "admin"})
    assert request_id == 42
    assert (
        data == struct.pack("<iiiiI", 16 + 5 + len(document), 42, 0, 2013, 0) + b"\x00" + document
    )


def test_encode_command_round_trip() -> None:
    command = {"insert": "things", "documents": [{"_id": i} for i in range(3)], "ordered": True}
    request_id, data = wire.encode_command(command, "db")
    message = decode(data)
    assert message.request_id == request_id
    assert message.response_to == 0
    assert message.flags == 0 and not message.more_to_come
    assert message.document == {**command, "$db": "db"}
    assert next(iter(message.document)) == "insert"


def test_encode_command_draws_a_fresh_request_id() -> None:
    first, _ = wire.encode_command({"ping": 1}, "admin")
    second, _ = wire.encode_command({"ping": 1}, "admin")
    assert second > first


def test_more_to_come() -> None:
    _, data = wire.encode_command(
        {"insert": "c", "writeConcern": {"w": 0}}, "db", more_to_come=True
    )
    assert struct.unpack_from("<I", data, 16) == (wire.MORE_TO_COME,)
    assert decode(data).more_to_come


def test_db_given_twice_must_agree() -> None:
    _, data = wire.encode_command({"ping": 1, "$db": "admin"}, "admin")
    assert decode(data).document == {"ping": 1, "$db": "admin"}
    with pytest.raises(ValueError, match="'other'"):
        wire.encode_command({"ping": 1, "$db": "other"}, "admin")


def test_empty_command() -> None:
    with pytest.raises(ValueError, match="at least one field"):
        wire.encode_command({}, "admin")


def test_command_over_the_maximum_message_size() -> None:
    command = {"insert": "c", "documents": [{"x": "a" * 2000}]}
    wire.encode_command(command, "db", max_message_size=3000)
    with pytest.raises(DocumentTooLarge, match=r"'insert' is \d+ bytes, over the maximum .* 1000"):
        wire.encode_command(command, "db", max_message_size=1000)


def test_compressed_command_over_the_maximum_message_size() -> None:
    command = {"insert": "c", "documents": [{"x": "a" * 2000}]}
    limit = len(wire.encode_command(command, "db")[1])
    # noop adds OP_COMPRESSED's 9-byte prefix to a message that just fits.
    with pytest.raises(DocumentTooLarge):
        wire.encode_command(
            command, "db", compressor=compression.Compressor("noop"), max_message_size=limit
        )


def test_codec_options_apply_both_ways() -> None:
    options: CodecOptions[dict[str, Any]] = CodecOptions(
        uuid_representation=UuidRepresentation.STANDARD
    )
    value = uuid.uuid4()
    _, data = wire.encode_command(
        {"find": "c", "filter": {"u": value}}, "db", codec_options=options
    )
    assert decode(data, codec_options=options).document["filter"] == {"u": value}


# -- OP_MSG decode -----------------------------------------------------------------------


def test_reply_with_response_to() -> None:
    message = decode(op_msg(body_section({"ok": 1.0, "n": 1})))
    assert (message.request_id, message.response_to) == (7, 3)
    assert message.document == {"ok": 1.0, "n": 1}


def test_document_sequences_merge_into_the_body() -> None:
    data = op_msg(
        body_section({"ok": 1, "cursor": "x"}),
        sequence_section("documents", [{"a": 1}, {"a": 2}]),
        sequence_section("updates", [{"q": {}}]),
    )
    assert decode(data).document == {
        "ok": 1,
        "cursor": "x",
        "documents": [{"a": 1}, {"a": 2}],
        "updates": [{"q": {}}],
    }


def test_sequence_before_the_body_and_empty_sequence() -> None:
    data = op_msg(sequence_section("documents", []), body_section({"insert": "c"}))
    assert decode(data).document == {"insert": "c", "documents": []}


def test_exhaust_allowed_is_an_optional_bit() -> None:
    message = decode(op_msg(body_section({"ok": 1}), flags=1 << 16))
    assert message.flags == 1 << 16 and not message.more_to_come


def test_an_outgoing_command_may_allow_exhaust() -> None:
    # An exhaust cursor's getMore: exhaustAllowed, with the command's codec options.
    command = wire.Outgoing({"getMore": 7, "collection": "c"})
    _, data = wire.encode_outgoing(command, "db", exhaust_allowed=True)
    assert struct.unpack_from("<I", data, 16) == (wire.EXHAUST_ALLOWED,)
    _, plain = wire.encode_outgoing(command, "db")
    assert struct.unpack_from("<I", plain, 16) == (0,)


@pytest.mark.parametrize("bit", range(2, 16))
def test_unknown_required_flag_bits(bit: int) -> None:
    with pytest.raises(ProtocolError, match="unknown required flag bits"):
        decode(op_msg(body_section({"ok": 1}), flags=1 << bit))


def test_checksum_trailer_is_skipped() -> None:
    data = op_msg(body_section({"ok": 1}), flags=wire.CHECKSUM_PRESENT, trailer=b"\xde\xad\xbe\xef")
    assert decode(data).document == {"ok": 1}


def test_checksum_flag_without_room_for_the_checksum() -> None:
    with pytest.raises(ProtocolError, match="too short for its checksum"):
        decode(frame(op_msg_body(flags=wire.CHECKSUM_PRESENT, trailer=b"\x00\x00")))


def test_no_body_section() -> None:
    with pytest.raises(ProtocolError, match="no body section"):
        decode(op_msg(sequence_section("documents", [{"a": 1}])))


def test_two_body_sections() -> None:
    with pytest.raises(ProtocolError, match="more than one body section"):
        decode(op_msg(body_section({"ok": 1}), body_section({"ok": 1})))


@pytest.mark.parametrize("kind", [2, 3, 255])
def test_bad_section_kind(kind: int) -> None:
    with pytest.raises(ProtocolError, match=f"unknown kind {kind}"):
        decode(op_msg(body_section({"ok": 1}), bytes([kind]) + bson.encode({})))


def test_sequence_named_like_a_body_field() -> None:
    data = op_msg(body_section({"documents": 1}), sequence_section("documents", []))
    with pytest.raises(ProtocolError, match="both a body field and a document sequence"):
        decode(data)


def test_repeated_sequence() -> None:
    data = op_msg(body_section({}), sequence_section("d", []), sequence_section("d", []))
    with pytest.raises(ProtocolError, match="repeats the document sequence 'd'"):
        decode(data)


@pytest.mark.parametrize("missing", [1, 5])
def test_body_shorter_than_the_header_says(missing: int) -> None:
    data = op_msg(body_section({"ok": 1}))
    with pytest.raises(ProtocolError, match="its header says"):
        wire.decode_message(wire.parse_header(data), data[16:-missing])


def test_body_longer_than_the_header_says() -> None:
    data = op_msg(body_section({"ok": 1}))
    with pytest.raises(ProtocolError, match="its header says"):
        wire.decode_message(wire.parse_header(data), data[16:] + b"\x00")


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"\x00\x00", "too short for its flag bits"),
        (op_msg_body(b"\x00\x05\x00"), "truncated inside a BSON document's length"),
        (op_msg_body(b"\x00" + bson.encode({"ok": 1})[:-1]), "claims 13 bytes; 12 remain"),
        (op_msg_body(b"\x00\x04\x00\x00\x00"), "claims 4 bytes"),
        (op_msg_body(body_section({}), b"\x01\x09\x00"), "inside a document sequence's size"),
        (op_msg_body(body_section({}), b"\x01\x20\x00\x00\x00ab\x00"), "claims 32 bytes"),
        (op_msg_body(body_section({}), b"\x01\x04\x00\x00\x00"), "claims 4 bytes"),
        (op_msg_body(body_section({}), b"\x01\x06\x00\x00\x00ab"), "not terminated"),
        (op_msg_body(body_section({}), b"\x01\x07\x00\x00\x00\xff\xfe\x00"), "not UTF-8"),
    ],
)
def test_truncated_and_inconsistent_sections(body: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode(frame(body))


def test_invalid_bson_in_the_body() -> None:
    # A well-framed document whose one element has type 0x20, which BSON does not define.
    bad = struct.pack("<i", 8) + b"\x20a\x00\x00"
    with pytest.raises(ProtocolError, match="body is invalid BSON"):
        decode(frame(op_msg_body(b"\x00" + bad)))


def test_invalid_bson_in_a_sequence() -> None:
    bad = struct.pack("<i", 8) + b"\x20a\x00\x00"
    section = b"\x01" + struct.pack("<i", 4 + 2 + len(bad)) + b"d\x00" + bad
    with pytest.raises(ProtocolError, match="sequence 'd' holds invalid BSON"):
        decode(frame(op_msg_body(body_section({}), section)))


def test_corrupted_messages_only_raise_protocol_error() -> None:
    """Random damage to a valid message either still decodes or is a ProtocolError."""
    good = op_msg_body(
        body_section({"ok": 1, "s": "text", "n": 1.5, "sub": {"a": [1, 2]}}),
        sequence_section("docs", [{"a": 1}, {"b": "two"}]),
    )
    rng = random.Random(20251123)
    for _ in range(3000):
        damaged = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cut = rng.choice([len(damaged), rng.randrange(len(damaged))])
        with contextlib.suppress(ProtocolError):
            decode(frame(bytes(damaged[:cut])))


# -- OP_COMPRESSED -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_COMPRESSORS)
def test_compressed_command_round_trip(name: str) -> None:
    compressor = compression.Compressor(name)
    command = {"find": "c", "filter": {"x": "y" * 500}}
    request_id, data = wire.encode_command(command, "db", compressor=compressor)
    header = wire.parse_header(data)
    assert header.op_code == wire.OP_COMPRESSED
    original, size, compressor_id = struct.unpack_from("<iiB", data, 16)
    assert (original, compressor_id) == (wire.OP_MSG, compression.COMPRESSOR_IDS[name])
    assert size == len(wire.encode_command(command, "db")[1]) - 16
    message = wire.decode_message(header, data[16:])
    assert message.request_id == request_id
    assert message.document == {**command, "$db": "db"}


@pytest.mark.parametrize("compressor_id", [0, 1, 2, 3])
def test_compressed_reply_from_another_implementation(compressor_id: int) -> None:
    inner = op_msg_body(body_section({"ok": 1, "v": "z" * 300}), sequence_section("d", [{}]))
    message = decode(op_compressed(inner, compressor_id))
    assert message.document == {"ok": 1, "v": "z" * 300, "d": [{}]}
    assert (message.request_id, message.response_to) == (7, 3)


@pytest.mark.parametrize("level", range(-1, 10))
def test_zlib_levels(level: int) -> None:
    compressor = compression.Compressor("zlib", zlib_level=level)
    _, data = wire.encode_command(
        {"find": "c", "filter": {"x": "y" * 500}}, "db", compressor=compressor
    )
    assert decode(data).document["filter"] == {"x": "y" * 500}


@pytest.mark.parametrize("level", [-2, 10, True, 6.0, "6"])
def test_bad_zlib_levels(level: Any) -> None:
    with pytest.raises(ConfigurationError, match="zlibCompressionLevel"):
        compression.Compressor("zlib", zlib_level=level)


def test_unknown_compressor_name() -> None:
    with pytest.raises(ConfigurationError, match="unknown compressor 'lz4'"):
        compression.Compressor("lz4")


SPEC_NO_COMPRESSION = [
    "hello", "isMaster", "saslStart", "saslContinue", "getnonce", "authenticate",
    "createUser", "updateUser", "copydbSaslStart", "copydbgetnonce", "copydb",
]  # fmt: skip


@pytest.mark.parametrize("name", [*SPEC_NO_COMPRESSION, "ismaster", "HELLO", "SASLSTART"])
@pytest.mark.parametrize("compressor", ["zlib", "zstd"])
def test_commands_never_compressed(name: str, compressor: str) -> None:
    _, data = wire.encode_command({name: 1}, "admin", compressor=compression.Compressor(compressor))
    assert wire.parse_header(data).op_code == wire.OP_MSG
    assert not compression.may_compress(name)


def test_no_compression_list_is_the_specs() -> None:
    assert {name.lower() for name in SPEC_NO_COMPRESSION} == compression.NO_COMPRESSION
    assert compression.may_compress("find") and compression.may_compress("helloWorld")


def test_unknown_compressor_id() -> None:
    body = struct.pack("<iiB", wire.OP_MSG, 10, 9) + b"x" * 10
    with pytest.raises(ProtocolError, match="unknown compressor id 9"):
        decode(frame(body, wire.OP_COMPRESSED))


def test_compressor_not_installed_for_a_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    data = op_compressed(op_msg_body(body_section({"ok": 1})), 3)
    monkeypatch.setattr(compression, "_zstd", None)
    with pytest.raises(ProtocolError, match="uses zstd, but zstandard is not installed"):
        decode(data)


@pytest.mark.parametrize("compressor_id", [1, 2, 3])
def test_corrupt_compressed_data(compressor_id: int) -> None:
    inner = op_msg_body(body_section({"ok": 1, "v": "z" * 300}))
    good = op_compressed(inner, compressor_id)
    prefix = 16 + 9
    damaged = good[: prefix + 1] + bytes(b ^ 0x5A for b in good[prefix + 1 :])
    with pytest.raises(ProtocolError, match=r"OP_COMPRESSED|snappy|zstd|zlib"):
        decode(damaged)


@pytest.mark.parametrize("compressor_id", [0, 1, 2, 3])
@pytest.mark.parametrize("delta", [-1, 1])
def test_declared_size_disagrees_with_the_data(compressor_id: int, delta: int) -> None:
    inner = op_msg_body(body_section({"ok": 1, "v": "z" * 300}))
    with pytest.raises(ProtocolError, match="declare"):
        decode(op_compressed(inner, compressor_id, size=len(inner) + delta))


@pytest.mark.parametrize("compressor_id", [1, 2, 3])
def test_truncated_compressed_data(compressor_id: int) -> None:
    inner = op_msg_body(body_section({"ok": 1, "v": bytes(range(256)) * 4}))
    data = op_compressed(inner, compressor_id)
    cut = data[:-7]
    with pytest.raises(ProtocolError):
        decode(struct.pack("<i", len(cut)) + cut[4:])


def test_zlib_trailing_bytes() -> None:
    inner = op_msg_body(body_section({"ok": 1}))
    payload = zlib.compress(inner) + b"junk"
    body = struct.pack("<iiB", wire.OP_MSG, len(inner), 2) + payload
    with pytest.raises(ProtocolError, match="extra bytes"):
        decode(frame(body, wire.OP_COMPRESSED))


@pytest.mark.parametrize("compressor_id", [2, 3])
def test_decompression_bomb_is_bounded(compressor_id: int) -> None:
    bomb = RAW_COMPRESS[compressor_id](b"\x00" * 20_000_000)
    body = struct.pack("<iiB", wire.OP_MSG, 1000, compressor_id) + bomb
    with pytest.raises(ProtocolError, match="declare"):
        decode(frame(body, wire.OP_COMPRESSED))


def test_snappy_bad_length_preamble() -> None:
    body = struct.pack("<iiB", wire.OP_MSG, 10, 1) + b"\xff" * 6
    with pytest.raises(ProtocolError, match="no valid length preamble"):
        decode(frame(body, wire.OP_COMPRESSED))


@pytest.mark.parametrize("size", [-1, 1000 - 16 + 1])
def test_uncompressed_size_out_of_bounds(size: int) -> None:
    body = struct.pack("<iiB", wire.OP_MSG, size, 0) + b"x" * 20
    with pytest.raises(ProtocolError, match="uncompressed bytes"):
        decode(frame(body, wire.OP_COMPRESSED), max_message_size=1000)


def test_compressed_prefix_too_short() -> None:
    with pytest.raises(ProtocolError, match="too short for its prefix"):
        decode(frame(b"\xdd\x07\x00\x00\x05", wire.OP_COMPRESSED))


@pytest.mark.parametrize("op_code", [wire.OP_COMPRESSED, 2004, 1])
def test_compressed_wraps_something_other_than_op_msg(op_code: int) -> None:
    inner = op_msg_body(body_section({"ok": 1}))
    with pytest.raises(ProtocolError, match=f"wraps opcode {op_code}"):
        decode(op_compressed(inner, 0, op_code=op_code))


def test_decode_refuses_an_unknown_opcode_in_a_hand_made_header() -> None:
    with pytest.raises(ProtocolError, match="unknown opcode 2004"):
        wire.decode_message(wire.MessageHeader(20, 1, 0, 2004), b"\x00" * 4)


# -- negotiation -------------------------------------------------------------------------


def test_negotiation_takes_the_clients_first_choice_the_server_offers() -> None:
    chosen = compression.negotiate_compressor(["zstd", "zlib", "snappy"], ["snappy", "zlib"])
    assert chosen == compression.Compressor("zlib")


def test_negotiation_passes_the_zlib_level() -> None:
    chosen = compression.negotiate_compressor(["zlib"], ["zlib"], zlib_level=9)
    assert chosen is not None and chosen.zlib_level == 9


@pytest.mark.parametrize(
    ("client", "server"),
    [(["zlib"], ["snappy"]), (["zlib"], []), (["zlib"], None), ([], ["zlib"])],
)
def test_negotiation_without_a_common_compressor(client: list[str], server: Any) -> None:
    assert compression.negotiate_compressor(client, server) is None


def test_negotiation_checks_the_zlib_level_even_when_zlib_is_not_chosen() -> None:
    with pytest.raises(ConfigurationError, match="zlibCompressionLevel"):
        compression.negotiate_compressor(["zstd"], ["zstd"], zlib_level=11)


def test_missing_package_is_dropped_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compression, "_snappy", None)
    with pytest.warns(UserWarning, match="'snappy' is ignored: install python-snappy"):
        chosen = compression.negotiate_compressor(["snappy", "zlib"], ["snappy", "zlib"])
    assert chosen == compression.Compressor("zlib")
    assert not compression.compressor_available("snappy")


def test_missing_zstd_is_dropped_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compression, "_zstd", None)
    with pytest.warns(UserWarning, match="'zstd' is ignored: install zstandard"):
        assert compression.usable_compressors(["zstd", "zlib"]) == ["zlib"]


def test_unknown_client_compressor_is_dropped_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="unsupported compressor 'lz4'"):
        assert compression.usable_compressors(["lz4", "zlib"]) == ["zlib"]
    assert not compression.compressor_available("lz4")


def test_installed_compressors_raise_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compression.usable_compressors(["snappy", "zlib", "zstd"]) == [
            "snappy", "zlib", "zstd"]


def test_compressor_needs_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compression, "_snappy", None)
    with pytest.raises(ConfigurationError, match="needs the python-snappy package"):
        compression.Compressor("snappy")


# -- check_reply -------------------------------------------------------------------------

# The SDAM spec's lists, written out so a change in PyMongo's shows up here.
SPEC_NOT_PRIMARY_CODES = {10107, 13435, 10058}
SPEC_RECOVERING_CODES = {11600, 11602, 13436, 189, 91}
SPEC_SHUTDOWN_CODES = {11600, 91}


def test_state_change_codes_are_the_specs() -> None:
    assert replies.NOT_PRIMARY_CODES == SPEC_NOT_PRIMARY_CODES | SPEC_RECOVERING_CODES
    assert replies.SHUTDOWN_CODES == SPEC_SHUTDOWN_CODES


def test_ok_reply_is_returned_as_is() -> None:
    reply = {"ok": 1.0, "n": 2}
    assert replies.check_reply(reply) is reply


def test_command_error() -> None:
    reply = {
        "ok": 0.0,
        "errmsg": "no such command: 'frob'",
        "code": 59,
        "codeName": "CommandNotFound",
        "errorLabels": ["SomeLabel"],
    }
    with pytest.raises(OperationFailure) as caught:
        replies.check_reply(reply)
    error = caught.value
    assert type(error) is OperationFailure
    assert error.code == 59
    assert error.details == reply
    assert error.details["codeName"] == "CommandNotFound"
    assert error.has_error_label("SomeLabel") and not error.has_error_label("Other")
    assert "no such command" in str(error)


@pytest.mark.parametrize("code", sorted(SPEC_NOT_PRIMARY_CODES | SPEC_RECOVERING_CODES))
def test_not_primary_codes(code: int) -> None:
    reply = {"ok": 0, "errmsg": "whatever", "code": code, "errorLabels": ["RetryableWriteError"]}
    with pytest.raises(NotPrimaryError) as caught:
        replies.check_reply(reply)
    assert caught.value.details == reply
    assert caught.value.has_error_label("RetryableWriteError")


@pytest.mark.parametrize(
    "message", ["not master", "not master or secondary", "node is recovering", "x: not master!"]
)
def test_not_primary_messages_without_a_code(message: str) -> None:
    with pytest.raises(NotPrimaryError):
        replies.check_reply({"ok": 0, "errmsg": message})


def test_a_code_outranks_the_message() -> None:
    with pytest.raises(OperationFailure) as caught:
        replies.check_reply({"ok": 0, "errmsg": "not master", "code": 2})
    assert not isinstance(caught.value, NotPrimaryError)
    assert not replies.is_state_change_error(2, "node is recovering")
    assert replies.is_state_change_error(None, "node is recovering")


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (11000, DuplicateKeyError),
        (11001, DuplicateKeyError),
        (12582, DuplicateKeyError),
        (50, ExecutionTimeout),
        (43, CursorNotFound),
    ],
)
def test_specific_operation_failures(code: int, error_class: type[OperationFailure]) -> None:
    with pytest.raises(error_class) as caught:
        replies.check_reply({"ok": 0, "errmsg": "e", "code": code})
    assert caught.value.code == code


def test_error_without_errmsg() -> None:
    with pytest.raises(OperationFailure, match="command failed"):
        replies.check_reply({"ok": 0})


def test_reply_without_ok() -> None:
    with pytest.raises(OperationFailure, match="legacy failure") as caught:
        replies.check_reply({"$err": "legacy failure", "code": 13})
    assert caught.value.code == 13
    with pytest.raises(OperationFailure, match="no 'ok' field"):
        replies.check_reply({})


WCE_REPLY = {
    "ok": 1,
    "n": 1,
    "writeConcernError": {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting"},
    "errorLabels": ["RetryableWriteError"],
}


def test_write_concern_error() -> None:
    with pytest.raises(WriteConcernError) as caught:
        replies.check_reply(WCE_REPLY)
    error = caught.value
    assert type(error) is WriteConcernError
    assert error.code == 64
    assert error.details is not None and error.details["codeName"] == "WriteConcernFailed"
    assert error.has_error_label("RetryableWriteError")
    assert "errorLabels" not in WCE_REPLY["writeConcernError"]  # the reply is not changed


@pytest.mark.parametrize(
    "wce", [{"code": 64, "errmsg": "t", "errInfo": {"wtimeout": True}}, {"code": 50, "errmsg": "t"}]
)
def test_write_concern_timeout(wce: dict[str, Any]) -> None:
    with pytest.raises(WTimeoutError):
        replies.check_reply({"ok": 1, "writeConcernError": wce})


def test_write_concern_error_left_in_the_reply_on_request() -> None:
    assert replies.check_reply(WCE_REPLY, raise_write_concern_error=False) is WCE_REPLY


def test_command_error_outranks_a_write_concern_error() -> None:
    with pytest.raises(OperationFailure) as caught:
        replies.check_reply({**WCE_REPLY, "ok": 0, "errmsg": "boom", "code": 2})
    assert not isinstance(caught.value, WriteConcernError)


# -- OP_QUERY and OP_REPLY ---------------------------------------------------------------


def op_reply(
    *documents: bytes,
    flags: int = 0,
    cursor_id: int = 0,
    starting_from: int = 0,
    number_returned: int | None = None,
    response_to: int = 3,
) -> bytes:
    count = len(documents) if number_returned is None else number_returned
    body = struct.pack("<iqii", flags, cursor_id, starting_from, count) + b"".join(documents)
    return frame(body, wire.OP_REPLY, response_to=response_to)


def decode_op_reply(data: bytes) -> wire.LegacyReply:
    return wire.decode_reply(wire.parse_reply_header(data), data[wire.HEADER_SIZE :])


def test_encode_query_layout() -> None:
    command = {"isMaster": 1, "helloOk": True}
    request_id, data = wire.encode_query(command, "admin", request_id=9)
    document = bson.encode(command)
    namespace = b"admin.$cmd\x00"
    expected_body = struct.pack("<i", 0) + namespace + struct.pack("<ii", 0, -1) + document
    assert request_id == 9
    assert data == struct.pack("<iiii", 16 + len(expected_body), 9, 0, 2004) + expected_body


def test_encode_query_adds_no_db_field_and_draws_request_ids() -> None:
    first, data = wire.encode_query({"isMaster": 1}, "admin")
    second, _ = wire.encode_query({"isMaster": 1}, "admin")
    assert second > first
    assert bson.decode(data[16 + 4 + len(b"admin.$cmd\x00") + 8 :]) == {"isMaster": 1}


def test_encode_query_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one field"):
        wire.encode_query({}, "admin")
    with pytest.raises(ValueError, match="NUL"):
        wire.encode_query({"isMaster": 1}, "ad\x00min")
    with pytest.raises(DocumentTooLarge, match="'isMaster'"):
        wire.encode_query({"isMaster": 1, "pad": "x" * 200}, "admin", max_message_size=100)


def test_reply_round_trip() -> None:
    reply = decode_op_reply(op_reply(bson.encode({"ok": 1.0, "maxWireVersion": 21})))
    assert reply == wire.LegacyReply(7, 3, 0, 0, 0, [{"ok": 1.0, "maxWireVersion": 21}])
    assert reply.command_reply() == {"ok": 1.0, "maxWireVersion": 21}


def test_reply_with_several_documents_and_a_cursor() -> None:
    data = op_reply(bson.encode({"a": 1}), bson.encode({"b": 2}), cursor_id=77, starting_from=5)
    reply = decode_op_reply(data)
    assert (reply.cursor_id, reply.starting_from) == (77, 5)
    assert reply.documents == [{"a": 1}, {"b": 2}]
    with pytest.raises(ProtocolError, match="must hold one document, not 2"):
        reply.command_reply()


def test_empty_reply_is_not_a_command_reply() -> None:
    with pytest.raises(ProtocolError, match="not 0"):
        decode_op_reply(op_reply()).command_reply()


def test_query_failure_reply_raises_through_check_reply() -> None:
    data = op_reply(bson.encode({"$err": "no such command", "code": 59}), flags=wire.QUERY_FAILURE)
    reply = decode_op_reply(data)
    assert reply.flags & wire.QUERY_FAILURE
    with pytest.raises(OperationFailure, match="no such command") as caught:
        replies.check_reply(reply.command_reply())
    assert caught.value.code == 59


def test_reply_header_accepts_only_op_reply() -> None:
    assert wire.parse_reply_header(wire.pack_header(36, 1, 2, wire.OP_REPLY)).op_code == 1
    with pytest.raises(ProtocolError, match=r"expected an OP_REPLY .* got opcode 2013"):
        wire.parse_reply_header(wire.pack_header(36, 1, 2, wire.OP_MSG))
    with pytest.raises(ProtocolError, match="exceeds the maximum message size 100"):
        wire.parse_reply_header(wire.pack_header(101, 1, 2, wire.OP_REPLY), max_message_size=100)
    with pytest.raises(ProtocolError, match="header is 3 bytes"):
        wire.parse_reply_header(b"abc")


def test_decode_reply_refuses_another_opcode() -> None:
    data = op_msg(body_section({"ok": 1}))
    with pytest.raises(ProtocolError, match="expected an OP_REPLY"):
        wire.decode_reply(wire.parse_header(data), data[16:])


_OK = bson.encode({"ok": 1})


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (frame(b"\x00" * 19, wire.OP_REPLY), "19 bytes, too short for its prefix"),
        (op_reply(_OK, number_returned=-1), "claims -1 documents"),
        (op_reply(_OK, number_returned=2), "claims 2 documents but holds 1"),
        (op_reply(_OK, _OK, number_returned=1), "claims 1 documents but holds 2"),
        (op_reply(_OK[:-1], number_returned=1), "claims 13 bytes; 12 remain"),
        (op_reply(b"\x04\x00\x00\x00", number_returned=1), "claims 4 bytes"),
        (op_reply(_OK + b"\x01\x00", number_returned=2), "truncated inside a BSON"),
        (op_reply(struct.pack("<i", 8) + b"\x20a\x00\x00"), "invalid BSON"),
    ],
)
def test_malformed_replies(data: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_op_reply(data)


def test_reply_body_disagrees_with_its_header() -> None:
    data = op_reply(_OK)
    with pytest.raises(ProtocolError, match="its header says"):
        wire.decode_reply(wire.parse_reply_header(data), data[16:-1])


def test_corrupted_replies_only_raise_protocol_error() -> None:
    """Random damage to a valid OP_REPLY either still decodes or is a ProtocolError."""
    good = op_reply(bson.encode({"ok": 1, "hosts": ["a:1", "b:2"], "n": 1.5}))[16:]
    rng = random.Random(20251124)
    for _ in range(3000):
        damaged = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cut = rng.choice([len(damaged), rng.randrange(len(damaged))])
        with contextlib.suppress(ProtocolError):
            decode_op_reply(frame(bytes(damaged[:cut]), wire.OP_REPLY))
