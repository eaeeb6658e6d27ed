"""Memory stores: appends, reads, and compaction that never loses an entry."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.cli import build_parser
from memoryd.cli import memory as memory_command
from memoryd.clock import iso_ms
from memoryd.commit.rewrite import Part
from memoryd.errors import InputError
from memoryd.published.events import read_events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.stores.compaction import (
    archived_parts,
    bookmark_summary,
    plan_compaction,
    rewritten_head,
    summary_date,
    todo_summary,
)
from memoryd.stores.disk import (
    compact,
    load_store,
    read_entries,
    record_task_bookmark,
    stores_needing_compaction,
    write_entry,
)
from memoryd.stores.entries import parse_store
from memoryd.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 2, 22, 9, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace folder."""
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def run_cli(argv: list[str]) -> tuple[int, dict[str, Any]]:
    """Parse ``argv`` with memoryd's parser and run the memory command (errors propagate)."""
    args = build_parser("memory").parse_args(argv)
    out = io.StringIO()
    code = memory_command.run(args, out)
    return code, json.loads(out.getvalue())


def tree(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` with its bytes (folders as empty markers)."""
    found: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = path.read_bytes() if path.is_file() else b"<dir>"
    return found


def write_bookmarks(ws: Path, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        entry = {"phase": 11, "plan": "02", "task": i, "paused": True}
        write_entry(ws, "bookmarks", entry, 10**6, now=T0 + i)


def store_lines(ws: Path, store: str) -> list[bytes]:
    return Workspace(ws).store(store).read_bytes().splitlines(keepends=True)


def archives(ws: Path) -> list[Path]:
    folder = Workspace(ws).archive_dir
    return sorted(folder.iterdir()) if folder.is_dir() else []


# --- sacred stores ---------------------------------------------------------------------


@pytest.mark.parametrize("store", ["decisions", "lessons"])
def test_compacting_a_named_sacred_store_is_refused_and_changes_nothing(
    ws: Path, store: str
) -> None:
    for i in range(30):
        write_entry(ws, store, {"title": f"{store} {i}", "status": "completed"}, now=T0 + i)
    before = tree(ws)
    code, report = run_cli(
        ["memory", "compact", "--store", store, "--threshold", "5", "--workspace", str(ws)]
    )
    assert code == 0
    assert report == {"compacted": False, "reason": "sacred_data", "store": store}
    assert tree(ws) == before


def test_sacred_stores_are_never_planned_for_compaction() -> None:
    """plan_compaction replaces nothing in decisions or lessons, however long they are."""
    data = b"".join(json.dumps({"title": str(i)}).encode() + b"\n" for i in range(100))
    for store in ("decisions", "lessons"):
        assert plan_compaction(store, parse_store(data), 0, 0).replacements == ()


# --- bookmarks ---------------------------------------------------------------------------


def test_30_bookmarks_become_20_summary_lines_and_the_10_newest_unchanged(ws: Path) -> None:
    write_bookmarks(ws, 30)
    original = store_lines(ws, "bookmarks")
    code, report = run_cli(
        ["memory", "compact", "--store", "bookmarks", "--threshold", "25", "--workspace", str(ws)]
    )
    assert code == 0
    assert report["compacted"] is True
    assert report["stores_processed"] == ["bookmarks"]
    assert report["entries_before"] == {"bookmarks": 30}
    assert report["entries_after"] == {"bookmarks": 30}
    assert report["summaries_created"] == {"bookmarks": 20}
    assert report["sacred_skipped"] == []
    lines = store_lines(ws, "bookmarks")
    assert len(lines) == 30
    assert lines[20:] == original[20:]
    for i, line in enumerate(lines[:20]):
        assert json.loads(line) == {
            "summary": f"2026-02-22: Phase 11, Plan 02, Task {i} (paused)",
            "original_timestamp": iso_ms(T0 + i),
        }


def test_the_archive_holds_the_replaced_entries_byte_for_byte(ws: Path) -> None:
    """The replaced lines go to .memoryd/archive/ exactly as they were; an event counts them."""
    write_bookmarks(ws, 30)
    original = store_lines(ws, "bookmarks")
    report = compact(ws, "bookmarks", threshold=25, now=T0, drain_seconds=0.0)
    [archive] = archives(ws)
    assert archive.name.startswith("memory-bookmarks-")
    assert archive.read_bytes() == b"".join(original[:20])
    assert report.archives == {"bookmarks": f".memoryd/archive/{archive.name}"}
    [event] = [e for e in read_events(Workspace(ws).events) if e["type"] == "memory_compacted"]
    assert event["store"] == "bookmarks"
    assert (event["entries_before"], event["entries_after"]) == (30, 30)
    assert event["summaries_created"] == 20


def test_keep_bookmarks_decides_how_many_newest_stay(ws: Path) -> None:
    write_bookmarks(ws, 12)
    report = compact(ws, "bookmarks", threshold=5, keep_bookmarks=4, drain_seconds=0.0)
    assert report.summaries_created == {"bookmarks": 8}
    live = [e for e in read_entries(ws, "bookmarks") if "summary" not in e]
    assert [e["task"] for e in live] == [8, 9, 10, 11]


def test_compacting_again_keeps_existing_summary_lines_as_they_are(ws: Path) -> None:
    """Summary lines do not count toward the threshold; a second compaction, once the live
    bookmarks pass it again, summarises only those that became old since the first."""
    write_bookmarks(ws, 30)
    compact(ws, "bookmarks", threshold=25, drain_seconds=0.0)
    first = store_lines(ws, "bookmarks")
    write_bookmarks(ws, 5, start=30)
    assert compact(ws, "bookmarks", threshold=25, drain_seconds=0.0).compacted is False
    write_bookmarks(ws, 15, start=35)
    report = compact(ws, "bookmarks", threshold=25, drain_seconds=0.0)
    assert report.summaries_created == {"bookmarks": 20}
    lines = store_lines(ws, "bookmarks")
    assert lines[:20] == first[:20]
    assert len(lines) == 50
    assert all("summary" in json.loads(line) for line in lines[:40])
    assert [json.loads(line)["task"] for line in lines[40:]] == list(range(40, 50))


# --- dry run, all stores, thresholds --------------------------------------------------------


def test_dry_run_reports_the_same_and_leaves_every_file_byte_identical(ws: Path) -> None:
    write_bookmarks(ws, 30)
    meta = Workspace(ws).meta
    for path in sorted(meta.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    meta.rmdir()
    before = tree(ws)
    argv = ["memory", "compact", "--threshold", "25", "--workspace", str(ws)]
    code, preview = run_cli([*argv, "--dry-run"])
    assert code == 0
    assert tree(ws) == before
    assert not meta.exists()
    assert preview["dry_run"] is True
    _, report = run_cli(argv)
    assert report["dry_run"] is False
    for key in ("compacted", "stores_processed", "entries_before", "summaries_created"):
        assert preview[key] == report[key]


def test_compacting_all_stores_skips_sacred_ones_and_leaves_small_stores_alone(
    ws: Path,
) -> None:
    write_bookmarks(ws, 30)
    for i in range(30):
        write_entry(ws, "decisions", {"title": f"decision {i}"}, now=T0)
    for i in range(5):
        write_entry(ws, "lessons", {"title": f"lesson {i}"}, now=T0)
    for i in range(10):
        write_entry(ws, "todos", {"title": f"todo {i}", "completed": True}, now=T0)
    untouched = {s: Workspace(ws).store(s).read_bytes() for s in ("decisions", "lessons", "todos")}
    code, report = run_cli(["memory", "compact", "--threshold", "25", "--workspace", str(ws)])
    assert code == 0
    assert report["sacred_skipped"] == ["decisions", "lessons"]
    assert report["stores_processed"] == ["bookmarks", "todos"]
    assert report["summaries_created"] == {"bookmarks": 20, "todos": 0}
    assert report["entries_before"] == {"bookmarks": 30, "todos": 10}
    assert list(report["archives"]) == ["bookmarks"]
    for store, data in untouched.items():
        assert Workspace(ws).store(store).read_bytes() == data


@pytest.mark.parametrize("odd", ["fifo", "symlink_out"])
def test_a_store_that_cannot_be_read_refuses_compact_before_any_store_is_rewritten(
    ws: Path, tmp_path: Path, odd: str
) -> None:
    """bookmarks would be compacted, but todos (read after it) is a FIFO or a symlink out
    of the workspace: exit 2 naming todos, and not a byte of the workspace changed."""
    write_bookmarks(ws, 30)
    todos = Workspace(ws).store("todos")
    if odd == "fifo":
        os.mkfifo(todos)
    else:
        outside = tmp_path / "outside.jsonl"
        outside.write_bytes(b'{"title": "t", "completed": true}\n' * 40)
        todos.symlink_to(outside)
    before = tree(ws)
    with pytest.raises(InputError, match=r"todos\.jsonl") as refused:
        run_cli(["memory", "compact", "--threshold", "25", "--workspace", str(ws)])
    assert refused.value.exit_code == 2
    assert tree(ws) == before
    assert archives(ws) == []


@pytest.mark.parametrize("odd", ["file", "symlink"])
def test_compact_refuses_a_file_or_a_symlink_where_the_stores_folder_belongs(
    ws: Path, tmp_path: Path, odd: str
) -> None:
    """As ``memory write`` and ``memory read`` do (exit 2, the folder named), not as if
    the stores were empty; and nothing outside is touched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "bookmarks.jsonl").write_bytes(b'{"title": "b"}\n' * 60)
    if odd == "file":
        (ws / "memory").write_bytes(b"not a folder\n")
    else:
        (ws / "memory").symlink_to(outside)
    before, outside_before = tree(ws), tree(outside)
    expected = "is not a folder" if odd == "file" else "is a symlink"
    with pytest.raises(InputError, match=expected) as refused:
        run_cli(["memory", "compact", "--threshold", "5", "--workspace", str(ws)])
    assert refused.value.exit_code == 2
    assert (tree(ws), tree(outside)) == (before, outside_before)


def test_a_custom_threshold_decides_when_a_store_is_compacted(ws: Path) -> None:
    """20 bookmarks stay untouched at the default threshold (50) and compact at 15."""
    write_bookmarks(ws, 20)
    base = ["memory", "compact", "--store", "bookmarks", "--workspace", str(ws)]
    _, report = run_cli(base)
    assert report["compacted"] is False
    assert report["reason"] == "nothing_to_compact"
    assert archives(ws) == []
    _, report = run_cli([*base, "--threshold", "15"])
    assert report["compacted"] is True
    assert report["summaries_created"] == {"bookmarks": 10}


# --- todos ---------------------------------------------------------------------------


def test_completed_todos_become_summary_lines_and_open_ones_stay(ws: Path) -> None:
    old = datetime(2025, 1, 5, tzinfo=UTC).timestamp()
    for i in range(15):
        done = i % 3 != 0  # 10 completed, 5 open
        write_entry(ws, "todos", {"title": f"todo {i}", "completed": done}, now=old + i * 86400)
    original = store_lines(ws, "todos")
    report = compact(ws, "todos", threshold=12, drain_seconds=0.0)
    assert report.summaries_created == {"todos": 10}
    lines = store_lines(ws, "todos")
    assert len(lines) == 15
    for i, line in enumerate(lines):
        if i % 3 == 0:
            assert line == original[i]
        else:
            day = datetime.fromtimestamp(old + i * 86400, UTC).strftime("%Y-%m-%d")
            assert json.loads(line)["summary"] == f"{day}: [completed] todo {i}"


def test_todo_completion_is_recognised_from_status_and_done_fields() -> None:
    lines = [
        {"title": "a", "status": "done"},
        {"title": "b", "done": True},
        {"title": "c", "status": "open"},
        {"title": "d"},
    ]
    data = b"".join(json.dumps(e).encode() + b"\n" for e in lines)
    plan = plan_compaction("todos", parse_store(data), 0, 10)
    assert [r.entry.line_no for r in plan.replacements] == [1, 2]


# --- writes ---------------------------------------------------------------------------


def test_compact_needed_turns_true_on_the_write_that_passes_the_threshold(ws: Path) -> None:
    results = []
    for i in range(7):
        argv = ["memory", "write", "--store", "bookmarks", "--threshold", "5"]
        entry = json.dumps({"task": i})
        code, result = run_cli([*argv, "--entry", entry, "--workspace", str(ws)])
        assert code == 0
        results.append(result)
    assert [r["compact_needed"] for r in results] == [False] * 5 + [True, True]
    assert results[5] == {"written": True, "entry_count": 6, "threshold": 5, "compact_needed": True}


def test_a_write_appends_and_never_rewrites_the_store(ws: Path) -> None:
    """The store keeps its inode and its earlier bytes; a timestamp is added when missing."""
    write_entry(ws, "todos", {"title": "first"}, now=T0)
    path = Workspace(ws).store("todos")
    inode, first = path.stat().st_ino, path.read_bytes()
    write_entry(ws, "todos", {"title": "second", "timestamp": "2026-01-01"}, now=T0)
    assert path.stat().st_ino == inode
    assert path.read_bytes().startswith(first)
    assert read_entries(ws, "todos") == [
        {"timestamp": iso_ms(T0), "title": "first"},
        {"title": "second", "timestamp": "2026-01-01"},
    ]


@pytest.mark.parametrize(
    ("store", "entry", "message"),
    [
        ("bookmarks", "not json", "not valid JSON"),
        ("bookmarks", "[1, 2]", "got an array"),
        ("bookmarks", '"text"', "got a string"),
        ("bookmarks", '{"x": NaN}', "NaN is not JSON"),
        ("notes", '{"x": 1}', "unknown memory store 'notes'"),
        ("lessons", "{}", "the memory entry is empty"),
        ("lessons", '{"text": "", "tags": [], "timestamp": "2026-01-01"}', "entry is empty"),
        (
            "lessons",
            '{"text": "' + "x" * 16_400 + '"}',
            r"more than memory.max_entry_bytes \(16384\)",
        ),
    ],
)
def test_bad_entries_are_refused_with_exit_2_and_nothing_written(
    ws: Path, store: str, entry: str, message: str
) -> None:
    argv = ["memory", "write", "--store", store, "--entry", entry, "--workspace", str(ws)]
    with pytest.raises(InputError, match=message) as caught:
        run_cli(argv)
    assert caught.value.exit_code == 2
    assert "\n" not in str(caught.value)
    assert tree(ws) == {}


def test_the_python_api_takes_an_entry_up_to_max_entry_bytes_and_refuses_one_byte_more(
    ws: Path,
) -> None:
    entry = {"timestamp": "2026-01-01T00:00:00.000Z", "text": ""}
    entry["text"] = "x" * (1024 - len(json.dumps(entry, separators=(",", ":"))) - 1)
    assert write_entry(ws, "lessons", entry, 50, max_entry_bytes=1024)["written"]
    entry["text"] += "x"
    with pytest.raises(InputError, match=r"is 1025 bytes, more than memory.max_entry_bytes"):
        write_entry(ws, "lessons", entry, 50, max_entry_bytes=1024)
    assert len((ws / "memory" / "lessons.jsonl").read_bytes().splitlines()) == 1


def test_the_python_api_refuses_a_non_object_entry_and_writes_nothing(ws: Path) -> None:
    with pytest.raises(InputError, match="must be a JSON object"):
        write_entry(ws, "todos", ["a list"], 50)  # type: ignore[arg-type]
    assert tree(ws) == {}


def test_a_missing_workspace_is_refused_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(InputError, match="no such workspace"):
        write_entry(missing, "todos", {"title": "x"})
    assert not missing.exists()


# --- reading ---------------------------------------------------------------------------


def test_read_prints_the_newest_entries_and_names_malformed_lines(ws: Path) -> None:
    write_bookmarks(ws, 5)
    with open(Workspace(ws).store("bookmarks"), "ab") as stream:
        stream.write(b"garbage\n")
    base = ["memory", "read", "--store", "bookmarks", "--workspace", str(ws)]
    code, everything = run_cli(base)
    assert code == 0
    assert everything["total"] == 6
    assert [e["task"] for e in everything["entries"]] == [0, 1, 2, 3, 4]
    assert everything["malformed_lines"] == [6]
    _, newest = run_cli([*base, "--last", "2"])
    assert [e["task"] for e in newest["entries"]] == [3, 4]
    assert read_entries(ws, "bookmarks", last=10) == everything["entries"]
    assert read_entries(ws, "todos") == []


# --- robustness -------------------------------------------------------------------------


def test_a_malformed_line_survives_compaction_in_place_and_is_reported(ws: Path) -> None:
    write_bookmarks(ws, 5)
    path = Workspace(ws).store("bookmarks")
    with open(path, "ab") as stream:
        stream.write(b"{not json\n")
    write_bookmarks(ws, 10, start=5)
    report = compact(ws, "bookmarks", threshold=10, keep_bookmarks=3, drain_seconds=0.0)
    assert report.malformed_lines == {"bookmarks": [6]}
    assert report.summaries_created == {"bookmarks": 12}
    lines = store_lines(ws, "bookmarks")
    assert len(lines) == 16
    assert lines[5] == b"{not json\n"
    events = [e for e in read_events(Workspace(ws).events) if e["type"] == "malformed_line"]
    assert [(e["file"], e["line"]) for e in events] == [("memory/bookmarks.jsonl", 6)]


def test_a_trailing_fragment_is_neither_counted_nor_touched(ws: Path) -> None:
    """A write in progress (no newline yet) is carried over byte for byte by compaction."""
    write_bookmarks(ws, 12)
    path = Workspace(ws).store("bookmarks")
    with open(path, "ab") as stream:
        stream.write(b'{"task": "half')
    report = compact(ws, "bookmarks", threshold=11, keep_bookmarks=2, drain_seconds=0.0)
    assert report.entries_before == {"bookmarks": 12}
    assert path.read_bytes().endswith(b'\n{"task": "half')


def test_concurrent_writer_processes_lose_nothing_during_compactions(ws: Path) -> None:
    """Every entry written while compactions run is exactly once live or in the archive."""
    script = (
        "import sys\nfrom pathlib import Path\nfrom memoryd.stores.disk import write_entry\n"
        "for i in range(int(sys.argv[3])):\n"
        "    write_entry(Path(sys.argv[1]), 'bookmarks', {'id': f'{sys.argv[2]}-{i}'}, 10**6)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(ws), f"w{n}", "150"], env=env)
        for n in range(3)
    ]
    compactions = 0
    try:
        while any(w.poll() is None for w in writers):
            if Workspace(ws).store("bookmarks").exists():
                report = compact(ws, "bookmarks", threshold=5, keep_bookmarks=3, drain_seconds=0)
                compactions += report.compacted
            time.sleep(0.005)
    finally:
        codes = [w.wait(timeout=60) for w in writers]
    assert codes == [0, 0, 0]
    compact(ws, "bookmarks", threshold=5, keep_bookmarks=3, drain_seconds=0)
    assert compactions >= 1
    live = [e for e in read_entries(ws, "bookmarks") if "summary" not in e]
    archived = [json.loads(line) for a in archives(ws) for line in a.read_bytes().splitlines()]
    seen = Counter(e["id"] for e in live + archived)
    expected = {f"w{n}-{i}" for n in range(3) for i in range(150)}
    assert set(seen) == expected
    assert set(seen.values()) == {1}
    summaries = [e for e in read_entries(ws, "bookmarks") if "summary" in e]
    assert len(summaries) == len(archived)
    assert len(live) <= 5  # the last compaction leaves at most the threshold live


# --- pure core --------------------------------------------------------------------------


def test_bookmark_summary_uses_the_fields_that_exist() -> None:
    assert bookmark_summary({"timestamp": "2026-02-22T10:00:00Z", "task": 3}) == (
        "2026-02-22: Task 3"
    )
    assert bookmark_summary({"timestamp": 1771754400000, "title": "Ship", "status": "done"}) == (
        "2026-02-22: Task Ship (done)"
    )
    assert bookmark_summary({"phase": 1, "completed": True}) == "undated: Phase 1 (completed)"
    assert bookmark_summary({"where": "parser"}) == 'undated: {"where": "parser"}'


def test_todo_summary_and_dates_are_robust_to_odd_values() -> None:
    assert todo_summary({"created_at": "2025-12-31", "text": "line one\nline two"}) == (
        "2025-12-31: [completed] line one line two"
    )
    assert len(todo_summary({"title": "x" * 500})) < 160
    assert summary_date(1771754400) == "2026-02-22"
    assert summary_date(True) == "undated"
    assert summary_date(float("inf")) == "undated"
    assert summary_date("yesterday") == "undated"


def _apply(data: bytes, parts: list[Part]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else data[p[0] : p[1]] for p in parts)


LINE = st.one_of(
    st.builds(lambda t: json.dumps({"task": t}).encode(), st.integers(0, 99)),
    st.just(b'{"summary": "old", "original_timestamp": null}'),
    st.just(b"not json"),
)


@given(st.lists(LINE, max_size=40), st.integers(0, 40), st.integers(0, 15))
def test_a_bookmark_compaction_loses_no_line(lines: list[bytes], threshold: int, keep: int) -> None:
    """Head and archive together hold every line; only old live bookmarks are replaced."""
    data = b"".join(line + b"\n" for line in lines)
    entries = parse_store(data)
    plan = plan_compaction("bookmarks", entries, threshold, keep)
    head = _apply(data, rewritten_head(entries, plan))
    archive = _apply(data, archived_parts(plan))
    new_lines = head.splitlines(keepends=True)
    assert len(new_lines) == len(entries)
    replaced = {r.entry.line_no for r in plan.replacements}
    live = [e.line_no for e in entries if e.value is not None and not e.is_summary]
    if len(live) > threshold:
        assert sorted(replaced) == live[: max(0, len(live) - keep)]
    else:
        assert replaced == set()
    assert archive == b"".join(e.raw for e in entries if e.line_no in replaced)
    for entry, new in zip(entries, new_lines, strict=True):
        if entry.line_no in replaced:
            assert json.loads(new)["original_timestamp"] is None
        else:
            assert new == entry.raw


# --- task bookmarks and the daemon's check ------------------------------------------------


def test_record_task_bookmark_appends_completed_and_paused_bookmarks(ws: Path) -> None:
    manager = HeartbeatManager(Workspace(ws), clock=lambda: T0)
    task = manager.start_task("Write the parser")
    done = manager.complete_task("parser written")
    assert done.current_task is None  # complete clears the task: the bookmark names it
    finished = replace(task, status="completed", last_result=done.last_result)
    result = record_task_bookmark(ws, finished, "completed", now=T0)
    assert result["written"] is True
    manager.start_task("Write the tests")
    paused = manager.pause_task(notes="half the cases", blockers="fixture missing")
    record_task_bookmark(ws, paused, "paused", now=T0 + 60)
    completed_entry, paused_entry = read_entries(ws, "bookmarks")
    assert completed_entry == {
        "timestamp": iso_ms(T0),
        "task": "Write the parser",
        "status": "completed",
        "started_at": iso_ms(T0),
        "result": "parser written",
    }
    assert paused_entry["status"] == "paused"
    assert paused_entry["notes"] == "half the cases"
    assert paused_entry["blockers"] == "fixture missing"
    assert "result" not in paused_entry
    assert bookmark_summary(paused_entry) == "2026-02-22: Task Write the tests (paused)"


def test_stores_needing_compaction_lists_only_stores_a_compaction_would_change(
    ws: Path,
) -> None:
    write_bookmarks(ws, 12)
    for i in range(12):
        write_entry(ws, "todos", {"title": f"open {i}"})
        write_entry(ws, "decisions", {"title": f"decision {i}"})
    assert stores_needing_compaction(ws, threshold=10) == ["bookmarks"]
    compact(ws, "bookmarks", threshold=10, keep_bookmarks=2, drain_seconds=0.0)
    assert stores_needing_compaction(ws, threshold=10, keep_bookmarks=2) == []
    assert len(load_store(ws, "bookmarks")) == 12


def test_compaction_report_reads_as_counts_and_one_line(ws: Path) -> None:
    """The report's figures for a log line are totals (no per-store dict), and its line for
    HEARTBEAT.md names the number of entries summarized, not a Python dict."""
    write_bookmarks(ws, 30)
    report = compact(ws, None, threshold=25, drain_seconds=0.0)
    assert report.counts() == {
        "compacted": True,
        "dry_run": False,
        "stores": 2,
        "entries_before": 30,
        "entries_after": 30,
        "summarized": 20,
        "malformed": 0,
    }
    assert report.describe() == "compacted memory stores: 20 entries summarized (bookmarks 20)"
    nothing = compact(ws, None, threshold=25, drain_seconds=0.0)
    assert nothing.describe() == "memory stores: nothing compacted (nothing_to_compact)"
