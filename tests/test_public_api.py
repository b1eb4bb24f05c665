"""The public face: what an application imports, and only that, in the docs.

Everything a user imports comes from six modules (PUBLIC). The API reference names only
them, and documents every name they export; the README, the docs and the examples import
only from them. Paths earlier docs showed keep working, each with a DeprecationWarning
that names the public path (greenpool/_moved.py), and greenpool itself never reads one.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import greenpool
import greenpool.testing
from greenpool import _moved

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ("greenpool", "greenpool.gridfs", "greenpool.pymongo", "greenpool.testing",
          "greenpool.otel", "greenpool.flask_pymongo")
API = ROOT / "docs" / "api.rst"
DOTTED = re.compile(r"\bgreenpool(?:\.[A-Za-z_][A-Za-z_0-9]*)*")
IMPORT = re.compile(r"^\s*(?:from\s+(greenpool[\w.]*)\s+import|import\s+(greenpool[\w.]*))",
                    re.MULTILINE)
ROLE = re.compile(r":[a-z]+:`~?(greenpool[\w.]*)`")


def resolve(path: str) -> tuple[str, Any]:
    """The longest importable module of a dotted path, and the object the path names
    (AttributeError if it names nothing)."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        found: Any = module
        for name in parts[end:]:
            found = getattr(found, name)
        return module.__name__, found
    raise ImportError(path)


def public_path(value: Any, name: str) -> str | None:
    return next((f"{home}.{name}" for home in ("greenpool", "greenpool.testing")
                 if getattr(importlib.import_module(home), name, None) is value), None)


#: Packages that took an old module's name, with the module that has its names now.
RENAMED_PACKAGES = {"greenpool.client": "greenpool",
                    "greenpool.client.topology": "greenpool.client.topology.topology",
                    "greenpool.client.operations": "greenpool.client.operations.operations"}


def moved() -> list[tuple[str, str, str]]:
    """(old module, name, the path its warning names) for every old path greenpool keeps:
    the public path, else the new one."""
    renamed = [(old, name, public_path(getattr(module, name), name) or f"{new}.{name}")
               for old, new in {**_moved.RENAMED_MODULES, **RENAMED_PACKAGES}.items()
               for module in [importlib.import_module(new)]
               for name in module.__all__]
    return [*((module, name, new) for module, names in _moved.MOVED_MODULES.items()
              for name, new in names.items()), *renamed]


def test_every_module_that_moved_keeps_its_old_path() -> None:
    """Each module the client's rooms and greenpool.testing took from greenpool.client and
    greenpool.cli (the files of the tree before they moved) keeps its old path."""
    names = ("bulk checker client codecs collection commands concern cursor database "
             "discovery dns findcursor inert monitor operations readpref retries roundtrips "
             "sdam selection server session sessionopts settings srvpoll timeouts "
             "tlscontext topology topologylog uri")
    before = {f"greenpool.client.{name}" for name in names.split()} | {
        "greenpool.cli.embedded", "greenpool.cli.replset"}
    kept = set(_moved.RENAMED_MODULES) | set(RENAMED_PACKAGES)
    assert before - kept == set()
    for package in RENAMED_PACKAGES:
        assert importlib.import_module(package).__getattr__.__module__ == "greenpool._moved"


@pytest.mark.parametrize("module", PUBLIC)
def test_every_exported_name_exists_and_is_documented(module: str) -> None:
    names = importlib.import_module(module).__all__
    text = API.read_text()
    undocumented = [name for name in names if name != "__version__"
                    and not re.search(rf"\b{re.escape(module)}\.{re.escape(name)}\b", text)]
    assert undocumented == [], f"docs/api.rst does not document these of {module}"


def test_the_api_reference_names_only_public_modules() -> None:
    problems = []
    for number, line in enumerate(API.read_text().splitlines(), 1):
        comment = line.startswith("..") and "::" not in line
        for path in ([] if comment else DOTTED.findall(line)):
            try:
                module, _ = resolve(path)
            except (ImportError, AttributeError) as error:
                problems.append(f"api.rst:{number}: {path} does not exist ({error})")
                continue
            if module not in PUBLIC:
                problems.append(f"api.rst:{number}: {path} is in {module}, not a public module")
    assert problems == []


def _documents() -> list[Path]:
    return [ROOT / "README.rst", *sorted((ROOT / "docs").rglob("*.rst")),
            *sorted((ROOT / "examples").rglob("*.py"))]


def test_docs_and_examples_use_only_public_paths() -> None:
    """Imports and cross-references; the module map (architecture.rst) names internal
    modules by design."""
    problems = []
    for document in _documents():
        if document.name == "architecture.rst":
            continue
        text = document.read_text()
        paths = [m[1] or m[2] for m in IMPORT.finditer(text)] + ROLE.findall(text)
        for path in paths:
            module, _ = resolve(path)
            if module not in PUBLIC:
                problems.append(f"{document.relative_to(ROOT)}: {path} ({module} is internal)")
    assert problems == []


@pytest.mark.parametrize("old_module, name, new", moved(),
                         ids=[f"{m}.{n}" for m, n, _ in moved()])
def test_an_old_path_works_and_warns_naming_the_new_one(
        old_module: str, name: str, new: str) -> None:
    _, public = resolve(new)
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(f"from {old_module} import {name}", "user_code.py", "exec"), namespace)
    assert namespace[name] is public
    assert [(w.category, str(w.message), w.filename) for w in caught] == [
        (DeprecationWarning, f"{old_module}.{name} is deprecated; import {new} instead",
         "user_code.py")]


def test_an_old_module_refuses_a_name_it_never_had() -> None:
    old = importlib.import_module("greenpool.embedded")
    with pytest.raises(AttributeError, match="public names are in greenpool"):
        old.Client  # noqa: B018
    assert dir(old) == ["EmbeddedServer"]


def test_the_old_package_holds_its_old_modules() -> None:
    with pytest.warns(DeprecationWarning, match="greenpool.testing.EmbeddedServer"):
        from greenpool.tools import embedded
        assert embedded.EmbeddedServer is greenpool.testing.EmbeddedServer


def test_greenpool_itself_never_reads_an_old_path() -> None:
    code = ("import greenpool, greenpool.testing, greenpool.pymongo, greenpool.cli.demo, "
            "greenpool.__main__, greenpool.cli.check; from greenpool.cli import server; "
            "from greenpool.testing import embedded, replset; server.main")
    result = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_testing_module_is_the_servers_public_home() -> None:
    import greenpool.testing

    assert greenpool.testing.__all__ == ["EmbeddedServer", "MemberConfig", "MemberStatus",
                                         "ReplicaSet"]
    assert greenpool.testing.EmbeddedServer.__module__ == "greenpool.testing.embedded"
    assert greenpool.testing.ReplicaSet.__module__ == "greenpool.testing.replset"
