"""Nothing is written outside a workspace, and a failed write leaves no partial line.

Every writer goes through fsutil's ``root=`` primitives: a symlink below the workspace
(``.memoryd``, ``memory/``, the file itself) is refused with UnsafePathError before
anything is created; an append that fails half way (a full disk) is cut back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SettingsFactory, WorkspaceFactory, encode_lines, generated_messages
from fs_helpers import fill_up, small_tmpfs, tree

from memoryd.commit.recovery import recover
from memoryd.config.settings import settings_for_workspace
from memoryd.errors import UnsafePathError
from memoryd.files.fsutil import append_line, atomic_write, flocked
from memoryd.files.paths import open_in, read_in
from memoryd.published import events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.published.monitor import ContextMonitor
from memoryd.published.state import build_state, write_state
from memoryd.stores.disk import compact, load_store, write_entry
from memoryd.workspace import Workspace

SMALL_BUDGET = {"MEMORYD_TOKEN_LIMIT": "4000", "MEMORYD_SUMMARIZER__BACKEND": "extractive"}
"""The issue's ``E``: a workspace of 40 messages of ~130 tokens is past its trigger."""


def memoryd(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``memoryd ARGS`` as a real process (so a traceback from any thread would show)."""
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args],
        capture_output=True,
        text=True,
        input=stdin,
        env={**os.environ, **SMALL_BUDGET},
        timeout=120,
        check=False,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """Exit ``code``, exactly one line on stderr and no traceback; returns that line."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def busy_workspace(workspace: WorkspaceFactory, name: str = "r/ws") -> Path:
    """40 messages of ~130 tokens: past the trigger of a 4,000-token budget."""
    return workspace(40, 520, name=name)


# --- a symlinked .memoryd --------------------------------------------------------------


def test_summarize_refuses_a_symlinked_meta_folder_and_writes_nothing_there(
    tmp_path: Path, workspace: WorkspaceFactory
) -> None:
    """``ln -s $PWD/v r/ws/.memoryd; memoryd summarize r/ws``: exit 2, one line naming the
    symlink, and v/ exactly as it was (no state.json replaced, no events, no archive)."""
    ws = busy_workspace(workspace)
    victim = tmp_path / "v"
    victim.mkdir()
    (victim / "state.json").write_text("VICTIM\n")
    (ws / ".memoryd").symlink_to(victim)
    before = tree(victim)
    conversation = (ws / "conversation.jsonl").read_bytes()

    line = assert_one_line(memoryd("summarize", str(ws)), 2)

    assert "symlink" in line and ".memoryd" in line
    assert tree(victim) == before
    assert (ws / "conversation.jsonl").read_bytes() == conversation
    assert not (ws / "HEARTBEAT.md").exists()


def test_summarize_refuses_a_symlinked_events_file_without_a_traceback(
    tmp_path: Path, workspace: WorkspaceFactory
) -> None:
    """``ln -s /tmp/x r/ws/.memoryd/events.jsonl``: one line, exit 2, /tmp/x never created
    (it was an ELOOP traceback)."""
    ws = busy_workspace(workspace)
    (ws / ".memoryd").mkdir()
    outside = tmp_path / "x"
    (ws / ".memoryd" / "events.jsonl").symlink_to(outside)

    line = assert_one_line(memoryd("summarize", str(ws)), 2)

    assert "events.jsonl" in line and "symlink" in line
    assert not outside.exists()


Writer = Callable[[Workspace], object]


def _state(settings: SettingsFactory) -> Writer:
    def write(ws: Workspace) -> None:
        state = build_state(
            ws,
            settings(),
            messages=1,
            tokens=1,
            summarizing=False,
            last_summary_at=None,
            now=0.0,
        )
        write_state(ws, state)

    return write


META_WRITERS: dict[str, Callable[[SettingsFactory], Writer]] = {
    "events.emit": lambda _s: lambda ws: events.emit(ws, "probe"),
    "write_state": _state,
    "heartbeat (its lock)": lambda _s: lambda ws: HeartbeatManager(ws).start_task("t"),
    "a monitor's file": lambda _s: lambda ws: ContextMonitor(ws.path, "agent").start(),
    "the job lock": lambda _s: lambda ws: flocked(ws.job_lock, root=ws.path).__enter__(),
    "recover": lambda _s: recover,
    "memory write (the writers' lock)": lambda _s: (
        lambda ws: write_entry(ws.path, "bookmarks", {"a": 1})
    ),
    "the workspace config (read)": lambda s: lambda ws: settings_for_workspace(s(), ws.path),
}


@pytest.mark.parametrize("writer", sorted(META_WRITERS))
def test_every_writer_refuses_a_symlinked_meta_folder(
    tmp_path: Path, workspace: WorkspaceFactory, make_settings: SettingsFactory, writer: str
) -> None:
    """Each writer of ``.memoryd/`` raises UnsafePathError when ``.memoryd`` is a symlink to
    a folder elsewhere, and that folder is left exactly as it was."""
    ws = Workspace(workspace(2))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.toml").write_text('strategy = "rolling"\n')
    (victim / "archive").mkdir()
    before = tree(victim)
    ws.meta.symlink_to(victim)

    with pytest.raises(UnsafePathError, match="symlink"):
        META_WRITERS[writer](make_settings)(ws)

    assert tree(victim) == before


@pytest.mark.parametrize("action", ["write", "compact", "read"])
def test_memory_stores_refuse_a_symlinked_memory_folder(
    tmp_path: Path, workspace: WorkspaceFactory, action: str
) -> None:
    """``memory/`` as a symlink to a folder elsewhere: write, compact and read refuse it."""
    ws = Workspace(workspace(2))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lines = [{"task": f"t{i}", "timestamp": "2026-01-01T00:00:00Z"} for i in range(60)]
    (elsewhere / "bookmarks.jsonl").write_bytes(encode_lines(lines))
    before = tree(elsewhere)
    ws.memory_dir.symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="symlink"):
        if action == "write":
            write_entry(ws.path, "bookmarks", {"a": 1})
        elif action == "compact":
            compact(ws.path, "bookmarks", threshold=5, drain_seconds=0)
        else:
            load_store(ws.path, "bookmarks")
    assert tree(elsewhere) == before


@pytest.mark.parametrize("name", ["events.jsonl", "state.json", "lock", "job.lock"])
def test_a_symlink_at_the_file_itself_is_never_written_through(
    tmp_path: Path, workspace: WorkspaceFactory, name: str
) -> None:
    """A symlink at the file's own name: appends and locks refuse it (the target is never
    created); atomic replaces replace the link itself, never its target."""
    ws = Workspace(workspace(2))
    ws.meta.mkdir()
    target = tmp_path / "outside"
    (ws.meta / name).symlink_to(target)
    if name == "state.json":
        atomic_write(ws.state, b"{}\n", root=ws.path)
        assert not ws.state.is_symlink() and ws.state.read_bytes() == b"{}\n"
    elif name == "events.jsonl":
        with pytest.raises(UnsafePathError, match="symlink"):
            events.emit(ws, "probe")
    else:
        with pytest.raises(UnsafePathError, match="symlink"), flocked(ws.meta / name, root=ws.path):
            pass
    assert not target.exists()


def test_open_in_refuses_a_symlink_even_one_that_stays_inside(tmp_path: Path) -> None:
    """A symlinked folder below the root is refused wherever it points (no race to win),
    while the root itself may be reached through a symlink (the user named it)."""
    real = tmp_path / "real"
    (real / "inner").mkdir(parents=True)
    (real / "link").symlink_to("inner")
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    with pytest.raises(UnsafePathError, match="symlink"):
        open_in(alias, alias / "link" / "f", os.O_WRONLY | os.O_CREAT)
    assert not (real / "inner" / "f").exists()
    fd = open_in(alias, alias / "inner" / "f", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    assert (real / "inner" / "f").exists()
    with pytest.raises(UnsafePathError, match="not inside"):
        read_in(real / "inner", real / "f")


# --- a full disk: all or nothing --------------------------------------------------------


def test_append_on_a_full_disk_leaves_no_partial_line(tmp_path: Path) -> None:
    """On a disk with room for only part of a 10 KB message, ``memoryd append`` exits 1 with
    one line and the conversation keeps its exact bytes; once space returns, appends work
    again (a partial line used to block every later append)."""
    with small_tmpfs(tmp_path / "mnt", "2m") as mnt:
        ws = mnt / "ws"
        ws.mkdir()
        (ws / "conversation.jsonl").write_bytes(encode_lines(generated_messages(40, 520)))
        assert memoryd("append", str(ws), "--role", "user", "--content", "first").returncode == 0
        before = (ws / "conversation.jsonl").read_bytes()
        filler = fill_up(mnt, leave=4096)

        line = assert_one_line(
            memoryd("append", str(ws), "--role", "user", "--content", "x" * 10_000), 1
        )

        assert "No space left on device" in line
        assert (ws / "conversation.jsonl").read_bytes() == before
        filler.unlink()
        assert memoryd("append", str(ws), "--role", "user", "--content", "later").returncode == 0
        last = json.loads((ws / "conversation.jsonl").read_bytes().splitlines()[-1])
        assert last["content"] == "later"


def test_memory_write_on_a_full_disk_leaves_the_store_unchanged(tmp_path: Path) -> None:
    """``memoryd memory write`` of a 10 KB entry on a nearly full disk: exit 1, one line,
    the store byte for byte as it was."""
    with small_tmpfs(tmp_path / "mnt", "2m") as mnt:
        ws = mnt / "ws"
        ws.mkdir()
        store = ["memory", "write", "--workspace", str(ws), "--store", "lessons"]
        assert memoryd(*store, "--entry", '{"text": "first"}').returncode == 0
        before = (ws / "memory" / "lessons.jsonl").read_bytes()
        fill_up(mnt, leave=4096)

        big = json.dumps({"text": "y" * 10_000})
        line = assert_one_line(memoryd(*store, "--entry", big), 1)

        assert "No space left on device" in line
        assert (ws / "memory" / "lessons.jsonl").read_bytes() == before


def test_append_line_cuts_back_a_write_that_fails_half_way(tmp_path: Path) -> None:
    """The primitive under every append: a write that ENOSPC stops half way is truncated
    back, and the OSError (errno kept, full path named) reaches the caller."""
    with small_tmpfs(tmp_path / "mnt", "1m") as mnt:
        path = mnt / "events.jsonl"
        append_line(path, b'{"n":1}\n', root=mnt)
        fill_up(mnt, leave=4096)
        with pytest.raises(OSError, match="No space left") as caught:
            append_line(path, b"z" * 20_000 + b"\n", root=mnt)
        assert caught.value.filename == str(path)
        assert path.read_bytes() == b'{"n":1}\n'


# --- a torn tail ------------------------------------------------------------------------


def test_memory_write_after_a_torn_tail_keeps_the_fragment_and_its_own_entry(
    workspace: WorkspaceFactory,
) -> None:
    """``printf '{"task":"to' > w/memory/bookmarks.jsonl`` then ``memory write``: the
    fragment stays byte for byte on a line of its own, the entry is readable after it."""
    ws = workspace(1)
    (ws / "memory").mkdir()
    store = ws / "memory" / "bookmarks.jsonl"
    store.write_bytes(b'{"task":"to')

    result = memoryd(
        "memory", "write", "--workspace", str(ws), "--store", "bookmarks", "--entry", '{"a":1}'
    )

    assert result.returncode == 0, result.stderr
    first, second = store.read_bytes().split(b"\n")[:2]
    assert first == b'{"task":"to'
    assert json.loads(second)["a"] == 1
    entries = load_store(ws, "bookmarks")
    assert [e.value is None for e in entries] == [True, False]


def test_an_event_after_a_torn_tail_starts_its_own_line(workspace: WorkspaceFactory) -> None:
    """The same for events.jsonl: a crash mid-line never glues the next event onto it."""
    ws = Workspace(workspace(1))
    ws.meta.mkdir()
    ws.events.write_bytes(b'{"ts":"2026')
    events.emit(ws, "probe")
    fragment, line, end = ws.events.read_bytes().split(b"\n")
    assert fragment == b'{"ts":"2026' and json.loads(line)["type"] == "probe" and end == b""
