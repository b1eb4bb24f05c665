"""Import paths greenpool's documentation once showed, kept working with a warning.

What lives here: :data:`MOVED_MODULES`, modules that earlier documentation imported from
and the package does not have, each name with its public path; the finder that makes each
of them an alias module (``greenpool/__init__.py`` installs it); and :func:`moved_names`,
for a name whose module is still greenpool's own but whose public path is elsewhere
(``greenpool.cli.embedded.EmbeddedServer``, the command line's, public as
``greenpool.testing.EmbeddedServer``). Reading an old path works and raises a
:class:`DeprecationWarning` that names the public one.

What must not live here: anything else. An entry stays until a release notes its removal.
Imports: none of greenpool's (a public path is imported when first read).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MOVED_MODULES", "install", "moved_names"]

_TESTING_SERVER = "greenpool.testing.EmbeddedServer"

#: Old module -> {name: its public path}. A module with no names is a package that only
#: holds others (``greenpool.tools``).
MOVED_MODULES: Mapping[str, Mapping[str, str]] = {
    "greenpool.embedded": {"EmbeddedServer": _TESTING_SERVER},
    "greenpool.tools": {},
    "greenpool.tools.embedded": {"EmbeddedServer": _TESTING_SERVER},
    "greenpool.link": {"Link": "greenpool.Link", "LinkOptions": "greenpool.LinkOptions",
                       "connect": "greenpool.connect",
                       "make_connector": "greenpool.make_connector"},
    "greenpool.uri": {"InvalidURIError": "greenpool.InvalidURIError",
                      "parse_uri": "greenpool.parse_uri",
                      "redact_uri": "greenpool.redact_uri",
                      "uri_secrets": "greenpool.uri_secrets"},
}


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _warn(old: str, new: str) -> None:
    # stacklevel 3: past this function and the attribute hook, at the line that read it.
    warnings.warn(f"{old} is deprecated; import {new} instead", DeprecationWarning,
                  stacklevel=3)


class _AliasModule(types.ModuleType):
    """An old module: each listed name resolves to its public path, with the warning."""

    def __getattr__(self, name: str) -> Any:
        new = MOVED_MODULES[self.__name__].get(name)
        if new is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}; "
                                 "greenpool's public names are in greenpool, "
                                 "greenpool.pymongo and greenpool.testing")
        _warn(f"{self.__name__}.{name}", new)
        return _resolve(new)

    def __dir__(self) -> list[str]:
        return sorted(MOVED_MODULES[self.__name__])


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AliasModule(spec.name, "An old import path of greenpool; see greenpool._moved.")

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the names resolve when read."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`MOVED_MODULES`, and nothing else."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        # A module without names is a package, so that its old submodules import.
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(), is_package=not MOVED_MODULES[fullname])


_FINDER = _AliasFinder()


def install() -> None:
    """Make the old modules importable (once per process)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def _from_greenpool(frame: types.FrameType | None) -> bool:
    name = "" if frame is None else frame.f_globals.get("__name__", "")
    return name == "greenpool" or name.startswith("greenpool.")


def moved_names(module_name: str, **moved: str) -> None:
    """Make reading each name of ``moved`` (name=public path) from module ``module_name``
    warn, when the reader is not greenpool itself: greenpool's own modules keep using
    their internal paths, and the module's own code reads its globals directly."""
    module = sys.modules[module_name]

    def hook(name: str, new: str) -> property:
        def read(self: types.ModuleType) -> Any:
            if not _from_greenpool(sys._getframe(1)):
                _warn(f"{module_name}.{name}", new)
            return self.__dict__[name]
        return property(read)

    kind = type(f"_Moved_{module_name.replace('.', '_')}", (types.ModuleType,),
                {name: hook(name, new) for name, new in moved.items()})
    module.__class__ = kind
