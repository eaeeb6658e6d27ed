"""A FIFO, a socket, a symlink to /dev/zero or a folder where a workspace's file belongs:
every reader and every append refuses it at once (a FIFO with no writer used to block the
daemon's loop, ``status`` and ``heartbeat show`` for ever), with the one-line refusal of
a path (exit 2), or treats it as missing where the file is only derived data."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import cli
from fs_helpers import SPECIAL_KINDS, make_special

from memoryd.commit.draining import salvage
from memoryd.compaction.strategies.checkpoint import load_checkpoint
from memoryd.config.fast import fast_status_settings
from memoryd.config.settings import load_settings
from memoryd.daemon.telemetry import salvaged_since
from memoryd.errors import ConfigError, UnsafePathError
from memoryd.files.regular import read_file, read_file_from
from memoryd.published.events import read_events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.published.monitor import read_monitors
from memoryd.published.state import read_state
from memoryd.receipts.records import read_receipts
from memoryd.runners import SummaryGenerator
from memoryd.search.archive_index import INDEX, _is_wal
from memoryd.workspace import Workspace

pytestmark = pytest.mark.timeout(20)  # a reader that waits on a FIFO fails here, not at 120 s


@pytest.fixture(params=SPECIAL_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    folder = tmp_path / "ws"
    (folder / ".memoryd").mkdir(parents=True)
    (folder / "conversation.jsonl").write_bytes(b'{"id":"a","role":"user","content":"hi"}\n')
    return Workspace(folder)


@pytest.fixture
def special(kind: str) -> Iterator[Callable[[Path], None]]:
    """Put a ``kind`` at a path; sockets are closed at the end."""
    listeners: list[socket.socket] = []

    def put(path: Path) -> None:
        listener = make_special(path, kind)
        if listener is not None:
            listeners.append(listener)

    yield put
    for listener in listeners:
        listener.close()


def test_read_file_refuses_in_one_line(tmp_path: Path, special: Callable[[Path], None]) -> None:
    path = tmp_path / "x"
    special(path)
    for read in (read_file, lambda p: read_file_from(p, 0)):
        with pytest.raises(UnsafePathError) as refused:
            read(path)
        assert str(refused.value) == f"{path}: is not a regular file"
        assert refused.value.exit_code == 2


def test_read_file_reads_a_regular_file_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"abc\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_file(tmp_path / "link") == b"abc\n"
    assert read_file_from(tmp_path / "link", 2) == b"c\n"
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing")


def test_heartbeat_reads_and_writes_refuse_it(
    ws: Workspace, special: Callable[[Path], None]
) -> None:
    special(ws.heartbeat)
    manager = HeartbeatManager(ws)
    for call in (manager.get_status, lambda: manager.start_task("t"), manager.ensure_clean):
        with pytest.raises(UnsafePathError, match=r"HEARTBEAT\.md: is not a regular file"):
            call()


def test_check_ins_skip_a_heartbeat_that_is_not_a_file(
    ws: Workspace, special: Callable[[Path], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running job's check-ins skip what they cannot write: no thread dies with a
    traceback on the daemon's stderr."""
    special(ws.heartbeat)
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    with HeartbeatManager(ws).checkins(0.01, immediately=True):
        time.sleep(0.05)
    assert raised == []


def test_events_and_receipts_are_refused(ws: Workspace, special: Callable[[Path], None]) -> None:
    special(ws.events)
    special(ws.meta / "receipts.jsonl")
    with pytest.raises(UnsafePathError, match="is not a regular file"):
        list(read_events(ws.events))
    with pytest.raises(UnsafePathError, match="is not a regular file"):
        read_receipts(ws)


def test_derived_files_count_as_missing(ws: Workspace, special: Callable[[Path], None]) -> None:
    """state.json is rebuilt from the conversation; a monitor's file, checkpoint.json and
    the events tail the metrics count are left out: none of them stops anything."""
    special(ws.state)
    special(ws.meta / "monitors" / "agent.json")
    special(ws.checkpoint)
    special(ws.events)
    assert read_state(ws) is None
    assert read_monitors(ws.path, 300, 0) == []
    assert load_checkpoint(ws) is None
    assert salvaged_since(ws.events, 0) == 0


def test_a_workspace_config_is_refused_by_both_loaders(
    ws: Workspace, special: Callable[[Path], None], clean_environment: Path
) -> None:
    """The fast path of ``status`` leaves it to the full loader, which refuses it."""
    special(ws.config)
    fast = fast_status_settings(None, {}, {})
    assert fast is not None
    assert fast.for_workspace(ws.path) is None
    from memoryd.config.settings import settings_for_workspace

    with pytest.raises(UnsafePathError, match=r"config\.toml: is (not a regular file|a symlink)"):
        settings_for_workspace(load_settings(env={}).settings, ws.path)


def test_the_python_api_refuses_a_conversation_that_is_not_a_file(
    ws: Workspace, special: Callable[[Path], None], clean_environment: Path
) -> None:
    ws.conversation.unlink()
    special(ws.conversation)
    with pytest.raises(UnsafePathError):
        SummaryGenerator(ws.path).current_summary()


def test_a_drain_mark_that_is_not_a_file_is_left_alone(
    ws: Workspace, special: Callable[[Path], None]
) -> None:
    """A name in .memoryd/draining that looks like a dead process's mark: never opened
    in a way that waits (recovery runs in the daemon's loop)."""
    special(ws.meta / "draining" / f"conversation.jsonl.{2**22 + 7}.12345.0")
    assert salvage(ws) == 0


def test_the_index_is_never_opened_when_it_is_not_a_file(
    ws: Workspace, special: Callable[[Path], None], kind: str
) -> None:
    special(ws.meta / INDEX)
    assert not _is_wal(ws.meta / INDEX)
    if kind != "folder":
        os.unlink(ws.meta / INDEX)
        (ws.meta / INDEX).write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)
        special(ws.meta / f"{INDEX}-wal")
        assert not _is_wal(ws.meta / INDEX)


def test_status_of_a_root_shows_the_workspace_it_cannot_read_as_a_row(
    tmp_path: Path, special: Callable[[Path], None], clean_environment: Path
) -> None:
    root = tmp_path / "root"
    for name in ("good", "odd"):
        (root / name).mkdir(parents=True)
        (root / name / "conversation.jsonl").write_bytes(b'{"role":"user","content":"x"}\n')
    special(root / "odd" / "HEARTBEAT.md")
    code, out = cli("status", str(root), "--json")
    assert code == 0
    rows = {Path(row["workspace"]).name: row for row in json.loads(out)}
    assert rows["good"]["messages"] == 1
    assert rows["odd"]["error"].endswith("HEARTBEAT.md: is not a regular file")


def test_a_configuration_file_that_is_not_a_file_is_refused(
    special: Callable[[Path], None], clean_environment: Path
) -> None:
    """At the default place too (it was silently ignored): one line, never a wait."""
    special(clean_environment / "memoryd" / "config.toml")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_settings(env={"XDG_CONFIG_HOME": str(clean_environment)})


@pytest.mark.parametrize("target", ["conversation", "store"])
def test_an_append_refuses_it_with_exit_2_and_writes_nothing(
    ws: Workspace,
    special: Callable[[Path], None],
    kind: str,
    target: str,
    capsys: pytest.CaptureFixture[str],
    clean_environment: Path,
) -> None:
    """``append`` and ``memory write`` refuse whatever stands where their file belongs in
    the words of a path (a folder opened for writing and a socket included), never as an
    error of the system (exit 1)."""
    path = ws.conversation if target == "conversation" else ws.store("todos")
    entry = '{"title": "t"}'
    if target == "conversation":
        path.unlink()
    special(path)
    argv = (
        ["append", "--role", "user", "--content", "hi", str(ws.path)]
        if target == "conversation"
        else ["memory", "write", "--store", "todos", "--entry", entry, "--workspace", str(ws.path)]
    )
    before = _files(ws.path)
    code, printed = cli(*argv)
    refusal = capsys.readouterr().err
    assert code == 2, refusal
    assert printed == ""
    expected = "is a symlink" if kind == "/dev/zero" else "is not a regular file"
    assert refusal == f"memoryd: {path}: {expected}" + (
        "; memoryd never writes through a symlink inside a workspace\n"
        if kind == "/dev/zero"
        else "\n"
    )
    assert _files(ws.path) == before


def _files(folder: Path) -> dict[str, bytes]:
    """Every regular file below ``folder`` with its bytes, but the writers' lock (taken,
    empty, by any writer)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink() and p.name != "lock"
    }


def test_expand_refuses_a_conversation_that_is_not_a_file_with_exit_2(
    ws: Workspace,
    special: Callable[[Path], None],
    kind: str,
    capsys: pytest.CaptureFixture[str],
    clean_environment: Path,
) -> None:
    """``expand`` reads the history through the same refusal as every other reader."""
    ws.conversation.unlink()
    special(ws.conversation)
    code, printed = cli("expand", str(ws.path), "a")
    refusal = capsys.readouterr().err
    assert (code, printed) == (2, "")
    assert refusal == f"memoryd: {ws.conversation}: is not a regular file\n"
