"""The package's layering, enforced: who may import whom, and no import cycles.

greenpool is built in layers (docs/architecture.rst), each a folder; the client layer is
four rooms, each a folder of its own. The rules are :data:`ALLOWED`, and the module map
of docs/development.rst states them as a table, which must say the same:

- base: ``greenpool.errors``, ``greenpool.address``, ``greenpool._version``,
  ``greenpool._compiled`` and ``greenpool._moved``;
- ``greenpool.pool``: the pool core, with no socket code;
- ``greenpool.wire``: the wire protocol, the handshake, authentication and sockets;
- ``greenpool.client``: ``greenpool.Client``, in four rooms whose imports point one way,
  api -> operations -> topology -> config;
- ``greenpool.testing``: the test servers (the embedded server, the replica set emulator);
- ``greenpool.cli``: ``python -m greenpool check|server`` and the demo;
- beside the client, the PyMongo adapter ``greenpool.pymongo`` and the OpenTelemetry
  instrumentation ``greenpool.otel``, which both build on the pool core only;
- above the client's API room, ``greenpool.flask_pymongo`` (Flask-PyMongo on the Client).

Every import counts, including those inside functions: a lazy import is still a
dependency, and a cycle hidden inside a function is still a cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "greenpool"

#: The client's rooms, top to bottom: each may import the ones after it.
ROOMS = ("api", "operations", "topology", "config")
_LOW = {"base", "pool", "wire"}

#: What each layer (and each room of the client) may import, besides itself. The top-level
#: package, ``__main__`` and the public ``greenpool.gridfs`` are the facade and may import
#: anything; the client package's
#: own ``__init__`` (its docstring and the hook for its old names) only the base.
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "pool": {"base"},
    "wire": {"base", "pool"},
    "client": {"base"},
    **{room: _LOW | set(ROOMS[number + 1:]) for number, room in enumerate(ROOMS)},
    "testing": _LOW | {"client", *ROOMS},
    "cli": _LOW | {"client", *ROOMS, "testing"},
    "pymongo": {"base", "pool"},
    "otel": {"base", "pool"},
    "flask_pymongo": _LOW | {"client", *ROOMS},
    "facade": _LOW | {"client", *ROOMS, "testing", "cli", "pymongo", "otel", "flask_pymongo"},
}
BASE = {"greenpool.errors", "greenpool.address", "greenpool._version", "greenpool._compiled",
        "greenpool._moved"}
FACADE = {"greenpool", "greenpool.__main__", "greenpool.gridfs"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """The layer of ``module``: a room's name for the client's rooms."""
    if module in BASE:
        return "base"
    if module in FACADE:
        return "facade"
    parts = module.split(".")
    return parts[2] if parts[1] == "client" and len(parts) > 2 else parts[1]


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The greenpool modules ``module`` imports, wherever the import statement sits."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module pkg.mod when there is one.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                     for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known and name != module)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {module: imports_of(module, path, known) for module, path in found.items()}


def test_every_module_belongs_to_a_known_layer() -> None:
    unknown = {module for module in modules() if layer_of(module) not in ALLOWED}
    assert not unknown, f"modules outside every layer: {sorted(unknown)}"


def breaches(edges: dict[str, set[str]]) -> list[str]:
    """Each import of ``edges`` that its layer's rule does not allow."""
    return sorted(
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in edges.items()
        for target in targets
        if layer_of(target) != layer_of(module)
        and layer_of(target) not in ALLOWED[layer_of(module)]
    )


def test_each_layer_imports_only_the_layers_below_it() -> None:
    found = breaches(graph())
    assert not found, "\n".join(found)


def test_an_import_that_points_back_is_a_breach() -> None:
    edges = {"greenpool.client.topology.sdam": {"greenpool.client.operations.retries",
                                                "greenpool.client.config.uri"},
             "greenpool.client.config.uri": {"greenpool.wire.link"},
             "greenpool.testing.replset": {"greenpool.cli.server"}}
    assert breaches(edges) == [
        "greenpool.client.topology.sdam (topology) imports "
        "greenpool.client.operations.retries (operations)",
        "greenpool.testing.replset (testing) imports greenpool.cli.server (cli)"]


DEVELOPMENT = PACKAGE.parent / "docs" / "development.rst"
CELL = re.compile(r"^   (?:\*| ) - (.*)$")
NAME = re.compile(r"``([a-z_]+)``")


def module_map_table(page: str) -> dict[str, set[str]]:
    """The module map's table of docs/development.rst: each row's layer and the layers it
    may import (a cell's lines joined; "every layer" is every other one)."""
    body = page.split(".. list-table:: The module map", 1)[1].split("\n\n", 1)[1]
    rows: list[list[str]] = []
    for line in body.splitlines():
        if not line.startswith("   "):
            break
        cell = CELL.match(line)
        if line.startswith("   * - "):
            rows.append([])
        if cell:
            rows[-1].append(cell[1])
        elif rows:
            rows[-1][-1] += " " + line.strip()
    table: dict[str, set[str]] = {}
    for _folder, layer, _owns, may_import in rows[1:]:
        (name,) = NAME.findall(layer)
        table[name] = set(NAME.findall(may_import))
        if may_import == "every layer":
            table[name] = set(ALLOWED) - {name}
    return table


def test_the_development_page_states_the_same_rules() -> None:
    assert module_map_table(DEVELOPMENT.read_text()) == ALLOWED


def test_the_pool_core_has_no_socket_code() -> None:
    for path in (PACKAGE / "pool").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree)
                 if isinstance(node, (ast.Import, ast.ImportFrom))
                 for alias in node.names} | {node.module for node in ast.walk(tree)
                                              if isinstance(node, ast.ImportFrom) and node.module}
        assert not names & {"socket", "ssl", "gevent.socket", "gevent.ssl", "select"}, path


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_there_are_no_import_cycles() -> None:
    edges = graph()
    # A package's __init__ importing its own modules is how public names are exported;
    # a module of that package importing the package itself would be the cycle, and
    # that edge stays in the graph.
    for module in edges:
        if (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists():
            edges[module] = {target for target in edges[module]
                             if not target.startswith(module + ".")}
    assert cycles(edges) == []


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_the_cycle_finder_finds_cycles(edges: dict[str, set[str]],
                                       expected: list[list[str]]) -> None:
    assert cycles(edges) == expected


def test_the_import_finder_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from greenpool.client.api import cursor\n"
                      "from . import errors\nimport greenpool.wire.link\n")
    known = {"greenpool.client.api.cursor", "greenpool.errors", "greenpool.wire.link",
             "greenpool.client.api"}
    assert imports_of("greenpool.mod", source, known) == known - {"greenpool.client.api"}


def test_each_room_of_the_client_is_a_layer_of_its_own() -> None:
    assert layer_of("greenpool.client.api.client") == "api"
    assert layer_of("greenpool.client.config") == "config"
    assert layer_of("greenpool.client") == "client"
    assert layer_of("greenpool.testing.replset") == "testing"
    # A room may import the rooms below it, never those above.
    assert "config" in ALLOWED["topology"] and "topology" not in ALLOWED["config"]
    assert ALLOWED["operations"] - _LOW == {"topology", "config"}


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.rst"
SECTION_TITLE = re.compile(r"^(\S.*)\n([-~=^])\2+$", re.MULTILINE)
MODULE_FILE = re.compile(r"``([A-Za-z_][A-Za-z_0-9]*\.py)``")
PACKAGE_IN_TITLE = re.compile(r"``(greenpool(?:\.[a-z_]+)*)``")


def map_sections(page: str) -> dict[str | None, str]:
    """The module map's text by package: each section whose title names a package
    (``greenpool``, ``greenpool.pool``...) under that package's name; the rest (the
    layers, how a command flows) under None."""
    sections: dict[str | None, str] = {}
    titles = list(SECTION_TITLE.finditer(page))
    for number, title in enumerate(titles):
        end = titles[number + 1].start() if number + 1 < len(titles) else len(page)
        named = PACKAGE_IN_TITLE.search(title[1])
        key = named[1] if named else None
        sections[key] = sections.get(key, "") + page[title.end():end]
    return sections


def package_modules() -> dict[str, set[str]]:
    """Each package's modules, by file name (``__init__.py`` aside)."""
    found: dict[str, set[str]] = {}
    for module, path in modules().items():
        if path.name != "__init__.py":
            found.setdefault(module.rpartition(".")[0], set()).add(path.name)
    return found


def test_the_architecture_page_is_the_map_of_every_module() -> None:
    page = ARCHITECTURE.read_text()
    assert "architecture" in (PACKAGE.parent / "docs" / "index.rst").read_text().split()
    sections = map_sections(page)
    packages = package_modules()
    # A section may mention another package's module (a cross-reference), or a package's
    # __init__.py; whatever it names must exist.
    known = set().union(*packages.values(), {"__init__.py"})
    problems = [f"no section of docs/architecture.rst is titled with ``{package}``"
                for package in packages if package not in sections]
    for package, text in sections.items():
        named = set(MODULE_FILE.findall(text))
        problems += [f"the map names {name}, which does not exist"
                     for name in sorted(named - known)]
        if package is not None and package not in packages:
            problems.append(f"a section is titled with ``{package}``, which does not exist")
        elif package is not None:
            problems += [f"{package}: {name} is not in its section of the map"
                         for name in sorted(packages.get(package, set()) - named)]
    assert problems == [], "\n".join(problems)


def test_the_map_reader_attributes_modules_to_their_sections() -> None:
    page = ("Intro\n=====\n\n``a.py`` anywhere\n\n"
            "Top: ``greenpool``\n~~~~~~~~~~~~~~~~~~\n\n* ``errors.py``: errors\n\n"
            "Core: ``greenpool.pool``\n~~~~~~~~~~~~~~~~~~~~~~~~\n\n* ``pool.py``\n")
    sections = map_sections(page)
    assert MODULE_FILE.findall(sections["greenpool"]) == ["errors.py"]
    assert MODULE_FILE.findall(sections["greenpool.pool"]) == ["pool.py"]
    assert MODULE_FILE.findall(sections[None]) == ["a.py"]
