"""The look for changes before a query costs what changed, not what is there: folders whose
time did not change are not read again (a cached listing), only their known files are
looked at; a source the daemon tails is not looked at at all; the first index says how
far it is on a terminal. Nothing here is timed (bench/sources.py measures the costs)."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_sessions import claude_session, line, words_for

from memoryd.cli.sources import ProgressLine
from memoryd.sources import store
from memoryd.sources.places import STATUS_FILE, state_dir
from memoryd.sources.search import recall_source, update
from memoryd.sources.store import Progress

LONG_AGO = 1_700_000_000


def settle(root: Path) -> None:
    """Every folder below ``root`` as if last changed long ago."""
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (LONG_AGO, LONG_AGO))


@pytest.fixture
def read_folders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The folders the listing reads (``os.scandir``, spied on for the test)."""
    seen: list[str] = []
    real = os.scandir

    def spy(path: str) -> object:
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", spy)
    yield seen


def test_unchanged_folders_are_not_read_again_and_appends_and_new_files_are_found(
    tmp_path: Path, read_folders: list[str]
) -> None:
    home = (tmp_path / ".claude").resolve()
    first = claude_session(home, "aaaa0000-0001", words_for("a1"))
    claude_session(home, "bbbb0000-0002", words_for("b2"))
    settle(home)
    assert update(home, "claude-code") is not None  # lists every folder, keeps their times
    read_folders.clear()
    result = update(home, "claude-code")
    assert result is not None and result.files == 0
    assert read_folders == []
    with first.open("ab") as file:  # an append changes the file, not its folder
        file.write(line({"type": "summary", "summary": "lateappendedword", "leafUuid": "x"}))
    result = update(home, "claude-code")
    assert result is not None and result.added == 1 and read_folders == []
    assert recall_source(home, "lateappendedword")
    project = first.parent
    claude_session(home, "cccc0000-0003", words_for("c3"))  # a new file: its folder changed
    result = update(home, "claude-code")
    assert result is not None and result.added > 0
    assert os.fspath(project) in read_folders
    assert recall_source(home, "questionc3")
    (project / "cccc0000-0003.jsonl").unlink()
    assert recall_source(home, "questionc3") == []


def test_a_folder_changed_a_moment_ago_is_read_again_whatever_its_time(
    tmp_path: Path, read_folders: list[str]
) -> None:
    home = (tmp_path / ".claude").resolve()
    claude_session(home, "dddd0000-0004", words_for("d4"))
    assert update(home, "claude-code") is not None
    read_folders.clear()
    assert update(home, "claude-code") is not None
    assert read_folders  # just written: its time cannot be trusted yet


def _daemon_status(root: Path, pending: int) -> None:
    state_dir().mkdir(parents=True, exist_ok=True)
    record = {
        "pid": os.getpid(),
        "written": time.time(),
        "rescan_seconds": 300.0,
        "sources": [
            {
                "kind": "claude-code",
                "path": str(root),
                "root": str(root),
                "pending_changes": pending,
                "last_pass": time.time(),
                "error": None,
            }
        ],
    }
    (state_dir() / STATUS_FILE).write_text(json.dumps(record))


def test_a_source_a_live_daemon_tails_is_not_looked_at_before_a_query(tmp_path: Path) -> None:
    home = (tmp_path / ".claude").resolve()
    path = claude_session(home, "eeee0000-0005", words_for("e5"))
    assert recall_source(home, "questione5")
    _daemon_status(home, pending=0)
    with path.open("ab") as file:
        file.write(line({"type": "summary", "summary": "unseenword", "leafUuid": "x"}))
    assert recall_source(home, "unseenword") == []  # the daemon's index, as it is
    _daemon_status(home, pending=1)  # the daemon has changes to index: look ourselves
    assert recall_source(home, "unseenword")
    (state_dir() / STATUS_FILE).unlink()


def test_a_daemon_that_is_gone_or_late_is_not_trusted(tmp_path: Path) -> None:
    home = (tmp_path / ".claude").resolve()
    path = claude_session(home, "ffff0000-0006", words_for("f6"))
    assert recall_source(home, "questionf6")
    _daemon_status(home, pending=0)
    record = json.loads((state_dir() / STATUS_FILE).read_text())
    record["written"] = time.time() - 3600
    (state_dir() / STATUS_FILE).write_text(json.dumps(record))
    with path.open("ab") as file:
        file.write(line({"type": "summary", "summary": "lateword", "leafUuid": "x"}))
    assert recall_source(home, "lateword")


def test_the_first_index_shows_files_megabytes_rate_and_time_left() -> None:
    out = io.StringIO()
    shown = ProgressLine(out)
    shown(Progress(True, 40, 100, 400_000_000, 1_000_000_000, 20.0))
    shown.end()
    text = out.getvalue()
    assert text.startswith("\r") and text.endswith("\n")
    assert "40 of 100 files" in text and "400 of 1,000 MB (40%)" in text
    assert "20.0 MB/s" in text and "about 30 s left" in text


def test_a_first_index_reports_its_progress_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "PROGRESS_SECONDS", 0.0)  # say it at every file
    home = (tmp_path / ".claude").resolve()
    for number in range(30):
        claude_session(home, f"{number:04d}0000-0007", words_for(f"p{number}"))
    told: list[Progress] = []
    assert update(home, "claude-code", progress=told.append) is not None
    total = told[-1].files_total
    assert total >= 30 and all(p.first and p.files_total == total for p in told)
    assert told[-1].files_done == total and told[-1].percent == 100
    assert sorted(p.bytes_done for p in told) == [p.bytes_done for p in told]
    assert not store.progress_path(store.index_path(home, "claude-code")).exists()
    told.clear()
    claude_session(home, "99990000-0008", words_for("p99"))
    assert update(home, "claude-code", progress=told.append) is not None
    assert told and not any(p.first for p in told)
