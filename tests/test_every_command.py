"""Every command against a hostile workspace: read-only, on a full disk, with a symlinked
``.memoryd``. No traceback ever; a command that fails says so in one line with exit 1
or 2; nothing is written outside the workspace; a failed command leaves the
conversation as it was.

Table-driven: a new command is one line in ``ONE_SHOT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import encode_lines, generated_messages
from fs_helpers import fill_up, make_read_only, small_tmpfs, tree

SMALL_BUDGET = {"MEMORYD_TOKEN_LIMIT": "4000", "MEMORYD_SUMMARIZER__BACKEND": "extractive"}
BIG_ENTRY = json.dumps({"t": "y" * 10_000})


@dataclass(frozen=True, slots=True)
class OneShot:
    """A command line (``{ws}``: the workspace, ``{root}``: the folder holding it)."""

    argv: tuple[str, ...]
    writes: bool
    """It must write in the workspace to do its job (so it must fail where it cannot)."""


ONE_SHOT: dict[str, OneShot] = {
    "summarize": OneShot(("summarize", "{ws}"), writes=True),
    "summarize --dry-run": OneShot(("summarize", "--dry-run", "{ws}"), writes=False),
    "status": OneShot(("status", "{ws}"), writes=False),
    "status (root)": OneShot(("status", "--json", "{root}"), writes=False),
    # 10 KB: more than the slack of a file's last page, so a full disk cannot take it.
    "append": OneShot(("append", "{ws}", "--role", "user", "--content", "x" * 10_000), True),
    "heartbeat show": OneShot(("heartbeat", "{ws}", "show"), writes=False),
    "heartbeat start": OneShot(("heartbeat", "{ws}", "start", "a task"), writes=True),
    "heartbeat checkin": OneShot(("heartbeat", "{ws}", "checkin"), writes=True),
    "heartbeat complete": OneShot(("heartbeat", "{ws}", "complete", "--result", "ok"), True),
    "heartbeat fail": OneShot(("heartbeat", "{ws}", "fail", "broken"), writes=True),
    "heartbeat pause": OneShot(("heartbeat", "{ws}", "pause", "--notes", "later"), True),
    "heartbeat reset": OneShot(("heartbeat", "{ws}", "reset"), writes=True),
    "memory write": OneShot(
        ("memory", "write", "--workspace", "{ws}", "--store", "todos", "--entry", BIG_ENTRY),
        writes=True,
    ),
    "memory read": OneShot(("memory", "read", "--workspace", "{ws}", "--store", "todos"), False),
    "memory compact": OneShot(
        ("memory", "compact", "--workspace", "{ws}", "--store", "bookmarks", "--threshold", "1"),
        writes=True,
    ),
    "config": OneShot(("config",), writes=False),
    "recall": OneShot(("recall", "{ws}", "alpha"), writes=False),
    "expand": OneShot(("expand", "{ws}", "msg-0001"), writes=False),
    "history": OneShot(("history", "{ws}"), writes=False),
}


@dataclass(slots=True)
class Scene:
    """A workspace in a hostile state, and what must not change."""

    root: Path
    ws: Path
    outside: Path
    """A folder outside the workspace that nothing may write to."""

    def argv(self, template: tuple[str, ...]) -> list[str]:
        return [a.replace("{ws}", str(self.ws)).replace("{root}", str(self.root)) for a in template]


def _populate(ws: Path) -> None:
    """A busy workspace with every file memoryd keeps: .memoryd, a heartbeat, stores, an
    archive (one summarize), so each command has something to read and to change."""
    ws.mkdir(parents=True)
    (ws / "conversation.jsonl").write_bytes(encode_lines(generated_messages(40, 520)))
    assert memoryd("summarize", str(ws)).returncode == 0
    with (ws / "conversation.jsonl").open("ab") as conversation:
        conversation.write(encode_lines(generated_messages(40, 520)))
    assert memoryd("heartbeat", str(ws), "start", "seeded").returncode == 0
    memory = ws / "memory"
    memory.mkdir(exist_ok=True)
    bookmarks = [{"task": f"t{i}", "timestamp": "2026-01-01T00:00:00Z"} for i in range(30)]
    (memory / "bookmarks.jsonl").write_bytes(encode_lines(bookmarks))
    (memory / "todos.jsonl").write_bytes(encode_lines([{"t": 0}]))


@pytest.fixture(params=["read-only", "full disk", "symlinked .memoryd"])
def scene(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Scene]:
    """(a) a read-only file system, (b) a full 2 MB tmpfs, (c) ``.memoryd`` a symlink to a
    folder elsewhere (which then holds what .memoryd held)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "state.json").write_text("VICTIM\n")
    if request.param == "symlinked .memoryd":
        root = tmp_path / "r"
        ws = root / "ws"
        _populate(ws)
        meta = ws / ".memoryd"
        for entry in meta.iterdir():
            entry.rename(outside / entry.name)
        meta.rmdir()
        meta.symlink_to(outside)
        yield Scene(root, ws, outside)
        return
    with small_tmpfs(tmp_path / "mnt", "2m") as mnt:
        root = mnt / "r"
        _populate(root / "ws")
        if request.param == "read-only":
            make_read_only(mnt)
        else:
            fill_up(mnt)
        yield Scene(root, root / "ws", outside)


def memoryd(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **SMALL_BUDGET},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def _log_lines(stderr: str) -> list[str]:
    """The JSON log lines among stderr's lines (warnings a command may log on its way)."""
    found = []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" in record:
            found.append(line)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(ONE_SHOT))
def test_one_shot_command_in_a_hostile_workspace(scene: Scene, command: str) -> None:
    """No traceback; exit 0, or exit 1/2 with one line (a command that must write where it
    cannot has to fail); nothing outside the workspace changes; a failed command leaves
    the conversation as it was."""
    spec = ONE_SHOT[command]
    outside_before = tree(scene.outside)
    conversation_before = (scene.ws / "conversation.jsonl").read_bytes()

    result = memoryd(*scene.argv(spec.argv), cwd=scene.ws)

    assert "Traceback" not in result.stderr, result.stderr
    assert tree(scene.outside) == outside_before
    if spec.writes:
        assert result.returncode in (1, 2), (result.returncode, result.stdout, result.stderr)
    if result.returncode != 0:
        assert result.returncode in (1, 2), result.stderr
        problems = [
            line for line in result.stderr.splitlines() if line not in _log_lines(result.stderr)
        ]
        assert len(problems) == 1 and problems[0].startswith("memoryd: "), result.stderr
        assert (scene.ws / "conversation.jsonl").read_bytes() == conversation_before
    if spec.writes and (scene.ws / ".memoryd").is_symlink():
        # The symlinked .memoryd: refused as such, in words.
        assert "symlink" in result.stderr
