"""Recall and expand through real files: the index is only a cache of the archive (missing,
stale, corrupt, foreign or half-written by a killed process, it is rebuilt), queries of
any shape never break it, and expand returns the bytes exactly as they were appended."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import SettingsFactory, WorkspaceFactory, encode_lines, generated_messages
from daemon_harness import wait_until
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.errors import InputError, MemorydError, UnsafePathError, UsageError
from memoryd.search.archive import Hit, expand, recall, update_index
from memoryd.search.history import content_text
from memoryd.search.query import plain_terms, to_match

REPO = Path(__file__).resolve().parents[2]


def marked(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Messages ``msg-<n>`` whose content carries the unique word ``mark<n>q``."""
    messages = generated_messages(start + count, 300)[start:]
    for message in messages:
        number = int(message["id"].split("-")[1])
        message["content"] += f" mark{number:04d}q"
    return messages


def summarized(folder: Path, make_settings: SettingsFactory, rounds: int, **extra: Any) -> None:
    """``rounds`` forced jobs, appending 30 marked messages before each one after the first."""
    job_settings = make_settings(token_limit=4000, index_archive=False, **extra)
    for round_ in range(rounds):
        if round_:
            with (folder / "conversation.jsonl").open("ab") as file:
                file.write(encode_lines(marked(30, 60 + 30 * (round_ - 1))))
        assert run_job(JobRequest(folder, job_settings, force=True)).outcome == "completed"


def archived_lines(folder: Path) -> dict[str, bytes]:
    """Every original line in the archive, by id (summary heads left out)."""
    found: dict[str, bytes] = {}
    for archive in sorted((folder / ".memoryd" / "archive").iterdir()):
        for line in archive.read_bytes().splitlines(keepends=True):
            message = json.loads(line)
            if not message.get("isSummary"):
                found[message["id"]] = line
    return found


@pytest.fixture
def history(workspace: WorkspaceFactory, make_settings: SettingsFactory) -> Path:
    """A workspace summarized three times (narrative), with no index yet."""
    folder = workspace(messages=marked(60))
    summarized(folder, make_settings, 3)
    assert not (folder / ".memoryd" / "index.sqlite").exists()
    return folder


def ids(hits: list[Hit]) -> list[str | None]:
    return [hit.id for hit in hits]


def test_recall_finds_every_archived_marker_with_its_id_and_place(history: Path) -> None:
    originals = archived_lines(history)
    assert len(originals) > 60
    for message_id, line in originals.items():
        word = json.loads(line)["content"].rsplit(" ", 1)[1]
        hits = recall(history, word)
        assert ids(hits) == [message_id]
        hit = hits[0]
        raw = (history / hit.archive).read_bytes()[hit.offset : hit.offset + hit.length]
        assert raw == line
        assert f"**{word}**" in hit.snippet
    index = history / ".memoryd" / "index.sqlite"
    reader = sqlite3.connect(index)
    try:
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == len(originals)
        for name in (index, Path(f"{index}-wal"), Path(f"{index}-shm")):
            assert oct(name.stat().st_mode & 0o777) == "0o600", name
    finally:
        reader.close()


PUBLIC_API_ORDERS = {
    "package first": "import memoryd.search.sessions.search\nfrom memoryd import expand, recall",
    "function first": "from memoryd import expand, recall\nimport memoryd.search.sessions.search",
}


@pytest.mark.parametrize("order", sorted(PUBLIC_API_ORDERS))
def test_from_memoryd_import_recall_searches_whichever_is_imported_first(
    history: Path, order: str
) -> None:
    """``memoryd.recall`` is the public function, never a module: in a fresh interpreter,
    imported before or after the search engine's modules, it searches the archive as
    :func:`memoryd.search.archive.recall` does."""
    word = json.loads(next(iter(archived_lines(history).values())))["content"].rsplit(" ", 1)[1]
    script = (
        f"{PUBLIC_API_ORDERS[order]}\nimport sys\n"
        "hits = recall(sys.argv[1], sys.argv[2])\n"
        "print(hits[0].id, len(expand(sys.argv[1], hits[0].id)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(history), word],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == [str(recall(history, word)[0].id), "1"]


def test_plain_words_phrases_prefixes_role_limit_and_ranking(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    messages: list[dict[str, Any]] = [
        {"id": "a", "role": "user", "content": "the deploy key lives in vault", "timestamp": 1},
        {"id": "b", "role": "assistant", "content": "vault deploy done", "timestamp": 2},
        {"id": "c", "role": "user", "content": "the deploy key lives in vault", "timestamp": 3},
        {"id": "d", "role": "assistant", "content": "unrelated chatter", "timestamp": 4},
        *marked(40, 10),
    ]
    folder = workspace(messages=messages)
    job = make_settings(token_limit=2000, index_archive=False, keep_recent_ratio=0.1)
    assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"
    assert set(ids(recall(folder, "vault deploy"))) == {"a", "b", "c"}
    assert set(ids(recall(folder, '"deploy key"'))) == {"a", "c"}
    assert set(ids(recall(folder, "depl* vau*"))) == {"a", "b", "c"}
    assert ids(recall(folder, "deploy", role="assistant")) == ["b"]
    assert ids(recall(folder, '"deploy key"', limit=1)) == ["c"], "equal scores: newer first"
    assert recall(folder, "nothing-like-this") == []
    assert set(ids(recall(folder, "vault NOT done", raw=True))) == {"a", "c"}


def test_content_blocks_are_searched_as_text_and_images_by_a_placeholder() -> None:
    content = [
        {"type": "text", "text": "look at this"},
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "/etc/hosts"}},
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}]},
        {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
        {"type": "thinking", "thinking": "hmm"},
    ]
    text = content_text(content)
    assert text == "look at this\nread_file\n/etc/hosts\nok\n[image]\nhmm"
    assert "AAAA" not in text


def test_expand_returns_the_appended_bytes_with_context_across_archives_and_live(
    history: Path,
) -> None:
    originals = archived_lines(history)
    for message_id, line in originals.items():
        assert expand(history, message_id) == [line]
    live = (history / "conversation.jsonl").read_bytes().splitlines(keepends=True)[1:]
    history_lines = list(originals.values()) + live
    assert len(history_lines) == 60 + 30 + 30
    for index in (0, 5, 33, len(originals) - 1, len(originals), len(history_lines) - 1):
        message_id = json.loads(history_lines[index])["id"]
        got = expand(history, message_id, before=4, after=4)
        assert got == history_lines[max(0, index - 4) : index + 5]


def test_expand_in_a_folder_that_is_no_workspace_says_so(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a workspace") as caught:
        expand(tmp_path, "msg-1")
    assert caught.value.exit_code == 2


def test_recall_and_history_word_a_limit_of_0_the_same_way(
    history: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("recall", str(history), "x", "--limit", "0")[0] == 2
    recall_error = capsys.readouterr().err
    assert cli("history", str(history), "--limit", "0")[0] == 2
    history_error = capsys.readouterr().err
    for error in (recall_error, history_error):
        assert error.startswith("memoryd: --limit must be a whole number ")
        assert error.endswith(" (got 0)\n")


def test_expand_refuses_unknown_ids_and_explains_a_summary_id(history: Path) -> None:
    with pytest.raises(MemorydError, match="no message with this id"):
        expand(history, "no-such-id")
    summary = json.loads((history / "conversation.jsonl").read_bytes().split(b"\n")[0])
    with pytest.raises(MemorydError, match=r"is a summary of \d+ messages \(msg-0000"):
        expand(history, summary["id"])
    with pytest.raises(UsageError):
        expand(history, "msg-0001", before=-1)


def test_indexers_that_start_together_on_a_new_index_all_succeed(history: Path) -> None:
    """Three threads create the same new index at once (a worker after its job, a recall,
    another recall), fifty times over: none is refused with "database is locked"."""
    errors: list[MemorydError] = []

    def index(start: threading.Barrier) -> None:
        start.wait()
        try:
            update_index(history)
        except MemorydError as exc:
            errors.append(exc)

    for _round in range(50):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{history}/.memoryd/index.sqlite{suffix}").unlink(missing_ok=True)
        start = threading.Barrier(3)
        threads = [threading.Thread(target=index, args=(start,)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
    assert ids(recall(history, "mark0007q")) == ["msg-0007"]


def test_a_deleted_index_is_rebuilt(history: Path) -> None:
    assert update_index(history) > 60
    for suffix in ("", "-wal", "-shm"):
        Path(f"{history}/.memoryd/index.sqlite{suffix}").unlink(missing_ok=True)
    assert ids(recall(history, "mark0007q")) == ["msg-0007"]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "zeroed-middle"])
def test_a_corrupt_index_is_rebuilt(history: Path, damage: str) -> None:
    update_index(history)
    index = history / ".memoryd" / "index.sqlite"
    data = index.read_bytes()
    if damage == "garbage":
        index.write_bytes(os.urandom(len(data)))
    elif damage == "truncated":
        index.write_bytes(data[: len(data) // 3])
    else:
        index.write_bytes(data[:4096] + bytes(len(data) - 8192) + data[-4096:])
    with capture_logs() as logs:
        found = {hit.id for hit in recall(history, "mark*", limit=1000)}
    assert found == set(archived_lines(history))
    assert any(log["event"] == "index_rebuilding" for log in logs)


def test_a_foreign_database_in_place_of_the_index_is_replaced(history: Path) -> None:
    index = history / ".memoryd" / "index.sqlite"
    with sqlite3.connect(index) as other:
        other.execute("CREATE TABLE notes(text)")
        other.execute("INSERT INTO notes VALUES ('mark0007q')")
    other.close()
    assert ids(recall(history, "mark0007q")) == ["msg-0007"]


def test_a_stale_index_is_rebuilt_and_new_archives_are_added_incrementally(
    history: Path, make_settings: SettingsFactory
) -> None:
    update_index(history)
    with (history / "conversation.jsonl").open("ab") as file:
        file.write(encode_lines(marked(30, 200)))
    summarized(history, make_settings, 1)
    with capture_logs() as logs:
        assert ids(recall(history, "mark0210q")) == ["msg-0210"]
    updates = [log for log in logs if log["event"] == "index_updated"]
    assert [u["archives"] for u in updates] == [1]
    assert not any(log["event"] == "index_rebuilding" for log in logs)

    first = sorted((history / ".memoryd" / "archive").iterdir())[0]
    first.unlink()
    with capture_logs() as logs:
        assert recall(history, "mark0007q") == []
        assert ids(recall(history, "mark0210q")) == ["msg-0210"]
    assert any(log["event"] == "index_rebuilding" for log in logs)


def test_the_index_is_never_created_through_a_symlink(history: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.sqlite"
    outside.write_bytes(b"precious")
    (history / ".memoryd" / "index.sqlite").symlink_to(outside)
    assert ids(recall(history, "mark0007q")) == ["msg-0007"]
    assert outside.read_bytes() == b"precious"
    assert not (history / ".memoryd" / "index.sqlite").is_symlink()


def test_a_memoryd_folder_that_leads_outside_the_workspace_is_refused(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "archive").mkdir(parents=True)
    archive = elsewhere / "archive" / "conversation-20260101T000000000000Z-abcdef.jsonl"
    archive.write_bytes(encode_lines(marked(3)))
    folder = workspace(messages=marked(3, 10))
    (folder / ".memoryd").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError):
        recall(folder, "mark0001q")
    assert not (elsewhere / "index.sqlite").exists()


def test_a_process_killed_while_indexing_leaves_an_index_that_recall_completes(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    """SIGKILL in the middle of the index's write transaction: the half-written archive is
    rolled back, and the next recall indexes it and finds every message."""
    folder = workspace(messages=marked(2))
    archive_dir = folder / ".memoryd" / "archive"
    archive_dir.mkdir(parents=True)
    filler = "lorem ipsum dolor sit amet " * 40
    big = [{**m, "content": f"{filler} {m['content']}"} for m in marked(30_000, 1000)]
    archive = archive_dir / "conversation-20260101T000000000000Z-abcdef.jsonl"
    archive.write_bytes(encode_lines(big))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    indexer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from memoryd.search.archive import update_index; update_index({str(folder)!r})",
        ],
        env=env,
    )
    wal = folder / ".memoryd" / "index.sqlite-wal"
    try:
        wait_until(lambda: wal.exists() and wal.stat().st_size > (1 << 20), 60, "indexing")
        os.kill(indexer.pid, signal.SIGKILL)
    finally:
        indexer.wait(30)
    assert indexer.returncode == -signal.SIGKILL
    assert ids(recall(folder, "mark1000q")) == ["msg-1000"]
    assert ids(recall(folder, "mark30999q")) == ["msg-30999"]
    assert update_index(folder) == 30_000


@settings(max_examples=300, deadline=None)
@given(query=st.text(alphabet=st.characters(codec="utf-8"), max_size=60), raw=st.booleans())
def test_any_query_gives_hits_no_hits_or_a_usage_error(
    history_for_queries: Path, query: str, raw: bool
) -> None:
    try:
        hits = recall(history_for_queries, query, raw=raw)
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(isinstance(hit, Hit) for hit in hits)


@pytest.fixture(scope="module")
def history_for_queries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from memoryd.config.settings import load_settings

    folder = tmp_path_factory.mktemp("queries")
    (folder / "conversation.jsonl").write_bytes(encode_lines(marked(60)))
    job = load_settings(overrides={"drain_seconds": 0, "token_limit": 4000}).settings
    assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"
    update_index(folder)
    return folder


def test_plain_queries_are_quoted_terms() -> None:
    assert plain_terms('deploy "vault key" abc* -- NEAR( "open') == [
        '"deploy"',
        '"vault key"',
        '"abc"*',
        '"NEAR"',
        '"open"',
    ]
    assert to_match("x y").all_words == '"x" AND "y"'
    assert to_match("x y").any_word(('"x"', '"y"')) == '"x" OR "y"'
    with pytest.raises(UsageError, match="no words"):
        to_match('-- !! "" *')


HOSTILE = [
    "!!!",
    '"unbalanced',
    "NEAR(",
    "-",
    "*",
    "AND OR NOT",
    "col:mark0001q",
    "mark0001q)",
    "x" * 10_000,
    " ".join(["word"] * 2_000),
    "😀 ünïcödé 中文",
]


def run_memoryd(*argv: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv], env=env, capture_output=True, timeout=60
    )


@pytest.mark.parametrize("raw", [False, True])
def test_hostile_queries_on_the_command_line_never_trace_back(
    history_for_queries: Path, raw: bool
) -> None:
    for query in HOSTILE:
        done = run_memoryd("recall", str(history_for_queries), query, *(["--raw"] if raw else []))
        assert done.returncode in (0, 2), (query[:40], done.stderr)
        assert b"Traceback" not in done.stderr
        if done.returncode == 2:
            assert done.stderr.count(b"\n") == 1 and done.stdout == b""
        else:
            assert done.stdout.startswith((b"no matches", str(history_for_queries).encode()))


def test_the_command_line_prints_blocks_json_and_exact_bytes(history: Path) -> None:
    code, text = cli("recall", str(history), "mark0007q")
    assert code == 0
    head, snippet = text.splitlines()[:2]
    assert head.startswith(f"{history}  2023-11-14 ") and head.endswith("  msg-0007")
    assert "**mark0007q**" in snippet
    code, text = cli("recall", str(history), "mark*", "--json", "--limit", "3", "--role", "user")
    rows = json.loads(text)
    assert len(rows) == 3 and {row["role"] for row in rows} == {"user"}
    assert set(rows[0]) == {
        "workspace",
        "id",
        "role",
        "timestamp",
        "archive",
        "offset",
        "length",
        "snippet",
        "score",
        "all_words",
    }
    assert cli("recall", str(history), "zzzznothing") == (
        0,
        f"no matches for 'zzzznothing' in {history}\n",
    )
    done = run_memoryd("expand", str(history), "msg-0010", "--before", "1", "--after", "1")
    assert done.returncode == 0
    originals = archived_lines(history)
    assert done.stdout == originals["msg-0009"] + originals["msg-0010"] + originals["msg-0011"]
    done = run_memoryd("expand", str(history), "missing-id")
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.count(b"\n") == 1
    assert cli("recall", str(history), "x", "--limit", "0")[0] == 2
    assert cli("recall", str(history / "nope"), "x")[0] == 2


def test_root_wide_recall_over_fifty_workspaces(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    root = tmp_path / "root"
    job = make_settings(token_limit=4000, index_archive=False)
    for n in range(50):
        folder = root / f"team{n % 5}" / f"agent{n:02d}"
        folder.mkdir(parents=True)
        messages = marked(40)
        for message in messages:
            message["content"] += f" ws{n:02d}tag"
        (folder / "conversation.jsonl").write_bytes(encode_lines(messages))
        assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"
    hits = recall(root, "ws37tag mark0003q")
    assert [(hit.workspace.name, hit.id) for hit in hits if hit.all_words] == [
        ("agent37", "msg-0003")
    ]
    assert hits[0].all_words and len(hits) == 10, "then messages with one of the words"
    everywhere = recall(root, "mark0005q", limit=100)
    assert sorted(hit.workspace.name for hit in everywhere) == [f"agent{n:02d}" for n in range(50)]
    code, text = cli("recall", str(root), "mark0005q", "--json", "--limit", "7")
    assert code == 0 and len(json.loads(text)) == 7


def test_indexing_after_a_job_runs_after_the_commit_and_a_failure_is_logged(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(messages=marked(60))
    index = folder / ".memoryd" / "index.sqlite"
    job = make_settings(token_limit=4000)
    with capture_logs() as logs:
        assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"
        wait_until(lambda: any(e["event"] == "index_updated" for e in logs), 10, "indexing")
    events = [e["event"] for e in logs]
    assert events.index("summarize_completed") < events.index("index_updated")
    assert index.exists()

    # An index that cannot be written: the job still completes; the failure is logged,
    # and a retry indexes the new archive once the obstacle is gone.
    (folder / ".memoryd" / "index.lock").unlink()
    (folder / ".memoryd" / "index.lock").mkdir()
    with (folder / "conversation.jsonl").open("ab") as file:
        file.write(encode_lines(marked(30, 60)))
    with capture_logs() as logs:
        assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"
        wait_until(
            lambda: any(e["event"] == "index_update_failed" for e in logs), 10, "the failure"
        )
        (folder / ".memoryd" / "index.lock").rmdir()
        wait_until(lambda: any(e["event"] == "index_updated" for e in logs), 15, "a retry")
    failures = [e for e in logs if e["event"] == "index_update_failed"]
    assert failures[0]["attempt"] == 1 and "index.lock" in failures[0]["reason"]
    with capture_logs() as logs:
        assert ids(recall(folder, "mark0070q")) == ["msg-0070"]
    assert not [e for e in logs if e["event"] in ("index_updated", "index_rebuilding")]


def test_per_message_commands_and_the_daemon_module_load_neither_the_index_nor_mcp(
    history: Path,
) -> None:
    script = (
        "import io, json, sys\n"
        "from memoryd.cli import main\n"
        f"ws = {str(history)!r}\n"
        "out = io.StringIO()\n"
        "main(['append', ws, '--role', 'user', '--content', 'hello'], out)\n"
        "main(['status', ws, '--json'], out)\n"
        "main(['heartbeat', ws, 'show'], out)\n"
        "import memoryd.daemon\n"
        "heavy = ('sqlite3', 'mcp', 'memoryd.search.archive', 'memoryd.search.archive_index',"
        " 'memoryd.mcp_server.server')\n"
        "loaded = [m for m in sys.modules if m in heavy or m.split('.')[0] in heavy[:2]]\n"
        "print(json.dumps(sorted(loaded)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
