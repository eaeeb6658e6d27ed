"""Commands an agent runs per message import only what they use: never the Anthropic or
OpenAI SDK, mcp, prometheus_client, watchdog, pydantic or sqlite3; and the three an agent
runs every turn leave out the standard modules that would cost them a large part of a
bare interpreter's start (each is checked in a fresh interpreter; docs/design.md#startup)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "anthropic",
    "openai",
    "mcp",
    "prometheus_client",
    "watchdog",
    "pydantic",
    "pydantic_settings",
    "sqlite3",
)
SLOW_STDLIB = ("typing", "tomllib", "uuid", "secrets", "hashlib", "shutil")
"""Modules of the standard library each costing 5 to 15 ms to import, none needed by a
per-turn command (tomllib only when there is a configuration file to read)."""

PROBE = """
import json, sys
argv, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
if argv is None:
    import memoryd
else:
    import io
    from memoryd.cli import main
    code = main(argv, io.StringIO())
    assert code == 0, code
print(json.dumps(sorted(n for n in sys.modules if n in heavy or n.split(".")[0] in heavy)))
"""


def heavy_modules_after(
    argv: list[str] | None,
    names: tuple[str, ...] = HEAVY,
    variables: dict[str, str] | None = None,
) -> list[str]:
    """The modules of ``names`` loaded after ``argv``, run in a fresh interpreter with the
    ``MEMORYD_*`` variables of this process replaced by ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MEMORYD_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, **(variables or {})},
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_import_memoryd_loads_no_heavy_package() -> None:
    assert heavy_modules_after(None) == []


def test_the_lazy_api_still_gives_every_name() -> None:
    import memoryd

    for name in memoryd.__all__:
        assert getattr(memoryd, name) is not None
    with pytest.raises(AttributeError):
        memoryd.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "argv",
    [
        ["append", "{ws}", "--role", "user", "--content", "hello"],
        ["status", "{ws}", "--json"],
        ["status", "{ws}"],
        ["heartbeat", "{ws}", "start", "a task"],
        ["heartbeat", "{ws}", "checkin"],
        ["heartbeat", "{ws}", "complete", "--result", "done"],
        ["heartbeat", "{ws}", "show"],
        ["messages", "{ws}"],
    ],
)
def test_per_message_commands_load_no_heavy_package(tmp_path: Path, argv: list[str]) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    assert heavy_modules_after([arg.format(ws=ws) for arg in argv]) == []


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["append", "{ws}", "--role", "user", "--content", "hello"], ("dataclasses", "inspect")),
        (["messages", "{ws}"], ("dataclasses", "inspect")),
        (["status", "{ws}", "--json"], ()),
        (["heartbeat", "{ws}", "checkin"], ()),
    ],
)
def test_per_turn_commands_load_no_slow_standard_module(
    tmp_path: Path, argv: list[str], absent: tuple[str, ...]
) -> None:
    """append and messages also do without dataclasses (and the inspect it imports);
    status and heartbeat still read their files through dataclasses."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    names = (*HEAVY, *SLOW_STDLIB, *absent)
    assert heavy_modules_after([arg.format(ws=ws) for arg in argv], names) == []


SETTING_VARIABLES = {
    "MEMORYD_TOKEN_LIMIT": "120000",
    "MEMORYD_SUMMARIZER__BACKEND": "extractive",
    "MEMORYD_LOG_LEVEL": "warning",
    "MEMORYD_MASKING__EXCLUDE_TOOLS": '["TodoWrite"]',
}


@pytest.mark.parametrize(
    "argv",
    [
        ["append", "{ws}", "--role", "user", "--content", "hello"],
        ["status", "{ws}", "--json"],
        ["messages", "{ws}"],
    ],
)
def test_per_turn_commands_with_setting_variables_load_no_heavy_package(
    tmp_path: Path, argv: list[str]
) -> None:
    """As the systemd unit and most users run them: ``MEMORYD_*`` setting variables and a
    file named by ``$MEMORYD_CONFIG`` (tomllib, and the typing it imports, are then needed
    to read it)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    config = Path(__file__).resolve().parents[2] / "config" / "memoryd.toml"
    variables = {
        **SETTING_VARIABLES,
        "MEMORYD_ROOTS": json.dumps([str(tmp_path)]),
        "MEMORYD_CONFIG": str(config),
    }
    names = (*HEAVY, *(name for name in SLOW_STDLIB if name not in ("tomllib", "typing")))
    assert heavy_modules_after([arg.format(ws=ws) for arg in argv], names, variables) == []


def test_the_heartbeat_statuses_are_the_values_of_its_status_type() -> None:
    """``Status`` (a Literal, seen by mypy only: typing is not imported at run time) and
    ``STATUSES`` (its values at run time) name the same words."""
    import ast

    from memoryd.published import heartbeat

    tree = ast.parse(Path(heartbeat.__file__).read_text())
    literal = next(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["Status"]
    )
    assert isinstance(literal, ast.Subscript)
    assert isinstance(literal.slice, ast.Tuple)
    words = tuple(ast.literal_eval(element) for element in literal.slice.elts)
    assert words == heartbeat.STATUSES


INDEXING = (
    "memoryd.search.sessions.indexer",
    "memoryd.search.sessions.claude",
    "memoryd.search.sessions.codex",
    "memoryd.search.sessions.gemini",
    "memoryd.search.sessions.rows",
    "memoryd.search.sessions.record",
    "memoryd.search.archive_index",
)
"""What indexes a source's files, and a workspace's index machinery."""


def test_a_warm_recall_over_an_agents_folder_loads_nothing_to_index_it(tmp_path: Path) -> None:
    """When the look for changes finds none, ``recall`` over an agent's sessions reads
    the index without loading the indexer or the parsers (docs/design.md#sources), and
    none of the heavy packages and slow standard modules but sqlite3, which it reads, and
    hashlib, which names the index: not dataclasses and the inspect it imports
    (docs/design.md#startup). The query that builds the index loads the indexer."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "fakes"))
    from agent_sessions import claude_session, words_for

    home = tmp_path / ".claude"
    claude_session(home, "5a5a5a5a-0001", words_for("w1"))
    argv = ["recall", str(home), "questionw1"]
    names = (*HEAVY, *SLOW_STDLIB, "typing", "dataclasses", "inspect", *INDEXING)
    assert "memoryd.search.sessions.indexer" in heavy_modules_after(argv, names)
    assert heavy_modules_after(argv, names) == ["hashlib", "sqlite3", "sqlite3.dbapi2"]


def test_a_query_in_ascii_compiles_no_pattern_of_scripts_without_spaces(tmp_path: Path) -> None:
    """The pattern of runs of CJK, Thai and other scripts written without spaces costs the
    re compiler about 8 ms (docs/design.md#startup): a recall whose query and hits are all
    ASCII never compiles it; a query in such a script does."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "fakes"))
    from agent_sessions import claude_session, words_for

    home = tmp_path / ".claude"
    claude_session(home, "5a5a5a5a-0001", words_for("w1"))
    probe = (
        "import io, sys\n"
        "from memoryd.cli import main\n"
        "assert main(['recall', sys.argv[1], 'questionw1'], io.StringIO()) == 0\n"
        "from memoryd.search import text\n"
        "print(text._cjk_run is None)\n"
        "assert main(['recall', sys.argv[1], '只读'], io.StringIO()) == 0\n"
        "print(text._cjk_run is None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_a_recall_over_a_workspace_that_logs_nothing_loads_no_structlog(tmp_path: Path) -> None:
    """structlog (with asyncio, ssl and colorama) costs a one-shot command more than its
    search: a recall sets logging up only before its first line, as over an agent's
    sessions (docs/design.md#sources)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    assert heavy_modules_after(["recall", str(ws), "parser"], ("structlog", "logging")) == []
