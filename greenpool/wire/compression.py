"""Wire compression: the compressors, their negotiation, and bounded decompression.

What lives here: the compression spec's compressors (noop, snappy, zlib, zstd)
as :class:`Compressor`, which of them this process can use
(:func:`compressor_available`, :func:`usable_compressors`), the hello's
negotiation (:func:`negotiate_compressor`), which commands may be compressed
(:func:`may_compress`), and :func:`decompress`, which refuses data that
disagrees with its declared size before allocating it.

Payloads of :data:`OFF_HUB_SIZE` bytes or more are compressed and
decompressed in gevent's threadpool (:func:`~greenpool.wire.offload.offload`):
zlib, zstd and snappy release the GIL while they work, so other greenlets run
meanwhile, where inline a large message would hold the hub (zlib takes tens of
milliseconds per megabyte).

Decompression is bounded by the size the message declares (which the caller
has bounded already, see :mod:`greenpool.wire.messages`): zlib and zstd inflate
in slices of :data:`SLICE` bytes and stop, refusing the reply, as soon as the
output passes the declared size, so a bomb (a few megabytes that would inflate
to gigabytes) costs at most the declared size; the worker thread holds the GIL
for a slice at a time at most, so the hub runs meanwhile. Snappy's format
cannot produce more than the length it starts with, which must equal the
declared size; it is inflated in one call, bounded by that length.

What must not: message framing. OP_COMPRESSED's header and prefix are
:mod:`greenpool.wire.messages`' job; this module sees only payload bytes. It
imports nothing of greenpool but :mod:`greenpool.errors` and
:mod:`greenpool.wire.offload`.
"""

from __future__ import annotations

import importlib
import warnings
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

from greenpool.errors import ConfigurationError, ProtocolError
from greenpool.wire.offload import offload

__all__ = [
    "COMPRESSOR_IDS",
    "NO_COMPRESSION",
    "OFF_HUB_SIZE",
    "SLICE",
    "Compressor",
    "compressor_available",
    "decompress",
    "may_compress",
    "negotiate_compressor",
    "usable_compressors",
]

#: The compression spec's compressor ids.
COMPRESSOR_IDS: Mapping[str, int] = {"noop": 0, "snappy": 1, "zlib": 2, "zstd": 3}
_COMPRESSOR_NAMES = {value: name for name, value in COMPRESSOR_IDS.items()}
# What to install for a compressor that is not in the standard library.
_PACKAGES = {"snappy": "python-snappy", "zstd": "zstandard"}

#: Payloads (uncompressed) of this many bytes or more are compressed and
#: decompressed in gevent's threadpool; below it the hop to a thread would
#: cost about as much as the work (zlib: about 5 ms at this size).
OFF_HUB_SIZE = 128 * 1024

#: Decompression takes its input, and gives its output, this many bytes at a
#: time: each slice holds the GIL for a moment only (copying it out).
SLICE = 256 * 1024

#: Commands the compression spec forbids compressing (lowercased first key):
#: the handshake and everything that carries credentials.
NO_COMPRESSION = frozenset(
    {
        "hello",
        "ismaster",
        "saslstart",
        "saslcontinue",
        "getnonce",
        "authenticate",
        "createuser",
        "updateuser",
        "copydbsaslstart",
        "copydbgetnonce",
        "copydb",
    }
)


def _optional(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


# Looked up at call time (not bound into closures) so that tests can take a
# compressor away by setting these to None.
_snappy = _optional("snappy")
_zstd = _optional("zstandard")


def compressor_available(name: str) -> bool:
    """Whether greenpool knows compressor ``name`` and its package is importable."""
    if name in ("noop", "zlib"):
        return True
    if name == "snappy":
        return _snappy is not None
    if name == "zstd":
        return _zstd is not None
    return False


def _check_zlib_level(level: int) -> None:
    if isinstance(level, bool) or not isinstance(level, int) or not -1 <= level <= 9:
        raise ConfigurationError(
            f"zlibCompressionLevel must be an integer from -1 to 9, not {level!r}"
        )


@dataclass(frozen=True, slots=True)
class Compressor:
    """A wire compressor: ``"noop"``, ``"snappy"``, ``"zlib"`` or ``"zstd"``.

    >>> Compressor("zlib", zlib_level=6).compressor_id
    2
    """

    name: str
    #: zlib's level, -1 (zlib's default, 6) to 9; ignored by the others.
    zlib_level: int = -1

    def __post_init__(self) -> None:
        if self.name not in COMPRESSOR_IDS:
            known = ", ".join(COMPRESSOR_IDS)
            raise ConfigurationError(f"unknown compressor {self.name!r} (expected one of {known})")
        if not compressor_available(self.name):
            raise ConfigurationError(
                f"compressor {self.name!r} needs the {_PACKAGES[self.name]} package"
            )
        _check_zlib_level(self.zlib_level)

    @property
    def compressor_id(self) -> int:
        """The id OP_COMPRESSED carries for this compressor."""
        return COMPRESSOR_IDS[self.name]

    def compress(self, data: bytes) -> bytes:
        """Compress ``data`` the way the server expects (raw snappy, zlib stream,
        zstd frame); in gevent's threadpool from :data:`OFF_HUB_SIZE` bytes."""
        if len(data) >= OFF_HUB_SIZE and self.name != "noop":
            return offload(self._compress, data)
        return self._compress(data)

    def _compress(self, data: bytes) -> bytes:
        if self.name == "zlib":
            return zlib.compress(data, self.zlib_level)
        if self.name == "snappy":
            return bytes(_module(_snappy).compress(data))
        if self.name == "zstd":
            return bytes(_module(_zstd).ZstdCompressor().compress(data))
        return data


def _module(module: ModuleType | None) -> ModuleType:
    # A Compressor is only built when its package is importable.
    assert module is not None
    return module


def may_compress(command_name: str) -> bool:
    """Whether the compression spec allows compressing the named command."""
    return command_name.lower() not in NO_COMPRESSION


def usable_compressors(names: Iterable[str]) -> list[str]:
    """The compressors in ``names`` (a URI's ``compressors``) greenpool can use, in order.

    Each one that is unknown, or whose package is not installed, is dropped
    with a warning naming it.
    """
    usable = []
    for name in names:
        if name not in COMPRESSOR_IDS:
            warnings.warn(f"unsupported compressor {name!r} is ignored", stacklevel=2)
        elif not compressor_available(name):
            warnings.warn(
                f"compressor {name!r} is ignored: install {_PACKAGES[name]} to use it",
                stacklevel=2,
            )
        else:
            usable.append(name)
    return usable


def negotiate_compressor(
    client: Iterable[str], server: Sequence[str] | None, *, zlib_level: int = -1
) -> Compressor | None:
    """The first of the client's compressors the server also offers, or None.

    ``client`` is the URI's ``compressors`` list, in order of preference;
    ``server`` is the hello reply's ``compression`` list. Client compressors
    greenpool cannot use are dropped with a warning (see
    :func:`usable_compressors`).

    >>> negotiate_compressor(["zstd", "zlib"], ["zlib"]).name
    'zlib'
    """
    _check_zlib_level(zlib_level)
    offered = set(server or ())
    for name in usable_compressors(client):
        if name in offered:
            return Compressor(name, zlib_level)
    return None


def _snappy_declared_length(data: bytes) -> int:
    # A raw snappy block starts with its uncompressed length as a varint.
    result = 0
    for index, byte in enumerate(data[:5]):
        result |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return result
    raise ProtocolError("snappy data has no valid length preamble")


def _inflate_snappy(data: bytes, size: int) -> bytes:
    # The declared length first: python-snappy allocates whatever it says, and
    # the format cannot produce more than it says.
    declared = _snappy_declared_length(data)
    if declared != size:
        raise ProtocolError(f"snappy data declares {declared} bytes; the message declared {size}")
    return bytes(_module(_snappy).uncompress(data))


def _inflate_zlib(data: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    output = _Output("zlib", size)
    view = memoryview(data)
    position = 0  # how much of data the inflater has taken
    while position < len(data) and not inflater.eof:
        pending: bytes | memoryview = view[position : position + SLICE]
        position += len(pending)
        while pending and not inflater.eof:
            output.add(inflater.decompress(pending, output.room()))
            pending = inflater.unconsumed_tail
    if not inflater.eof or inflater.unused_data or position < len(data):
        raise ProtocolError("zlib stream is truncated or followed by extra bytes")
    return output.joined()


def _inflate_zstd(data: bytes, size: int) -> bytes:
    zstd = _module(_zstd)
    declared = zstd.frame_content_size(data)
    if declared not in (-1, size):  # -1: the frame does not say
        raise ProtocolError(f"zstd frame declares {declared} bytes; the message declared {size}")
    # Bounded reads: decompress() would trust the frame's own size instead.
    reader = zstd.ZstdDecompressor().stream_reader(data, read_size=SLICE)
    output = _Output("zstd", size)
    while piece := reader.read(output.room()):
        output.add(piece)
    return output.joined()


class _Output:
    """What an inflater gave so far, in slices, refused as soon as it passes
    the declared size.

    Slices rather than one growing buffer: growing a large buffer can copy it
    whole, holding the GIL (and so the hub) all the while; joining the slices
    at the end does not hold it (``bytes.join`` lets go of the GIL for large
    results), and a bomb is refused before any join.
    """

    __slots__ = ("_name", "_size", "_slices", "_total")

    def __init__(self, name: str, size: int) -> None:
        self._name = name
        self._size = size
        self._slices: list[bytes] = []
        self._total = 0

    def room(self) -> int:
        """How much to inflate next: a slice, or one byte past the declared
        size at most (enough to tell that the data holds more than it declared)."""
        return min(SLICE, self._size + 1 - self._total)

    def add(self, piece: bytes) -> None:
        self._slices.append(piece)
        self._total += len(piece)
        if self._total > self._size:
            raise ProtocolError(f"OP_COMPRESSED {self._name} data inflates past the "
                                f"{self._size} bytes the message declared")

    def joined(self) -> bytes:
        return b"".join(self._slices)


_INFLATERS: Mapping[str, Callable[[bytes, int], bytes]] = {
    "noop": lambda data, size: data,
    "snappy": _inflate_snappy,
    "zlib": _inflate_zlib,
    "zstd": _inflate_zstd,
}


def decompress(compressor_id: int, data: bytes, size: int) -> bytes:
    """OP_COMPRESSED's payload ``data``, inflated by the compressor ``compressor_id``
    names to exactly ``size`` bytes (the size the message declared, already
    bounded by the caller); :class:`ProtocolError` for anything else, raised
    as soon as the output passes ``size``. In gevent's threadpool when the data
    or its declared size is :data:`OFF_HUB_SIZE` bytes or more."""
    name = _COMPRESSOR_NAMES.get(compressor_id)
    if name is None:
        raise ProtocolError(f"OP_COMPRESSED has an unknown compressor id {compressor_id}")
    if not compressor_available(name):
        raise ProtocolError(f"OP_COMPRESSED uses {name}, but {_PACKAGES[name]} is not installed")
    inflate = _INFLATERS[name]
    try:
        # A large input costs time too, even when it declares little.
        if max(size, len(data)) >= OFF_HUB_SIZE and name != "noop":
            result = offload(inflate, data, size)
        else:
            result = inflate(data, size)
    except ProtocolError:
        raise
    except Exception as exc:  # each library raises its own error types
        raise ProtocolError(f"OP_COMPRESSED {name} data does not decompress: {exc}") from exc
    if len(result) != size:
        raise ProtocolError(
            f"OP_COMPRESSED {name} data decompressed to {len(result)} bytes; "
            f"the message declared {size}"
        )
    return result
