"""A daemon's start in proportion to what changed: a first start writes each workspace's
files once, a restart on unchanged workspaces writes nothing; what the start reads and
decides (the listing, the seed, the tidy's step); one log line for the discovery."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest
from daemon_workspaces import append_lines, write_lines
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs
from writers import line_bytes

from memoryd import strict_json
from memoryd.commit.recovery import leftover
from memoryd.config.settings import load_settings
from memoryd.conversation.reader import ConversationReader, Counted
from memoryd.daemon.folders import Seed, read_seed, tidy_step
from memoryd.daemon.supervisor import Supervisor
from memoryd.discovery import look, scan_workspaces
from memoryd.errors import UnsafePathError
from memoryd.files.fsutil import create_in
from memoryd.published.heartbeat import Heartbeat, render
from memoryd.published.state import WorkspaceState, saved_counted, state_bytes

CLEAN = render(Heartbeat(last_checkin="2026-01-01T00:00:00.000Z")).encode()


def files(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and folder under ``root``: (inode, size, mtime in ns)."""
    found = {}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            st = os.lstat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), root)] = (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
            )
    return found


def started(tmp_path: Path, root: Path) -> Supervisor:
    """A supervisor on ``root``, started and stepped until its start's tidy is done."""
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {"roots": [str(root)], "workers": 1, "summarizer.backend": "extractive"}
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    supervisor.start()
    for _ in range(50):
        if supervisor.tidy_began is None:
            break
        supervisor.loop(wait=0)
    assert supervisor.tidy_began is None, "the start's tidy is done"
    return supervisor


def test_a_first_start_writes_each_workspace_s_files_once_and_a_restart_nothing(
    tmp_path: Path,
) -> None:
    """A first start makes .memoryd, HEARTBEAT.md and state.json in each workspace and
    nothing else (no lock file, no temp file left); a restart on the unchanged
    workspaces creates, replaces and touches no file at all."""
    root = tmp_path / "root"
    for name in ("a", "b/c", "b/d"):
        write_lines(root / name, "w", 3)
    before = set(files(root))
    started(tmp_path, root).close()
    first = files(root)
    made = {
        f"{ws}/{name}"
        for ws in ("a", "b/c", "b/d")
        for name in (".memoryd", "HEARTBEAT.md", ".memoryd/state.json")
    }
    assert set(first) - before == made
    started(tmp_path, root).close()
    assert files(root) == first


def test_the_start_logs_one_discovery_line_and_a_workspace_only_when_it_needs_attention(
    tmp_path: Path, info_logs: None
) -> None:
    """At info: one workspaces_discovered line (how many, how long, how many need
    attention), one workspaces_tidied line, and workspace_discovered only for the
    workspace whose config.toml is refused."""
    root = tmp_path / "root"
    for name in ("ok1", "ok2", "bad"):
        write_lines(root / name, "w", 3)
    (root / "bad" / ".memoryd").mkdir()
    (root / "bad" / ".memoryd" / "config.toml").write_text("workers = 3\n")
    with capture_logs() as logs:
        started(tmp_path, root).close()
    summary = [e for e in logs if e["event"] == "workspaces_discovered"]
    assert len(summary) == 1
    assert summary[0]["workspaces"] == 3
    assert summary[0]["attention"] == 1
    assert isinstance(summary[0]["seconds"], float)
    each = [e for e in logs if e["event"] == "workspace_discovered"]
    assert [e["workspace"] for e in each] == [str(root / "bad")]
    assert each[0]["attention"] == "its .memoryd/config.toml is refused"
    tidied = [e for e in logs if e["event"] == "workspaces_tidied"]
    assert len(tidied) == 1
    assert tidied[0]["heartbeats_created"] == 3


def test_a_workspace_found_while_running_is_logged_at_info(tmp_path: Path, info_logs: None) -> None:
    """A folder event that brings a workspace logs it at info; a rescan that finds one
    logs the summary line only."""
    root = tmp_path / "root"
    write_lines(root / "first", "w", 3)
    supervisor = started(tmp_path, root)
    try:
        with capture_logs() as by_event:
            write_lines(root / "moved-in", "w", 3)
            supervisor.workspaces.on_change(root / "moved-in", True, 0.0)
        with capture_logs() as by_rescan:
            write_lines(root / "missed", "w", 3)
            supervisor.workspaces.rescan(0.0)
    finally:
        supervisor.close()
    found = [e["workspace"] for e in by_event if e["event"] == "workspace_discovered"]
    assert found == [str(root / "moved-in")]
    assert not [e for e in by_rescan if e["event"] == "workspace_discovered"]
    summary = [e for e in by_rescan if e["event"] == "workspaces_discovered"]
    assert [(e["workspaces"], e["tracked"]) for e in summary] == [(1, 3)]


# ----- the listing, the seed, the step (no daemon) ------------------------------------------


def test_the_listing_says_what_a_workspace_holds_in_path_order(tmp_path: Path) -> None:
    for name in ("a-b", "a/b", "a/c"):
        write_lines(tmp_path / name, "w", 1)
    (tmp_path / "a" / "b" / ".memoryd").mkdir()
    (tmp_path / "a" / "b" / "HEARTBEAT.md").write_bytes(CLEAN)
    (tmp_path / "a" / "c" / "memory").mkdir()
    (tmp_path / "a-b" / ".HEARTBEAT.md.memoryd-tmp-1-ab").write_text("")
    found = scan_workspaces(tmp_path, 4)
    assert [f.path for f in found] == sorted(tmp_path / n for n in ("a-b", "a/b", "a/c"))
    flags = {f.path.relative_to(tmp_path).as_posix(): f for f in found}
    assert (flags["a/b"].meta, flags["a/b"].heartbeat) == (True, True)
    assert (flags["a/c"].meta, flags["a/c"].memory, flags["a/c"].temp) == (False, True, False)
    assert flags["a-b"].temp
    assert look(tmp_path / "a" / "b") == flags["a/b"]
    assert look(tmp_path / "a") is None


def test_the_seed_reads_what_is_there_and_finds_leftovers_by_name(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write_lines(ws, "w", 1)
    found = look(ws)
    assert found is not None
    assert read_seed(found) == Seed(None, {}, None, False)
    meta = ws / ".memoryd"
    meta.mkdir()
    (meta / "state.json").write_text(json.dumps({"level": "warning"}))
    (meta / "config.toml").write_text("token_limit = 5000\n")
    (ws / "HEARTBEAT.md").write_bytes(CLEAN)
    (meta / "archive").mkdir()
    (meta / "archive" / "conversation-1.jsonl").write_text("x\n")
    found = look(ws)
    assert found is not None
    assert read_seed(found) == Seed(b"token_limit = 5000\n", {"level": "warning"}, CLEAN, False)
    for leftover_path in (
        meta / "archive" / "conversation-2.jsonl.123.456.pending",
        meta / "draining" / "conversation.jsonl.1.2.3",
        meta / ".state.json.memoryd-tmp-99-ab",
        ws / "memory" / ".todos.jsonl.memoryd-tmp-99-ab",
    ):
        leftover_path.parent.mkdir(exist_ok=True)
        leftover_path.write_text("")
        found = look(ws)
        assert found is not None
        assert read_seed(found).leftovers, leftover_path
        leftover_path.unlink()


def test_a_symlinked_memoryd_is_refused_by_the_seed(tmp_path: Path) -> None:
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    write_lines(ws, "w", 1)
    elsewhere.mkdir()
    (ws / ".memoryd").symlink_to(elsewhere)
    found = look(ws)
    assert found is not None
    with pytest.raises(UnsafePathError, match="is a symlink"):
        read_seed(found)


@pytest.mark.parametrize(
    "state",
    [
        b'{"level": "warning", "usage_ratio": NaN}',
        b'{"level": "warning", "tokens": 1e400}',
        b"[" * 1000 + b"]" * 1000,
        b'{"level": "warning", "pad": "' + b"x" * (1 << 20) + b'"}',
        "fifo",
    ],
    ids=["nan", "1e400", "nested", "too-large", "fifo"],
)
def test_the_seed_takes_a_state_json_only_as_strict_json_from_a_regular_file(
    tmp_path: Path, state: bytes | str
) -> None:
    """What memoryd.published.state.read_state refuses the seed refuses too: the state is rebuilt,
    and a FIFO is not waited on."""
    ws = tmp_path / "ws"
    write_lines(ws, "w", 1)
    (ws / ".memoryd").mkdir()
    path = ws / ".memoryd" / "state.json"
    if isinstance(state, bytes):
        path.write_bytes(state)
    else:
        os.mkfifo(path)
    found = look(ws)
    assert found is not None
    assert read_seed(found).state == {}


def test_the_seed_refuses_a_config_toml_that_is_a_fifo(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write_lines(ws, "w", 1)
    (ws / ".memoryd").mkdir()
    os.mkfifo(ws / ".memoryd" / "config.toml")
    found = look(ws)
    assert found is not None
    with pytest.raises(UnsafePathError, match="is not a regular file"):
        read_seed(found)


@pytest.mark.parametrize(
    ("heartbeat", "leftovers", "interrupted", "step"),
    [
        (None, False, False, "create"),
        (CLEAN, False, False, "none"),
        (b"garbled", False, False, "clean"),
        (b"", False, False, "clean"),
        (CLEAN, True, False, "locked"),
        (None, True, False, "locked"),
        (CLEAN, False, True, "none"),
        (render(Heartbeat(status="active")).encode(), False, True, "locked"),
        (render(Heartbeat(status="active")).encode(), False, False, "none"),
    ],
)
def test_the_tidy_step(
    heartbeat: bytes | None, leftovers: bool, interrupted: bool, step: str
) -> None:
    assert tidy_step(Seed(None, {}, heartbeat, leftovers), interrupted) == step


@pytest.mark.parametrize(
    ("folder", "name", "expected"),
    [
        ("", ".conversation.jsonl.memoryd-tmp-12-ab", True),
        ("", "conversation.jsonl", False),
        (".memoryd", ".state.json.memoryd-tmp-7-cd", True),
        ("archive", "conversation-x.jsonl.12.34.pending", True),
        ("archive", "conversation-x.jsonl", False),
        ("draining", "conversation.jsonl.1.2.3", True),
        ("draining", "notes", False),
    ],
)
def test_leftover_names(folder: str, name: str, expected: bool) -> None:
    assert leftover(folder, name) is expected


def test_create_in_never_replaces_a_file(tmp_path: Path) -> None:
    (tmp_path / "stage").mkdir()
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    staging = os.open(tmp_path / "stage", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert create_in(folder, "f", b"first", staging=staging)
        assert not create_in(folder, "f", b"second", staging=staging)
    finally:
        os.close(staging)
        os.close(folder)
    assert (tmp_path / "f").read_bytes() == b"first"
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644
    assert os.listdir(tmp_path / "stage") == []


def test_a_restart_takes_the_counts_of_an_unchanged_conversation_back(tmp_path: Path) -> None:
    """state.json keeps what was counted with the file's identity, size and time; a restart
    takes the totals back for a conversation that did not change (no line read, so no
    per-line tokens), and counts one that did (appended while the daemon was stopped), as
    it does any conversation of a rolling workspace."""
    root = tmp_path / "root"
    for name in ("same", "grown", "rolling"):
        write_lines(root / name, "w", 3)
    (root / "rolling" / ".memoryd").mkdir()
    (root / "rolling" / ".memoryd" / "config.toml").write_text('strategy = "rolling"\n')
    started(tmp_path, root).close()
    saved = json.loads((root / "same" / ".memoryd" / "state.json").read_bytes())
    assert saved["counted"]["messages"] == 3
    assert saved["counted"]["size"] == (root / "same" / "conversation.jsonl").stat().st_size
    append_lines(root / "grown", "w", 3, 2)
    supervisor = started(tmp_path, root)
    try:
        tallies = {}
        for name in ("same", "grown", "rolling"):
            tracked = supervisor.scheduler.get(root / name)
            assert tracked is not None
            tallies[name] = tracked.reader.tally
    finally:
        supervisor.close()
    assert (tallies["same"].messages, tallies["same"].per_line) == (3, False)
    assert (tallies["grown"].messages, tallies["grown"].per_line) == (5, True)
    assert tallies["grown"].tokens == sum(tallies["grown"].line_tokens)
    assert (tallies["rolling"].messages, tallies["rolling"].per_line) == (3, True)


def test_counts_taken_back_go_on_counting_what_is_appended(tmp_path: Path) -> None:
    """A reader that resumed from saved counts reads only what is appended next, and its
    totals are a full count's; a torn last line is not counted, so nothing is saved then."""
    path = tmp_path / "conversation.jsonl"
    path.write_bytes(b"".join(line_bytes("w", n) for n in range(4)))
    first = ConversationReader(path)
    first.update()
    counted = first.counted()
    assert counted is not None
    assert counted.holds(os.lstat(path), first.max_line_bytes)
    again = ConversationReader(path)
    again.resume(counted)
    with path.open("ab") as file:
        file.write(line_bytes("w", 4) + b'{"role": "us')
    update = again.update()
    assert [line.index for line in update.new_lines] == [4]
    full = ConversationReader(path)
    full.update()
    assert (again.tally.messages, again.tally.tokens) == (full.tally.messages, full.tally.tokens)
    assert again.counted() is None
    assert not counted.holds(os.lstat(path), first.max_line_bytes)


scalars: Any = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)


counts: Any = st.builds(
    Counted,
    *[st.integers(0, 2**63)] * 7,
    starts_with_summary=st.booleans(),
    max_line_bytes=st.integers(1, 2**30),
)


@given(values=st.tuples(*[scalars] * len(fields(WorkspaceState))), counted=st.none() | counts)
def test_state_bytes_is_the_indented_json_of_the_state(
    values: tuple[Any, ...], counted: Counted | None
) -> None:
    """state.json is the indented JSON it always was, plus what was counted, read back
    as it was written."""
    state = WorkspaceState(*values)
    expected = asdict(state) | ({"counted": asdict(counted)} if counted else {})
    text = state_bytes(state, counted)
    assert text == strict_json.dumps(expected, indent=2).encode() + b"\n"
    assert saved_counted(strict_json.loads(text)) == counted


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_state_bytes_never_writes_nan_or_infinity(value: float) -> None:
    """A ratio or calibration that is not finite is refused, as every JSON memoryd writes."""
    state = WorkspaceState("/w", 1, 2, 3, 0.7, 0.9, value, "normal", "none", False, None, "t", "s")
    with pytest.raises(strict_json.JSONProblem):
        state_bytes(state)


@pytest.mark.parametrize(
    "value",
    [None, [1, 2], {"device": 1}, {**asdict(Counted(1, 2, 3, 4, 5, 6, 7, True, 9)), "size": "3"}],
)
def test_a_saved_count_that_is_not_exactly_one_is_not_taken_back(value: object) -> None:
    assert saved_counted({"counted": value}) is None
