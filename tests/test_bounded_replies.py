"""What one reply may cost: compression bombs from a server whose hello allows 2 GiB.

A fake server (tests/fake_server.py) claims ``maxMessageSizeBytes`` of 2 GiB and
answers a ping with a compressed reply that lies: a few hundred kilobytes that
inflate to far more than the size the message declares, or a declared size no
MongoDB server sends. For each, the link refuses the reply with one clear error,
closes that connection (and only that one: the next connection works), inflates no
more than the declared size (measured with tracemalloc, in every thread), and the
hub keeps running other greenlets meanwhile (tests/hub_blocks.py: no block over
50 ms, the time the operating system kept the process waiting excluded).

Snappy's format cannot inflate past the length it starts with, which must equal
the declared size (tests/test_wire.py): a snappy reply can lie only about a size
over the ceiling, refused here like the others.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
import snappy
import zstandard
from pymongo.errors import AutoReconnect

from greenpool import Pool
from greenpool.wire.connector import connect, make_connector
from greenpool.wire.link import Link, LinkOptions
from greenpool.wire.messages import MAX_MESSAGE_SIZE_CEILING
from tests.fake_server import OP_COMPRESSED, OP_MSG, FakeServer, Raw, Request
from tests.hub_blocks import HubBlockDetector

pytestmark = pytest.mark.timeout(60)

MiB = 1 << 20
#: What the fake server's hello claims.
HUGE = 2**31 - 1
#: The hub block the tests allow (tests/test_cooperative.py's limit).
LIMIT = 0.05
_ZEROS = b"\x00" * MiB


def zlib_bomb(inflated: int) -> bytes:
    """A zlib stream of ``inflated`` zero bytes (whole MiBs), built from one
    compressed MiB repeated: each full flush ends a self-contained block."""
    compressor = zlib.compressobj(9)
    first = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + block * (inflated // MiB - 1) + compressor.flush()


def zstd_bomb(inflated: int) -> bytes:
    """A zstd frame of ``inflated`` zero bytes that does not state its size."""
    compressor = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    parts = [compressor.compress(_ZEROS) for _ in range(inflated // MiB)]
    return b"".join([*parts, compressor.flush()])


BOMBS = {"zlib": zlib_bomb(1024 * MiB), "zstd": zstd_bomb(256 * MiB)}
COMPRESSOR_IDS = {"snappy": 1, "zlib": 2, "zstd": 3}


def compressed_reply(payload: bytes, compressor: str, declared: int) -> Any:
    """A handler answering with OP_COMPRESSED ``payload``, declared to inflate
    to ``declared`` bytes."""

    def reply(request: Request) -> Raw:
        body = struct.pack("<iiB", OP_MSG, declared, COMPRESSOR_IDS[compressor]) + payload
        header = struct.pack("<iiii", 16 + len(body), 1, request.request_id, OP_COMPRESSED)
        return Raw(header + body)

    return reply


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def peak_allocated(run: Any) -> int:
    """The most memory (bytes) allocated at once while ``run()`` ran, beyond
    what was allocated before it."""
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    run()
    return tracemalloc.get_traced_memory()[1] - before


def refused(link: Link) -> AutoReconnect:
    with pytest.raises(AutoReconnect) as failure:
        link.command("admin", {"ping": 1})
    return failure.value


@pytest.mark.parametrize("name", ["zlib", "zstd"])
def test_a_bomb_is_refused_once_it_inflates_past_its_declared_size(
    name: str, traced: None
) -> None:
    declared = 8 * MiB
    handlers = {"ping": compressed_reply(BOMBS[name], name, declared)}
    with FakeServer(hello={"maxMessageSizeBytes": HUGE}, compressors=(name,),
                    handlers=handlers) as server:
        link = connect(server.address, LinkOptions(compressors=(name,)))
        errors: list[AutoReconnect] = []
        peak = peak_allocated(lambda: errors.append(refused(link)))
        assert str(errors[0]) == (
            f"{server.address[0]}:{server.address[1]}: OP_COMPRESSED {name} data inflates "
            f"past the {declared} bytes the message declared")
        assert link.broken
        wait_for(lambda: server.hangups == [1])
    # The declared size (with its buffer's headroom) and the compressed reply
    # twice (received, then unwrapped): not the 256 MiB or 1 GiB the bomb holds.
    assert peak < 2 * declared + 2 * len(BOMBS[name]), peak


@pytest.mark.parametrize("name", ["zlib", "zstd", "snappy"])
def test_a_declared_size_over_the_ceiling_is_refused_before_inflating(
    name: str, traced: None
) -> None:
    declared = HUGE - 16  # what the hello's limit allows
    payload = BOMBS.get(name) or snappy.compress(b"x" * 1000)
    handlers = {"ping": compressed_reply(payload, name, declared)}
    with FakeServer(hello={"maxMessageSizeBytes": HUGE}, compressors=(name,),
                    handlers=handlers) as server:
        link = connect(server.address, LinkOptions(compressors=(name,)))
        assert link.max_message_size == MAX_MESSAGE_SIZE_CEILING
        errors: list[AutoReconnect] = []
        peak = peak_allocated(lambda: errors.append(refused(link)))
        assert str(errors[0]).endswith(
            f": OP_COMPRESSED declares {declared} uncompressed bytes; the maximum message "
            f"size is {MAX_MESSAGE_SIZE_CEILING}")
        assert link.broken
        wait_for(lambda: server.hangups == [1])
    assert peak < 2 * len(payload) + MiB, peak  # nothing inflated


@pytest.mark.parametrize("name", ["zlib", "zstd"])
def test_the_hub_runs_while_the_largest_bomb_allowed_is_refused(name: str) -> None:
    declared = MAX_MESSAGE_SIZE_CEILING - 16
    handlers = {"ping": compressed_reply(BOMBS[name], name, declared)}
    with FakeServer(hello={"maxMessageSizeBytes": HUGE}, compressors=(name,),
                    handlers=handlers) as server:
        link = connect(server.address, LinkOptions(compressors=(name,)))
        with HubBlockDetector(limit=LIMIT) as detector, detector.step("bomb") as step:
            error = refused(link)
        assert "inflates past" in str(error)
    assert step.blocks(LIMIT) == [], [(gap.block, gap.stack) for gap in step.blocks(LIMIT)]


def test_a_bad_reply_costs_its_connection_only() -> None:
    """The pool discards the connection the bomb came on; the next one works."""
    bomb = compressed_reply(BOMBS["zlib"], "zlib", 8 * MiB)
    sent: list[int] = []

    def ping(request: Request) -> Any:
        sent.append(request.connection)
        return bomb(request) if len(sent) == 1 else {"ok": 1.0}

    options = LinkOptions(compressors=("zlib",))
    with FakeServer(hello={"maxMessageSizeBytes": HUGE}, compressors=("zlib",),
                    handlers={"ping": ping}) as server:
        pool: Pool[Link] = Pool(server.address, {}, connector=make_connector(options))
        pool.ready()
        with pytest.raises(AutoReconnect, match="inflates past"), pool.checkout() as conn:
            assert conn.transport is not None
            conn.transport.command("admin", {"ping": 1})
        with pool.checkout() as conn:
            assert conn.transport is not None
            assert conn.transport.command("admin", {"ping": 1}) == {"ok": 1.0}
        size = pool.get_stats()["pool_size"]
        pool.close()
    assert sent == [1, 2]
    assert server.hangups[:1] == [1]
    assert size == 1


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    with gevent.Timeout(timeout, AssertionError("condition not met in time")):
        while not condition():
            gevent.sleep(0.01)
