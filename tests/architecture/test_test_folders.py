"""Each test folder runs alone (``pytest tests/unit``): a test module takes shared helpers
from ``tests/fakes`` or ``tests/conftest.py`` (both on the path for every run), or from a
module of its own folder, never from a module of another test folder, which is on the path
only when pytest happened to import that folder first."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SHARED = {TESTS, TESTS / "fakes"}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
    return names


def test_no_test_module_imports_a_module_of_another_test_folder() -> None:
    homes: dict[str, Path] = {}
    for path in TESTS.rglob("*.py"):
        if path.parent not in SHARED:
            homes[path.stem] = path.parent
    crossing = [
        f"{path.relative_to(TESTS)} imports {name} from {homes[name].relative_to(TESTS)}/"
        for path in sorted(TESTS.rglob("*.py"))
        for name in sorted(_imported(path))
        if name in homes and homes[name] != path.parent
    ]
    assert crossing == [], "\n".join(crossing)


def test_the_check_sees_a_crossing_import(tmp_path: Path) -> None:
    """The reader of imports finds both forms a crossing import takes."""
    module = tmp_path / "test_x.py"
    module.write_text("from test_mcp_server import with_server\nimport test_recall_ranking\n")
    assert {"test_mcp_server", "test_recall_ranking"} <= _imported(module)
