"""Every command against a workspace it cannot write: a symlinked ``.memoryd`` that leads
out of the workspace, a read-only filesystem, a full disk. Each either succeeds or says
one line and exits 1 (the operation failed) or 2 (refused); none prints a traceback, and
nothing is written through the symlink.

The commands run through ``memoryd.cli.main`` in this process; the first of them runs as a
real ``python -m memoryd`` process in each scene, so the installed command is checked too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import WorkspaceFactory
from fs_helpers import fill_up, make_read_only, small_tmpfs, tree
from in_process import Ran, run_in_process

COMMANDS = [
    ["summarize", "{ws}", "--force"],
    ["status", "{ws}", "--json"],
    ["append", "{ws}", "--role", "user", "--content", "hello"],
    ["heartbeat", "{ws}", "start", "a task"],
    ["heartbeat", "{ws}", "checkin"],
    ["heartbeat", "{ws}", "complete", "--result", "done"],
    ["heartbeat", "{ws}", "fail", "why"],
    ["heartbeat", "{ws}", "pause", "--notes", "later"],
    ["heartbeat", "{ws}", "reset"],
    ["heartbeat", "{ws}", "show"],
    ["memory", "write", "--store", "todos", "--entry", '{"title": "x"}', "--workspace", "{ws}"],
    ["memory", "read", "--store", "todos", "--workspace", "{ws}"],
    ["memory", "compact", "--threshold", "1", "--workspace", "{ws}"],
    ["recall", "{ws}", "alpha"],
    ["expand", "{ws}", "no-such-id"],
    ["messages", "{ws}"],
    ["history", "{ws}"],
    ["config"],
]
ENV = {
    "MEMORYD_TOKEN_LIMIT": "3000",
    "MEMORYD_SUMMARIZER__BACKEND": "extractive",
    "MEMORYD_DRAIN_SECONDS": "0",
}


def run_all(ws: Path) -> dict[str, Ran]:
    """Each command of ``COMMANDS`` in turn on ``ws``: the first as a process of its own,
    the others through main() in this process."""
    results = {}
    for number, argv in enumerate(COMMANDS):
        words = [word.replace("{ws}", str(ws)) for word in argv]
        if number == 0:
            done = subprocess.run(
                [sys.executable, "-m", "memoryd", *words],
                capture_output=True,
                text=True,
                env={**os.environ, **ENV},
                timeout=120,
                check=False,
            )
            results[" ".join(argv)] = Ran(done.returncode, done.stdout, done.stderr)
        else:
            results[" ".join(argv)] = run_in_process(words, Path.cwd(), ENV)
    return results


def assert_one_line_or_success(results: dict[str, Ran]) -> None:
    for command, done in results.items():
        assert "Traceback" not in done.stderr, (command, done.stderr)
        assert done.returncode in (0, 1, 2), (command, done.returncode, done.stderr)
        if done.returncode:
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("memoryd: "), (command, done.stderr)


def memory_bookmarks(ws: Path) -> None:
    (ws / "memory").mkdir(exist_ok=True)
    lines = [json.dumps({"timestamp": "2026-01-01T00:00:00.000Z", "task": i}) for i in range(3)]
    (ws / "memory" / "todos.jsonl").write_text("".join(f"{line}\n" for line in lines))


def test_a_symlinked_meta_folder_is_refused_and_nothing_is_written_through_it(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    ws = workspace(30, 400)
    outside = tmp_path / "victim"
    outside.mkdir()
    (outside / "state.json").write_text("VICTIM\n")
    (ws / ".memoryd").symlink_to(outside)
    before = tree(outside)
    results = run_all(ws)
    assert_one_line_or_success(results)
    assert tree(outside) == before
    for command in ("summarize {ws} --force", "append {ws} --role user --content hello"):
        assert results[command].returncode in (1, 2), results[command]


def test_a_read_only_workspace_fails_with_one_line(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    mount = tmp_path / "ro"
    with small_tmpfs(mount):
        ws = mount / "ws"
        ws.mkdir()
        source = workspace(30, 400)
        (ws / "conversation.jsonl").write_bytes((source / "conversation.jsonl").read_bytes())
        memory_bookmarks(ws)
        make_read_only(mount)
        before = tree(ws)
        results = run_all(ws)
        assert tree(ws) == before
    assert_one_line_or_success(results)
    for command in ("summarize {ws} --force", "append {ws} --role user --content hello"):
        assert results[command].returncode in (1, 2), results[command]


def test_a_full_disk_fails_with_one_line_and_leaves_the_conversation_whole(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    mount = tmp_path / "full"
    with small_tmpfs(mount, size="2m"):
        ws = mount / "ws"
        ws.mkdir()
        source = workspace(30, 400)
        conversation = (source / "conversation.jsonl").read_bytes()
        (ws / "conversation.jsonl").write_bytes(conversation)
        memory_bookmarks(ws)
        fill_up(mount)
        results = run_all(ws)
        after = (ws / "conversation.jsonl").read_bytes()
    assert_one_line_or_success(results)
    # Whatever was refused, the conversation holds its lines, whole.
    assert after.startswith(conversation) or b'"isSummary"' in after.split(b"\n")[0]
    assert after.endswith(b"\n")
