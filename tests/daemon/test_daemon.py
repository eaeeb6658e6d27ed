"""The daemon end to end: ``memoryd run`` as a real subprocess, a real fake Messages API
server, real writer processes: discovery, concurrent writers, one giant message, the logs,
memory stores, inotify limits, rolling and checkpoint workspaces. Signals, systemd and the
in-process supervisor have their own files (test_daemon_signals.py, test_daemon_systemd.py,
test_daemon_inprocess.py); a bad workspace or a full disk, test_daemon_hardening.py.

Each test's name and docstring state what it proves. The end-to-end tests start real
processes and so are marked ``slow``; they still run in the default ``pytest`` run.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    API_KEY,
    Processes,
    llm_env,
    pool_workers,
    read_events,
    read_heartbeat,
    read_state,
    wait_until,
    workspace_lines,
    writer_ids,
)
from daemon_workspaces import (
    assert_each_line_once,
    complete_lines,
    event_time,
    state_is,
    stray_files,
    types,
    wait_settled,
    write_lines,
)
from fake_anthropic import FakeAnthropic, Reply

from memoryd import cli
from memoryd.conversation.lines import split_lines

REPO = Path(__file__).resolve().parents[2]


# ----- 1. a dropped-in folder is discovered and summarized -----------------------------------


@pytest.mark.slow
def test_dropped_in_workspaces_are_summarized_with_a_live_heartbeat_and_agreeing_state(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """Folders created, mv-ed and cp -r-ed into a root at depth 2 become workspaces; when
    appends cross the trigger each is summarized; HEARTBEAT.md goes active, its check-ins
    advance last_checkin while the (slow) LLM works, then completed; state.json and
    events.jsonl agree, and threshold_changed is logged only when the level changes."""
    llm.latency = 1.5
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "team").mkdir(parents=True)
    limit = 3000
    daemon = procs.daemon(
        [root],
        tmp_path,
        llm_env(llm.base_url, token_limit=str(limit), coalesce_ms="50", checkin_interval="0.3"),
    )
    daemon.wait_ready()

    created = root / "team" / "created"
    write_lines(created, "seed", 5)
    write_lines(outside / "moved", "seed", 5)
    subprocess.run(["mv", str(outside / "moved"), str(root / "team" / "moved")], check=True)
    write_lines(outside / "copied", "seed", 5)
    subprocess.run(["cp", "-r", str(outside / "copied"), str(root / "team" / "copied")], check=True)
    workspaces = [root / "team" / name for name in ("created", "moved", "copied")]
    for ws in workspaces:
        wait_until(state_is(ws, "messages", 5), 5, f"{ws.name} found")
        assert read_state(ws)["level"] == "normal"  # type: ignore[index]
        daemon.wait_log("workspace_discovered", workspace=str(ws))

    writers = [procs.writer(ws, "w", 40) for ws in workspaces]
    for writer in writers:
        assert writer.wait(30) == 0

    seen: dict[Path, list[dict[str, str]]] = {ws: [] for ws in workspaces}

    def all_completed() -> bool:
        for ws in workspaces:
            beat = read_heartbeat(ws)
            if beat and (not seen[ws] or seen[ws][-1] != beat):
                seen[ws].append(beat)
        return all(
            any(b["status"] == "active" for b in seen[ws]) and seen[ws][-1]["status"] == "completed"
            for ws in workspaces
        )

    wait_until(all_completed, 40, "every heartbeat active then completed", interval=0.02)
    for ws in workspaces:
        wait_settled(ws, limit)
        states = [b["status"] for b in seen[ws]]
        first_active = states.index("active")
        assert "completed" in states[first_active:], states
        checkins = {b["last_checkin"] for b in seen[ws] if b["status"] == "active"}
        assert len(checkins) >= 2, f"{ws.name}: last_checkin never advanced while active"
        final = read_heartbeat(ws)
        assert final["status"] == "completed"
        # What was done and why, then what the summary replaced.
        assert final["last_result"].startswith("summarized "), final["last_result"]
        assert ": replaced " in final["last_result"]

        events = read_events(ws)
        jobs = [e["type"] for e in events if e["type"].startswith("summarize_")]
        assert jobs and jobs == ["summarize_started", "summarize_completed"] * (len(jobs) // 2)
        levels = [e for e in events if e["type"] == "threshold_changed"]
        for before, after in itertools.pairwise(levels):
            assert before["level"] != after["level"], "threshold_changed without a change"
            assert after["previous"] == before["level"]
        state = read_state(ws)
        assert state is not None
        assert state["workspace"] == str(ws)
        assert state["token_limit"] == limit
        assert state["summarizing"] is False
        assert state["last_summary_at"] is not None
        assert state["messages"] == complete_lines(ws)
        assert state["level"] == (levels[-1]["level"] if levels else "normal")
        assert state["usage_ratio"] == round(state["tokens"] / limit, 4)
        completed = [e for e in events if e["type"] == "summarize_completed"]
        assert all(e["messages_after"] < e["messages_before"] for e in completed)
        assert_each_line_once(ws, {"seed": 5, "w": 40}, ordered=True)
        assert not stray_files(ws)


# ----- 2. concurrent writers through repeated rewrites ---------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("lock", [True, False], ids=["locking", "not-locking"])
def test_three_writers_lose_nothing_through_repeated_rewrites(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic, lock: bool
) -> None:
    """Three writer processes append (under the lock, or open-append-close without it)
    while a slow LLM makes the daemon rewrite the file at least twice during the run:
    every line ends up in the live file or the archive exactly once; locking writers'
    lines also keep their order."""
    llm.latency = 0.4
    root = tmp_path / "root"
    ws = root / "ws"
    ws.mkdir(parents=True)
    (ws / "conversation.jsonl").touch()
    limit = 4000
    # The scripted summary keeps no detail: without this the retention check would add a
    # repair request (a second slow call) to every job, and this test counts rewrites.
    env = llm_env(
        llm.base_url, token_limit=str(limit), coalesce_ms="20", summarizer__min_retention="0"
    )
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()

    # About 8 s of writing a round: a job takes 0.5-2.5 s on a loaded machine. On a busier
    # one, another round of three writers starts at once, until two rewrites committed
    # while writers were running.
    count = 200
    written: dict[str, int] = {}
    rounds: list[tuple[float, float]] = []
    during: list[dict[str, Any]] = []
    while len(during) < 2 and len(rounds) < 6:
        started = time.time()
        names = [f"w{i}r{len(rounds)}" for i in range(3)]
        writers = [procs.writer(ws, name, count, delay=0.04, lock=lock) for name in names]
        for writer in writers:
            assert writer.wait(60) == 0
        rounds.append((started, time.time()))
        written.update(dict.fromkeys(names, count))
        # A rewrite is a committed job: completed, or ineffective with an archive (the
        # writers may append enough meanwhile to leave usage above the trigger; one event
        # per job).
        during = [
            e
            for e in read_events(ws)
            if e["type"].startswith("summarize_")
            and "archive" in e
            and any(start <= event_time(e) <= end for start, end in rounds)
        ]
    wait_settled(ws, limit)

    assert len(during) >= 2, "fewer than two rewrites while the writers ran"
    assert "summarize_failed" not in types(ws)
    assert_each_line_once(ws, written, ordered=lock)
    assert not stray_files(ws)


# ----- 7. one giant message -----------------------------------------------------------------


@pytest.mark.slow
def test_a_message_larger_than_the_budget_does_not_cause_a_summarization_loop(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """A single recent message larger than the whole budget: the job that summarizes
    everything before it is ineffective (one summarize_ineffective), and over several
    seconds of further tiny appends there are at most two summarize_started; the giant
    message itself is kept, byte for byte."""
    root = tmp_path / "root"
    ws = root / "ws"
    write_lines(ws, "w", 10)
    limit = 2000
    env = llm_env(llm.base_url, token_limit=str(limit), coalesce_ms="20")
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    giant = {"id": "giant-0", "role": "user", "content": "enormous " * 1200, "timestamp": 1}
    giant_line = json.dumps(giant).encode() + b"\n"
    with (ws / "conversation.jsonl").open("ab") as file:
        file.write(giant_line)
    daemon.wait_log("job_finished", workspace=str(ws), timeout=20)
    for n in range(12):
        tiny = {"id": f"tiny-{n}", "role": "user", "content": "ok", "timestamp": n}
        with (ws / "conversation.jsonl").open("ab") as file:
            file.write(json.dumps(tiny).encode() + b"\n")
        time.sleep(0.4)  # one append per coalescing window, as an agent would, for ~5 s

    def last_append_judged() -> bool:
        """The daemon counted every line of the file (and so decided about the last
        append) and runs no job."""
        state = read_state(ws)
        live = workspace_lines(ws)[1]
        return state is not None and not state["summarizing"] and state["messages"] == len(live)

    wait_until(last_append_judged, 10, "the last append counted, no job running")

    kinds = Counter(types(ws))
    assert kinds["summarize_ineffective"] == 1
    assert kinds["summarize_started"] <= 2
    finished = daemon.logged("job_finished", workspace=str(ws))
    assert finished[0]["outcome"] == "ineffective"
    assert len(finished) <= 2
    assert len(daemon.logged("summarize_dispatched", workspace=str(ws))) <= 2
    archived, live = workspace_lines(ws)
    assert live.count(giant_line.rstrip(b"\n")) == 1
    ids = Counter(writer_ids(archived + live))
    assert all(ids[f"tiny-{n}"] == 1 for n in range(12))
    assert all(ids[f"w-{n}"] == 1 for n in range(10))


# ----- 8. logs ------------------------------------------------------------------------------


@pytest.mark.slow
def test_logs_are_json_objects_without_message_text_or_api_key(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """Every stdout line of the daemon and its workers is one JSON object with timestamp,
    level and event; no line (stdout or stderr) holds the API key or any message text,
    even after a job that sent the messages to the LLM with that key."""
    root = tmp_path / "root"
    ws = root / "ws"
    secret_words = ("xylophonequokka", "marzipanvortex", "periwinkleoboe")
    ws.mkdir(parents=True)
    lines = [
        json.dumps(
            {
                "id": f"m{n}",
                "role": "user" if n % 2 == 0 else "assistant",
                "content": f"{secret_words[n % 3]} " * 60,
                "timestamp": n,
            }
        ).encode()
        + b"\n"
        for n in range(20)
    ]
    (ws / "conversation.jsonl").write_bytes(b"".join(lines))
    env = llm_env(llm.base_url, token_limit="5500")
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    daemon.wait_log("summarize_completed", workspace=str(ws))
    headers = llm.message_requests[0].headers
    sent = (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert API_KEY in sent, "the job did not use the configured key"
    daemon.send(signal.SIGTERM)
    assert daemon.wait_exit(20) == 0

    assert daemon.lines
    for line in daemon.lines:
        record = json.loads(line)
        assert isinstance(record, dict)
        assert {"timestamp", "level", "event"} <= record.keys(), line
    everything = daemon.log_text() + daemon.stderr.decode(errors="replace")
    assert API_KEY not in everything
    assert API_KEY[-8:] not in everything
    for word in secret_words:
        assert word not in everything
    assert daemon.stderr == b""


# ----- 10. memory stores --------------------------------------------------------------------


@pytest.mark.slow
def test_the_daemon_compacts_a_memory_store_past_its_threshold(
    tmp_path: Path, procs: Processes, capsys: pytest.CaptureFixture[str]
) -> None:
    """With memory.threshold=5, twelve bookmarks written by ``memoryd memory write`` make
    the daemon compact the store in the background (event memory_compacted): the newest
    bookmarks stay, the older ones become summary lines, their originals are archived."""
    root = tmp_path / "root"
    ws = root / "ws"
    write_lines(ws, "w", 2)
    env = {"MEMORYD_SUMMARIZER__BACKEND": "extractive", "MEMORYD_MEMORY__THRESHOLD": "5"}
    daemon = procs.daemon([root], tmp_path, {**env, "MEMORYD_COALESCE_MS": "20"})
    daemon.wait_ready()
    for n in range(12):
        entry = json.dumps({"phase": 11, "plan": n, "task": 3, "status": "paused"})
        argv = ["memory", "write", "--store", "bookmarks", "--entry", entry]
        assert cli.main([*argv, "--workspace", str(ws)]) == 0
    capsys.readouterr()

    wait_until(lambda: "memory_compacted" in types(ws), 20, "event memory_compacted")
    logged = daemon.wait_log("memory_compacted", workspace=str(ws))
    # The log line carries the report's figures (totals over bookmarks and todos).
    assert logged["compacted"] is True
    assert logged["stores"] == 2
    assert logged["summarized"] >= 1
    assert logged["entries_before"] == logged["entries_after"] >= 1
    store = ws / "memory" / "bookmarks.jsonl"

    def compacted() -> bool:
        rows = [json.loads(x) for x in store.read_bytes().splitlines()]
        done = read_heartbeat(ws).get("status") == "completed"
        return done and sum(1 for r in rows if "summary" in r) == 2

    wait_until(compacted, 20, "the two oldest bookmarks summarized, the job completed")
    assert re.fullmatch(
        r"compacted memory stores: [12] entr(y|ies) summarized \(bookmarks [12]\)",
        read_heartbeat(ws)["last_result"],
    )
    rows = [json.loads(x) for x in store.read_bytes().splitlines()]
    assert [r["plan"] for r in rows if "summary" not in r] == list(range(2, 12))
    archived = [
        json.loads(x)
        for path in (ws / ".memoryd" / "archive").glob("memory-bookmarks-*.jsonl")
        for x in path.read_bytes().splitlines()
    ]
    assert sorted(r["plan"] for r in archived) == [0, 1]


@pytest.mark.slow
def test_pool_workers_do_not_outlive_a_sigkilled_daemon(tmp_path: Path, procs: Processes) -> None:
    """Workers ignore SIGTERM (only the daemon decides), so after a SIGKILL of the daemon
    they must notice on their own that their parent is gone and exit, not linger."""
    root = tmp_path / "root"
    write_lines(root / "a", "w", 45)
    write_lines(root / "b", "w", 45)
    env = {"MEMORYD_SUMMARIZER__BACKEND": "extractive", "MEMORYD_TOKEN_LIMIT": "3000"}
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    daemon.wait_log("job_finished", count=2)
    wait_until(lambda: pool_workers(daemon.pid), 20, "pool workers (they outlive their job)")
    workers = pool_workers(daemon.pid)
    os.kill(daemon.pid, signal.SIGKILL)

    def gone() -> bool:
        return all(not Path(f"/proc/{pid}").exists() or " Z " in _stat(pid) for pid in workers)

    wait_until(gone, 10, "the orphaned workers to exit")


def _stat(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return " Z "
    return text[text.rfind(")") + 1 :][:3]


MAX_WATCHES = Path("/proc/sys/fs/inotify/max_user_watches")


@pytest.mark.slow
def test_out_of_inotify_watches_falls_back_to_polling_with_one_warning(
    tmp_path: Path, procs: Processes
) -> None:
    """With fs.inotify.max_user_watches too small for the root's folders (lowered for
    the length of the test, then restored), the daemon logs one inotify_limit_reached
    warning with the sysctl to raise, polls the root, and still finds folders dropped in."""
    if not os.access(MAX_WATCHES, os.W_OK):
        pytest.skip("changing fs.inotify.max_user_watches needs root")
    root = tmp_path / "root"
    for name in ("a/b/c", "d/e", "f"):
        (root / name).mkdir(parents=True)
    saved = MAX_WATCHES.read_text()
    MAX_WATCHES.write_text("3\n")
    try:
        daemon = procs.daemon([root], tmp_path, {"MEMORYD_SUMMARIZER__BACKEND": "extractive"})
        ready = daemon.wait_ready()
    finally:
        MAX_WATCHES.write_text(saved)
    assert ready["polling"] == [str(root)]
    warnings = daemon.logged("inotify_limit_reached")
    assert len(warnings) == 1
    assert warnings[0]["level"] == "warning"
    assert "fs.inotify.max_user_watches" in warnings[0]["hint"]
    # The first scan's failed watches also make the daemon walk the root once, soon after
    # it is ready: a folder dropped before that walk may be found by it (and counted in
    # its summary line) rather than by the poller. Once the first folder is tracked, that
    # walk is over, and the second can be found only by polling.
    first, second = root / "dropped" / "ws", root / "later" / "ws"
    write_lines(first, "w", 3)
    wait_until(lambda: read_state(first), 20, "the first dropped folder tracked")
    write_lines(second, "w", 3)
    daemon.wait_log("workspace_discovered", 10, workspace=str(second))


@pytest.mark.slow
def test_rolling_and_checkpoint_workspaces_in_the_daemon_survive_llm_failures(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """Through the daemon and the fake Messages API: a rolling and a checkpoint workspace
    (chosen in their .memoryd/config.toml) whose jobs fail — HTTP 500, then a malformed
    checkpoint answer — keep every file byte-identical with HEARTBEAT failed; once the
    server answers well, the rolling summary and checkpoint.json appear."""
    root = tmp_path / "root"
    rolling, checkpoint = root / "rolling", root / "checkpoint"
    write_lines(rolling, "r", 40)
    write_lines(checkpoint, "c", 40)
    tokens = sum(line.tokens for line in split_lines(conversation_bytes(checkpoint), 1 << 20))
    for ws, config in (
        (rolling, 'strategy = "rolling"\n[rolling]\ntoken_threshold = 10\n'),
        (checkpoint, f'strategy = "checkpoint"\ntoken_limit = {int(tokens / 0.95)}\n'),
    ):
        (ws / ".memoryd").mkdir()
        (ws / ".memoryd" / "config.toml").write_text(config)
    before = {ws: conversation_bytes(ws) for ws in (rolling, checkpoint)}
    llm.set_default(Reply.error(500))
    env = llm_env(llm.base_url, max_consecutive_failures="50", drain_seconds="0")
    procs.daemon([root], tmp_path, env)

    def failed(ws: Path, reason: str) -> bool:
        return any(
            e["type"] == "summarize_failed" and reason in e["reason"] for e in read_events(ws)
        )

    def untouched(ws: Path) -> None:
        assert conversation_bytes(ws) == before[ws]
        assert read_heartbeat(ws)["status"] == "failed"
        archive = ws / ".memoryd" / "archive"
        assert not archive.exists() or not any(archive.iterdir())
        assert not (ws / "checkpoint.json").exists()

    wait_until(lambda: failed(rolling, "500") and failed(checkpoint, "500"), 30, "HTTP 500s")
    untouched(rolling)
    untouched(checkpoint)

    def answer(request: Mapping[str, Any]) -> str:
        if "structured checkpoint" in str(request.get("system", "")):
            return "{not json"
        return "The user discussed the rolling topic in a calm tone."

    llm.set_default(Reply.ok(answer))
    wait_until(lambda: failed(checkpoint, "not valid JSON"), 30, "a malformed checkpoint answer")
    untouched(checkpoint)
    wait_until(lambda: b'"isSummary":true' in conversation_bytes(rolling), 30, "rolling summary")

    llm.set_default(Reply.ok(json.dumps({**EMPTY_CHECKPOINT, "decisions": ["Use SQLite."]})))
    wait_until((checkpoint / "checkpoint.json").exists, 30, "checkpoint.json")
    saved = json.loads((checkpoint / "checkpoint.json").read_bytes())
    assert saved["version"] == 1 and saved["decisions"] == ["Use SQLite."]


EMPTY_CHECKPOINT: dict[str, list[str]] = {
    "completed": [],
    "in_progress": [],
    "pending": [],
    "blockers": [],
}


def conversation_bytes(workspace: Path) -> bytes:
    return (workspace / "conversation.jsonl").read_bytes()
