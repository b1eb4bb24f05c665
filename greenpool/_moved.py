"""Import paths greenpool's documentation once showed, kept working with a warning.

What lives here: :data:`MOVED_MODULES`, modules that earlier documentation imported from
and the package does not have, each name with its public path; :data:`RENAMED_MODULES`,
modules that moved inside the package (``greenpool.client.uri``, now
``greenpool.client.config.uri``), each with the module that has its names now; the finder
that makes each of them an alias module (``greenpool/__init__.py`` installs it); and
:func:`package_getattr`, for a package that took an old module's name
(``greenpool.client.topology``). Reading an old path works and raises a
:class:`DeprecationWarning` that names the public path, or else the new one.

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["MOVED_MODULES", "RENAMED_MODULES", "install", "package_getattr"]

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

#: Old module -> the module that has its names now: every name of the new module's
#: ``__all__`` reads from the old path too.
RENAMED_MODULES: Mapping[str, str] = {
    **{f"greenpool.client.{name}": f"greenpool.client.{room}.{name}"
       for room, names in (
           ("config", ("codecs", "dns", "inert", "readpref", "settings", "tlscontext", "uri")),
           ("topology", ("checker", "discovery", "monitor", "roundtrips", "sdam", "selection",
                         "server", "srvpoll", "topologylog")),
           ("operations", ("bulk", "commands", "concern", "retries", "session",
                           "sessionopts", "timeouts")),
           ("api", ("client", "collection", "cursor", "database", "findcursor")))
       for name in names},
    "greenpool.cli.embedded": "greenpool.testing.embedded",
    "greenpool.cli.replset": "greenpool.testing.replset",
}

#: Public homes, searched in order for the object an old path names.
_PUBLIC = ("greenpool", "greenpool.testing")


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _warn(old: str, new: str, stacklevel: int = 3) -> None:
    # stacklevel 3: past this function and the attribute hook, at the line that read it.
    warnings.warn(f"{old} is deprecated; import {new} instead", DeprecationWarning,
                  stacklevel=stacklevel)


def _renamed(old: str, source: str, name: str, *, warn: bool = True) -> Any:
    """``name`` of module ``source``, read as ``old.name``: warns naming its public path
    (else its new one). Only the names of the new module's ``__all__``."""
    module = importlib.import_module(source)
    if name not in getattr(module, "__all__", ()):
        raise AttributeError(f"module {old!r} has no attribute {name!r} (it moved to "
                             f"{source}; greenpool's public names are in greenpool, "
                             "greenpool.pymongo and greenpool.testing)")
    value = getattr(module, name)
    public = next((f"{home}.{name}" for home in _PUBLIC
                   if getattr(importlib.import_module(home), name, None) is value), None)
    if warn:  # past this function and the attribute hook that called it
        _warn(f"{old}.{name}", public or f"{source}.{name}", stacklevel=4)
    return value


def package_getattr(package: str, source: str) -> Callable[[str], Any]:
    """A ``__getattr__`` for ``package``, which took the name of an old module whose names
    now live in ``source``: each reads from the package with the warning."""
    def __getattr__(name: str) -> Any:
        # ``from package import name`` asks the import system's _handle_fromlist first,
        # then reads the name: one warning, at the read.
        asked = sys._getframe(1).f_code.co_name == "_handle_fromlist"
        return _renamed(package, source, name, warn=not asked)
    return __getattr__


class _AliasModule(types.ModuleType):
    """An old module: each listed name resolves to its public path, with the warning."""

    def __getattr__(self, name: str) -> Any:
        source = RENAMED_MODULES.get(self.__name__)
        if source is not None:
            return _renamed(self.__name__, source, name)
        new = MOVED_MODULES[self.__name__].get(name)
        if new is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}; "
                                 "greenpool's public names are in greenpool, "
                                 "greenpool.pymongo and greenpool.testing")
        _warn(f"{self.__name__}.{name}", new)
        return _resolve(new)

    def __dir__(self) -> list[str]:
        source = RENAMED_MODULES.get(self.__name__)
        if source is not None:
            return sorted(importlib.import_module(source).__all__)
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
        if fullname not in MOVED_MODULES and fullname not in RENAMED_MODULES:
            return None
        # A module without names is a package, so that its old submodules import.
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(), is_package=not MOVED_MODULES.get(fullname, True))


_FINDER = _AliasFinder()


def install() -> None:
    """Make the old modules importable (once per process)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
