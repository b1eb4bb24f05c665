"""The optional compiled build: which modules mypyc compiles, and which are loaded.

What lives here: :data:`MODULES`, the hot path's modules that ``python3 devtools/dev.py
compile`` compiles with mypyc into a copy of the package (``build/mypyc``, never the
installed package); :func:`compiled`, those of them this process imported compiled; and
:func:`mypyc_attr`, mypyc's per-class options (mypy_extensions' own when it is installed,
else a decorator that does nothing: the package never needs mypy to run).

What must not live here: behaviour. Every module of the package runs as pure Python, and
compiled modules and pure ones import each other freely. Imports: none of greenpool's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

__all__ = ["MODULES", "compiled", "mypyc_attr"]

_T = TypeVar("_T")

#: Compiled by ``devtools/dev.py compile``: the Client's command path below its public
#: methods (operations, server selection) and the wire link and messages under it, which
#: the floor of benchmarks/bench.py uses too. Modules with public entry points (the Client,
#: sessions, ``greenpool.timeout``, ``LinkOptions``) stay pure: compiled, a wrongly typed
#: argument would get mypyc's TypeError instead of greenpool's message naming the value,
#: and they add little (benchmarks/recorded/ has the instructions each
#: saves). The pool's hot path (``pool/pool.py``) is one class,
#: which mypyc compiles, but it stays pure for the same reason and one more: ``Pool`` is
#: a public entry point (compiled, ``Pool(..., long_hold_threshold="5")`` gets mypyc's
#: TypeError instead of greenpool's message), and its hold records read Python frames,
#: which compiled methods do not have (the acquire site and the holder's current site,
#: "inside Pool.checkout", would name the wrong frames).
MODULES = (
    "greenpool.client.operations.operations",
    "greenpool.client.topology.topology",
    "greenpool.wire.link",
    "greenpool.wire.messages",
)


def compiled() -> list[str]:
    """The modules of :data:`MODULES` this process imports compiled (extension modules)."""
    return [name for name in MODULES
            if not str(importlib.import_module(name).__file__).endswith(".py")]


try:
    from mypy_extensions import mypyc_attr
except ImportError:  # no mypy here: the options only matter to a mypyc build
    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        return lambda cls: cls
