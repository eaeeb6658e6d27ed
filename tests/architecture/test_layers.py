"""The layers of the code: a part imports only from itself and the parts below it, and no
module imports itself back through others (docs/design.md#layout).

A small test over ``ast`` rather than import-linter: the rules are one table here, every
import counts (also those inside functions, which keep per-message commands fast, and
those under ``TYPE_CHECKING``, which still tie the modules together), and each part's
``__init__.py`` says in words what it may import, which this test holds to the table.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "memoryd"

LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "core",
        frozenset(
            {
                "errors",
                "strict_json",
                "tokens",
                "media",
                "defaults",
                "levels",
                "boundaries",
                "clock",
                "value",
            }
        ),
    ),
    ("files", frozenset({"files"})),
    ("workspace", frozenset({"workspace", "conversation", "discovery"})),
    ("commit", frozenset({"commit"})),
    ("published", frozenset({"published"})),
    ("receipts", frozenset({"receipts"})),
    ("config", frozenset({"config"})),
    ("stores", frozenset({"stores"})),
    ("search", frozenset({"search"})),
    ("transcript", frozenset({"transcript"})),
    ("llm", frozenset({"llm"})),
    ("summary", frozenset({"summary"})),
    ("compaction", frozenset({"compaction"})),
    ("daemon", frozenset({"daemon"})),
    ("status", frozenset({"status"})),
    ("mcp_server", frozenset({"mcp_server"})),
    ("cli", frozenset({"cli", "demo"})),
    ("api", frozenset({"", "__main__", "runners"})),
)
"""The parts from the bottom up; each holds the top-level names (a module or a folder
under ``memoryd/``) that belong to it. The top level itself (``memoryd/__init__.py``) is
the public API, at the top."""

RANK = {name: rank for rank, (_, names) in enumerate(LAYERS) for name in names}
PART_OF = {name: part for part, names in LAYERS for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def top(module: str) -> str:
    """The top-level name under ``memoryd`` that ``module`` lies in ("" for the package)."""
    return module.split(".")[1] if "." in module else ""


def imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """Every module of memoryd that ``path`` imports, with the line."""
    known = modules()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "memoryd":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            base = node.module
            if node.level:
                package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    package = package.rsplit(".", 1)[0]
                base = f"{package}.{base}" if base else package
            if base.split(".")[0] != "memoryd":
                continue
            if base == "memoryd" and all(a.name.startswith("__") for a in node.names):
                # ``__version__``: every module loads the package first anyway, and a
                # constant of it ties no part to the public API's imports.
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                yield (child if child in known else base), node.lineno


def test_every_module_belongs_to_a_part() -> None:
    unplaced = sorted(m for m in modules() if top(m) not in RANK)
    assert unplaced == [], "\n".join(unplaced)


def test_a_lower_part_never_imports_a_higher_one() -> None:
    upward = []
    for module, path in modules().items():
        for imported, line in imports(module, path):
            if RANK[top(imported)] > RANK[top(module)]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
    assert upward == [], "\n".join(upward)


def test_no_module_imports_itself_back() -> None:
    graph = {
        module: {imported for imported, _ in imports(module, path) if imported != module}
        for module, path in modules().items()
    }
    cycles: list[str] = []
    for start in graph:
        seen: set[str] = set()
        stack: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start and len(trail) > 1:
                    cycles.append(" -> ".join((*trail, start)))
                elif nxt not in seen and not start.startswith(nxt + "."):
                    seen.add(nxt)
                    stack.append((nxt, (*trail, nxt)))
    assert cycles == [], "\n".join(cycles)


CATCH_ALL = frozenset(
    {"base", "common", "core", "helpers", "misc", "parts", "shared", "util", "utils"}
)
"""Names that say where code sits rather than what it is: a module is named for its one
concept, the word a newcomer would search for."""


def test_every_module_says_what_it_is() -> None:
    silent = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()
    ]
    assert silent == [], "\n".join(silent)


def test_no_module_has_a_catch_all_name() -> None:
    vague = [m for m in modules() if m.rsplit(".", 1)[-1] in CATCH_ALL]
    assert vague == [], "\n".join(vague)


def test_no_module_re_exports_another_ones_names() -> None:
    """A name is imported from the module that defines it: no ``import x as x`` hand-on
    (the public API, ``memoryd/__init__.py``, is the one place that gathers names)."""
    shims = []
    for module, path in modules().items():
        if module == "memoryd":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                shims += [
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {alias.name}"
                    for alias in node.names
                    if alias.asname == alias.name
                ]
    assert shims == [], "\n".join(shims)


def _folders() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))


@pytest.mark.parametrize("folder", _folders(), ids=lambda p: p.name)
def test_each_parts_docstring_says_what_it_may_import(folder: Path) -> None:
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    said = re.search(r"May import: (.*?)\.(?:\n\n|$)", docstring, re.S)
    assert said is not None, f"{folder.name}/__init__.py does not say what it may import"
    named = {name.strip(" `\n") for name in said.group(1).replace("\n", " ").split(",")}
    below = {part for part, _ in LAYERS[: RANK[folder.name]]}
    assert named == below
