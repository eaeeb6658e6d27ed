"""The look for changes before a query costs what changed, not what is there: folders whose
time did not change are not read again (a cached listing), only the files written within
a day are looked at (all of them once a minute); a source the daemon tails is not looked
at at all; the first index says how far it is on a terminal. Nothing here is timed
(bench/sources.py measures the costs)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_sessions import claude_session, line, words_for

from memoryd.cli.sources import ProgressLine
from memoryd.search.sessions import listing, store
from memoryd.search.sessions.places import STATUS_FILE, state_dir
from memoryd.search.sessions.search import recall_source, update
from memoryd.search.sessions.store import Progress

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


@pytest.fixture
def looked_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The session files the listing looks at (``os.lstat`` of a ``.jsonl`` below
    ``projects/``, spied on)."""
    seen: list[str] = []
    real = os.lstat

    def spy(path: str, *args: object, **kwargs: object) -> os.stat_result:
        if "/projects/" in os.fspath(path) and os.fspath(path).endswith(".jsonl"):
            seen.append(os.fspath(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", spy)
    yield seen


def _age(path: Path, days: float) -> None:
    """``path`` and its subagents' and spilled files as last written ``days`` ago."""
    then = time.time() - days * 86400
    for each in [path, *path.with_suffix("").rglob("*.*")]:
        os.utime(each, (then, then))


def _full_look_due(home: Path, value: str = "0") -> None:
    """As if the last look at every file was over a minute ago (or at ``value``)."""
    conn = store.connect(store.index_path(home, "claude-code"))
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, listing.FULL_LOOK_KEY))
    conn.close()


def test_the_next_query_finds_an_append_to_a_live_session_and_a_new_file_in_a_folder(
    tmp_path: Path, looked_at: list[str], read_folders: list[str]
) -> None:
    """A query looks at the sessions written within a day (an agent may still append to
    them), not at older ones; an append to a live session and a new file in a folder
    already listed are both found by the next query."""
    home = (tmp_path / ".claude").resolve()
    old = [claude_session(home, f"{n:04d}0000-0009", words_for(f"o{n}")) for n in range(20)]
    live = claude_session(home, "77770000-0010", words_for("l1"))
    for path in old:
        _age(path, 3)
    settle(home)
    live_files = sorted(map(os.fspath, [live, *live.with_suffix("").rglob("*.jsonl")]))
    assert len(live_files) == 2  # the session and its subagent's file
    assert recall_source(home, "questiono3")  # indexes all, looks at all (the first look)
    looked_at.clear()
    read_folders.clear()
    assert recall_source(home, "questionl1")
    assert sorted(looked_at) == live_files and read_folders == []
    with live.open("ab") as file:
        file.write(line({"type": "summary", "summary": "appendedtolive", "leafUuid": "x"}))
    assert [hit.file for hit in recall_source(home, "appendedtolive")] == [live]
    settle(home)
    looked_at.clear()
    recall_source(home, "questionl1")
    assert sorted(looked_at) == live_files
    added = claude_session(home, "88880000-0011", words_for("n1"))  # same folder, new file
    assert {hit.file for hit in recall_source(home, "questionn1")} == {added}


def test_an_append_to_a_session_quiet_for_a_day_is_found_by_the_next_full_look(
    tmp_path: Path, looked_at: list[str]
) -> None:
    """A session last written over a day ago is not looked at by each query, but by the
    first one a minute after the last full look: an append to it (a resumed session) is
    found then."""
    home = (tmp_path / ".claude").resolve()
    quiet = claude_session(
        home, "99990000-0012", {k: v for k, v in words_for("q1").items() if k != "spilled"}
    )
    _age(quiet, 2)
    settle(home)
    assert recall_source(home, "questionq1")
    with quiet.open("ab") as file:  # its time is now new, but the index holds the old one
        file.write(line({"type": "summary", "summary": "resumedword", "leafUuid": "x"}))
    looked_at.clear()
    assert recall_source(home, "resumedword") == []
    assert looked_at == []
    _full_look_due(home)
    assert [hit.file for hit in recall_source(home, "resumedword")] == [quiet]
    assert looked_at == [os.fspath(quiet)]
    looked_at.clear()
    assert recall_source(home, "resumedword")  # now written a moment ago: live
    assert looked_at == [os.fspath(quiet)]
    other = claude_session(
        home, "99990000-0015", {k: v for k, v in words_for("q2").items() if k != "spilled"}
    )
    _age(other, 2)
    assert recall_source(home, "questionq2")
    with other.open("ab") as file:
        file.write(line({"type": "summary", "summary": "clockwentback", "leafUuid": "y"}))
    _full_look_due(home, str(time.time_ns() + 3600 * 10**9))  # a look "in the future"
    assert recall_source(home, "clockwentback")  # the clock went back: every file looked at


def test_a_full_look_drops_a_file_removed_from_a_folder_read_since(tmp_path: Path) -> None:
    home = (tmp_path / ".claude").resolve()
    first = claude_session(home, "aaaa0000-0013", words_for("r1"))
    claude_session(home, "bbbb0000-0014", words_for("r2"))
    settle(home)
    assert recall_source(home, "questionr1")
    first.unlink()
    assert recall_source(home, "questionr1") == []  # its folder changed: read again
    assert recall_source(home, "questionr2")


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


def _big_codex_home(home: Path, files: int, lines: int) -> None:
    """``files`` Codex rollouts of ``lines`` user messages of ~1 KB each."""
    for number in range(files):
        session = f"{number:08x}-0000-4000-8000-{number:012x}"
        records = [
            {
                "timestamp": "2026-03-01T10:00:00.000Z",
                "type": "session_meta",
                "payload": {"id": session, "cwd": "/home/dev/proj", "cli_version": "0.46.0"},
            },
        ]
        for turn in range(lines):
            text = " ".join(f"word{(number * lines + turn) * 7 + k}" for k in range(120))
            records.append(
                {
                    "timestamp": "2026-03-01T10:00:01.000Z",
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": text}],
                    },
                }
            )
        folder = home / "sessions" / "2026" / "03" / "01"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"rollout-2026-03-01T10-00-00-{session}.jsonl"
        path.write_bytes(b"".join(line(record) for record in records))


@pytest.mark.slow
def test_a_first_index_on_a_terminal_shows_its_progress_line(tmp_path: Path) -> None:
    """``memoryd recall`` run with its stderr on a terminal, on a folder whose first index
    lasts seconds: a line shows the files and megabytes done, the rate and the time left,
    rewritten in place, and ends before the hits; with stderr not a terminal, no such
    line."""
    home = tmp_path / ".codex"
    _big_codex_home(home, 40, 200)  # ~10 MB
    argv = [sys.executable, "-m", "memoryd", "recall", str(home), "word77"]
    master, slave = pty.openpty()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = bytearray()
    while process.poll() is None or select.select([master], [], [], 0.1)[0]:
        if select.select([master], [], [], 0.1)[0]:
            try:
                seen.extend(os.read(master, 65536))
            except OSError:  # EIO once the child has exited
                break
    with contextlib.suppress(OSError):
        os.close(master)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert b"word77" in out
    shown = seen.decode().replace("\r\n", "\n")  # the terminal's own newline
    assert "\rindexing: " in shown and shown.endswith("\n"), shown
    last = shown.rsplit("\r", 1)[-1]
    assert " of 40 files, " in last and " MB (" in last and " MB/s" in last, last
    assert "left" in shown
    plain = subprocess.run(
        [*argv[:-1], "word78"], capture_output=True, check=True, cwd=tmp_path, timeout=120
    )
    assert b"indexing:" not in plain.stderr
