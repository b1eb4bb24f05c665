"""The PyMongo releases greenpool.pymongo supports, and the check against them.

Rules of this module: the supported range, the installed release and the check that
refuses anything else. It imports only PyMongo's public version string, so it loads on
any PyMongo; ``internals.py`` runs the check before it imports anything private.
"""

from __future__ import annotations

import pymongo

SUPPORTED_PYMONGO = ((4, 9), (4, 21))
"""The PyMongo versions :mod:`greenpool.pymongo` supports: ``>= 4.9, < 4.21``.

The ``pymongo`` extra pins the same range (``pip install 'greenpool[pymongo]'``);
greenpool itself (the Client and the pool) needs only ``pymongo>=4.9``.

4.9 is the first release with the ``pymongo.synchronous`` layout and the
``_pool_class``/``_condition_class`` keywords the adapter plugs into. The
pool internals it overrides or relies on moved between minor releases; what
differs is bridged, one module per boundary, so every guarantee holds on every
supported release:

* ``before_4_18.py``: 4.9-4.17 publish events from each pool method (there is
  no ``pool._telemetry``) and name-mangle the pinned set; their ``checkout()``
  lost the connection when a kill landed in the checked-out event or in SDAM
  error handling, so GreenPool checks out and in the way 4.19 does instead.
* ``before_4_13.py``: 4.9-4.12 mark monitor pools ``handshake=False`` rather
  than ``is_sdam=True``.
* Monitor pools stay PyMongo's own on every release; nothing waits in them
  and no application greenlet runs in them.

The upper bound is the newest release reviewed. ``devtools/dev.py test`` runs the
adapter's tests on the latest patch of every minor release in the range."""

RELEASE: tuple[int, ...] = tuple(int(part) for part in pymongo.version.split(".")[:2])
"""The installed PyMongo's (major, minor)."""


class UnsupportedPyMongoVersion(ImportError):
    """The installed PyMongo is outside :data:`SUPPORTED_PYMONGO`."""


def _supported_text() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_PYMONGO
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def check_pymongo_version(version: str) -> None:
    """Raise :class:`UnsupportedPyMongoVersion` unless ``version`` is supported."""
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        major_minor = ()
    low, high = SUPPORTED_PYMONGO
    if len(major_minor) != 2 or not low <= major_minor < high:
        raise UnsupportedPyMongoVersion(
            f"greenpool.pymongo supports pymongo{_supported_text()}, but pymongo {version} "
            f"is installed: it relies on private PyMongo internals (the _pool_class and "
            f"_condition_class keywords, the pool's counters) reviewed only for that range. "
            f"Install a supported version: pip install 'pymongo{_supported_text()}' "
            f"(or pip install 'greenpool[pymongo]')"
        )
