"""The daemon in process: a Supervisor stepped by hand (no signal), the pure classifier
and split, and what the daemon process imports."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    children,
    cmdline,
    pool_workers,
    read_heartbeat,
    read_state,
    wait_until,
)
from daemon_workspaces import (
    append_lines,
    assert_each_line_once,
    types,
    write_lines,
)
from structlog.testing import capture_logs
from writers import line_bytes

from memoryd.compaction.job.request import JobResult
from memoryd.compaction.strategies import STRATEGIES
from memoryd.compaction.strategies.narrative import Narrative, narrative_split
from memoryd.config.settings import load_settings
from memoryd.conversation.lines import split_lines
from memoryd.daemon.fs_events import classify
from memoryd.daemon.hooks import DaemonHooks
from memoryd.daemon.supervisor import Supervisor
from memoryd.daemon.tracked import Tracked
from memoryd.files.fsutil import pid_alive

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "memoryd.service"


# ----- 11. in process: the stepped supervisor and the pure classifier --------------------------


def _stepped_supervisor(tmp_path: Path, root: Path) -> Supervisor:
    """A one-worker Supervisor on ``root`` (made here), extractive, with a 2,000-token
    budget and no coalescing: for a test to step with ``loop()``."""
    root.mkdir()
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {
        "roots": [str(root)],
        "workers": 1,
        "token_limit": 2000,
        "coalesce_ms": 0,
        "drain_seconds": 0,
        "summarizer.backend": "extractive",
        "summarizer.max_summary_tokens": 200,
    }
    return Supervisor(load_settings(overrides=overrides, env=env), env=env)


def test_supervisor_loop_can_be_stepped_in_process(tmp_path: Path, info_logs: None) -> None:
    """A Supervisor built from load_settings(overrides) and stepped with loop() finds a
    workspace created after start() (state.json appears), and runs its job to completion
    once appends cross the trigger — no subprocess, no signal. close() leaves no worker,
    forkserver or resource tracker running."""
    root = tmp_path / "root"
    supervisor = _stepped_supervisor(tmp_path, root)

    def step() -> bool:
        supervisor.loop(wait=0.05)
        return False

    with capture_logs() as logs:
        try:
            supervisor.start()
            ws = root / "ws"
            write_lines(ws, "w", 3)
            wait_until(lambda: step() or read_state(ws), 10, "state.json", interval=0)
            assert read_state(ws)["messages"] == 3  # type: ignore[index]
            assert ws in supervisor.scheduler

            append_lines(ws, "w", 3, 37)
            wait_until(
                lambda: step() or read_heartbeat(ws).get("status") == "completed",
                30,
                "the job to complete",
                interval=0,
            )
            job = supervisor.scheduler.get(ws)
            assert job is not None
            wait_until(lambda: step() or not job.running, 10, "job done", 0)
            helpers = [
                pid for pid in children(os.getpid()) if "multiprocessing.forkserver" in cmdline(pid)
            ]
            workers = pool_workers(os.getpid())
        finally:
            supervisor.close()
    # systemd SIGKILLs whatever outlives the daemon: close() stops the forkserver too, not
    # only the workers (the resource tracker, which this test process shares, is stopped
    # by run_daemon at the process's exit: test_pool_workers.py, test_daemon_systemd.py).
    assert len(helpers) == 1 and workers
    assert not [pid for pid in [*helpers, *workers] if pid_alive(pid)]
    assert types(ws, "summarize_started", "summarize_completed") == [
        "summarize_started",
        "summarize_completed",
    ]
    assert_each_line_once(ws, {"w": 40}, ordered=True)
    dispatched = [e for e in logs if e["event"] == "summarize_dispatched"]
    assert len(dispatched) == 1
    assert dispatched[0]["workspace"] == str(ws)


def test_a_job_in_flight_is_one_record_from_dispatch_to_outcome(
    tmp_path: Path, info_logs: None
) -> None:
    """The dispatcher's record of a job in flight is the one its workspace points at: its
    workspace, its kind, no LLM request held (extractive), a check-in due; once the job
    ended, neither holds it and the workspace is idle again."""
    root = tmp_path / "root"
    supervisor = _stepped_supervisor(tmp_path, root)
    jobs = supervisor.dispatcher.jobs

    def step() -> bool:
        supervisor.loop(wait=0.05)
        return False

    try:
        supervisor.start()
        ws = root / "ws"
        write_lines(ws, "w", 3)
        wait_until(lambda: step() or ws in supervisor.scheduler, 10, "ws")
        append_lines(ws, "w", 3, 37)
        wait_until(lambda: step() or ws in jobs, 10, "the dispatch", 0)
        tracked = supervisor.scheduler.get(ws)
        job = jobs[ws]
        assert tracked is not None and tracked.job is job and tracked.running
        assert (job.workspace, job.kind, job.backend) == (ws, "summarize", None)
        assert job.checkin_at is not None
        assert supervisor.dispatcher.checkin_deadlines() == [job.checkin_at]
        state = read_state(ws)
        assert state is not None and state["summarizing"] is True
        wait_until(lambda: step() or not jobs, 30, "the job's end", 0)
        assert tracked.job is None and not tracked.running
        assert supervisor.dispatcher.checkin_deadlines() == []
        state = read_state(ws)
        assert state is not None and state["summarizing"] is False
    finally:
        supervisor.close()
    assert types(ws, "summarize_started", "summarize_completed") == [
        "summarize_started",
        "summarize_completed",
    ]


def test_job_finished_is_logged_once_every_hook_has_seen_the_job(
    tmp_path: Path, info_logs: None
) -> None:
    """Whoever reads a ``job_finished`` line finds the job's effects settled: the hooks
    (the spend ledger, the metrics) have seen the job before the line is logged."""
    root = tmp_path / "root"
    supervisor = _stepped_supervisor(tmp_path, root)
    seen: list[list[str]] = []

    class Recorder(DaemonHooks):
        def finished(self, tracked: Tracked, result: JobResult, now: float) -> None:
            seen.append(
                [e["event"] for e in logs if e.get("workspace") == str(tracked.workspace.path)]
            )

    supervisor.hooks.append(Recorder())
    with capture_logs() as logs:
        try:
            supervisor.start()
            ws = root / "ws"
            write_lines(ws, "w", 40)

            def finished() -> bool:
                supervisor.loop(wait=0.05)
                return any(e["event"] == "job_finished" for e in logs)

            wait_until(finished, 30, "job_finished", interval=0)
        finally:
            supervisor.close()
    assert len(seen) == 1
    assert "job_finished" not in seen[0]
    assert "summarize_dispatched" in seen[0]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_discovery_recovers_leftovers_unless_a_job_holds_the_workspace(
    tmp_path: Path, info_logs: None
) -> None:
    """At discovery the supervisor cleans what an interrupted commit left (a temp file and
    a pending archive of a dead process), except in a workspace whose job lock is held
    (a job of another process may be mid-commit there)."""
    root = tmp_path / "root"
    dead = _dead_pid()
    leftovers = {}
    for name in ("free", "busy"):
        ws = root / name
        write_lines(ws, "w", 3)
        (ws / ".memoryd" / "archive").mkdir(parents=True)
        temp = ws / f".conversation.jsonl.memoryd-tmp-{dead}-0badf00d"
        temp.write_bytes(b"half a file")
        pending = ws / ".memoryd" / "archive" / f"conversation-x.jsonl.{dead}.1.pending"
        pending.write_bytes(line_bytes("w", 0))
        leftovers[name] = (temp, pending)
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {"roots": [str(root)], "workers": 1, "summarizer.backend": "extractive"}
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    lock_fd = os.open(root / "busy" / ".memoryd" / "job.lock", os.O_RDWR | os.O_CREAT, 0o644)
    with capture_logs() as logs:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            supervisor.start()
            for _ in range(3):
                supervisor.loop(wait=0.01)
            assert not supervisor.workspaces.pending_init
        finally:
            os.close(lock_fd)
            supervisor.close()
    assert not any(p.exists() for p in leftovers["free"])
    assert all(p.exists() for p in leftovers["busy"])
    assert (root / "free" / "conversation.jsonl").read_bytes().count(b"\n") == 3
    recovered = [e for e in logs if e["event"] == "leftovers_recovered"]
    cleaned = [
        (e["workspace"], e["temp_files_removed"], e["archives_discarded"]) for e in recovered
    ]
    assert cleaned == [(str(root / "free"), 1, 1)]
    assert [e["workspace"] for e in logs if e["event"] == "workspace_busy"] == [str(root / "busy")]


@pytest.mark.parametrize(
    ("relative", "is_folder", "expected"),
    [
        ("ws/conversation.jsonl", False, ("conversation", "ws")),
        ("a/b/c/d/conversation.jsonl", False, ("conversation", "a/b/c/d")),
        ("a/b/c/d/e/conversation.jsonl", False, ("ignore", "a/b/c/d/e/conversation.jsonl")),
        ("ws/memory/bookmarks.jsonl", False, ("store", "ws")),
        ("ws/.memoryd/state.json", False, ("ignore", "ws/.memoryd/state.json")),
        ("ws/.memoryd/archive", True, ("ignore", "ws/.memoryd/archive")),
        (
            "ws/.conversation.jsonl.memoryd-tmp-12-ab",
            False,
            ("ignore", "ws/.conversation.jsonl.memoryd-tmp-12-ab"),
        ),
        ("ws/HEARTBEAT.md", False, ("ignore", "ws/HEARTBEAT.md")),
        ("team", True, ("folder", "team")),
        ("team/new", True, ("folder", "team/new")),
        (".hidden", True, ("ignore", ".hidden")),
        ("a/b/c/d/e", True, ("ignore", "a/b/c/d/e")),
    ],
)
def test_classify_names_what_a_changed_path_means(
    tmp_path: Path, relative: str, is_folder: bool, expected: tuple[str, str]
) -> None:
    """classify (pure): conversations and stores name their workspace, folders within
    max_depth may hold new workspaces, memoryd's own files and temp files are ignored."""
    root = tmp_path / "root"
    kind, target = classify(root / relative, is_folder, root, 4)
    assert (kind, target) == (expected[0], root / expected[1])


def test_narrative_split_caps_the_kept_part_of_a_conversation_far_past_its_budget() -> None:
    """(pure) When writers outran the daemon and a conversation stands far past its
    trigger, the 40% kept by count would still be over it; the kept part is capped so one
    job lands below the trigger, instead of an ineffective job that stops all jobs."""
    data = b"".join(line_bytes("w", n) for n in range(200))
    lines = list(split_lines(data, 1 << 20))
    uncapped = narrative_split(lines, 0.40)
    assert uncapped is not None and uncapped.keep_from == 120
    cap = 1000
    assert uncapped.kept_tokens > cap
    capped = narrative_split(lines, 0.40, max_kept_tokens=cap)
    assert capped is not None
    assert capped.kept_tokens <= cap < capped.kept_tokens + lines[capped.keep_from - 1].tokens
    small = narrative_split(lines[:10], 0.40, max_kept_tokens=cap)
    assert small is not None and small.keep_from == 6  # under the cap: 60/40 by count


def test_classify_ignores_paths_outside_the_root(tmp_path: Path) -> None:
    """A path that is not under the root is never a workspace."""
    outside = tmp_path / "elsewhere" / "conversation.jsonl"
    assert classify(outside, False, tmp_path / "root", 4) == ("ignore", outside)


def test_an_unreadable_conversation_is_logged_and_the_daemon_carries_on(
    tmp_path: Path, info_logs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation.jsonl the daemon may not read (EACCES; simulated, as the tests run
    as root and root reads everything) gives one conversation_unreadable warning; the loop
    goes on and the other workspace is still counted."""
    root = tmp_path / "root"
    write_lines(root / "locked", "w", 3)
    write_lines(root / "open", "w", 3)
    locked = str(root / "locked" / "conversation.jsonl")
    real_open = os.open

    def deny(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", locked)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr("memoryd.conversation.lines.os.open", deny)
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {"roots": [str(root)], "workers": 1, "coalesce_ms": 0}
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    with capture_logs() as logs:
        try:
            supervisor.start()

            def step_until_counted() -> dict[str, Any] | None:
                supervisor.loop(wait=0.05)
                return read_state(root / "open")

            wait_until(step_until_counted, 10, "state", 0)
        finally:
            supervisor.close()
    unreadable = [e for e in logs if e["event"] == "conversation_unreadable"]
    assert [e["workspace"] for e in unreadable] == [str(root / "locked")]
    assert "Permission denied" in unreadable[0]["error"]
    assert read_state(root / "open")["messages"] == 3  # type: ignore[index]


def test_the_daemon_process_never_imports_the_anthropic_sdk(tmp_path: Path) -> None:
    """The daemon (configured for the anthropic backend, with a workspace to watch) starts
    and runs its loop without importing the SDK: only a worker running a job needs it."""
    root = tmp_path / "root"
    write_lines(root / "ws", "w", 3)
    script = (
        "import sys\n"
        "from memoryd.config.settings import load_settings\n"
        "from memoryd.daemon.supervisor import Supervisor\n"
        "if __name__ == '__main__':\n"
        f"    env = {{'HOME': {str(tmp_path)!r}, 'ANTHROPIC_API_KEY': 'sk-ant-x'}}\n"
        f"    overrides = {{'roots': [{str(root)!r}], 'summarizer.backend': 'anthropic'}}\n"
        "    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)\n"
        "    supervisor.start()\n"
        "    for _ in range(5):\n"
        "        supervisor.loop(wait=0.05)\n"
        "    supervisor.close()\n"
        "    print(sorted(m for m in sys.modules if m.split('.')[0] == 'anthropic'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().strip().splitlines()[-1] == "[]"


def test_a_symlinked_workspace_is_skipped_with_one_log_line(
    tmp_path: Path, info_logs: None
) -> None:
    """A workspace reached through a symlinked folder, and one whose conversation.jsonl
    is a symlink, are not taken (never followed), and each is said once, however many
    rescans pass."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    write_lines(outside, "w", 3)
    write_lines(root / "real", "w", 3)
    root.joinpath("link").symlink_to(outside)
    (root / "linked-file").mkdir()
    (root / "linked-file" / "conversation.jsonl").symlink_to(outside / "conversation.jsonl")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {"roots": [str(root)], "workers": 1, "coalesce_ms": 0}
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    with capture_logs() as logs:
        try:
            supervisor.start()

            def step_until_counted() -> dict[str, Any] | None:
                supervisor.loop(wait=0.05)
                return read_state(root / "real")

            wait_until(step_until_counted, 10, "state", 0)
            supervisor.workspaces.rescan(0.0)
            supervisor.workspaces.rescan(0.0)
        finally:
            supervisor.close()
    skipped = [(e["workspace"], e["reason"]) for e in logs if e["event"] == "workspace_skipped"]
    assert sorted(skipped) == [
        (str(root / "link"), "a symlinked folder (never followed out of a root)"),
        (str(root / "linked-file"), "its conversation.jsonl is a symlink (never followed)"),
    ]
    assert root / "link" not in supervisor.scheduler


def test_the_daemon_asks_the_strategy_whether_it_reads_each_lines_tokens(
    tmp_path: Path, info_logs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start the daemon takes back the counts it saved, unless the workspace's
    strategy says its due check reads each line's tokens (which are not saved): the
    daemon asks the strategy, whatever its name."""
    root = tmp_path / "root"
    ws = root / "ws"
    write_lines(ws, "w", 3)
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {"roots": [str(root)], "workers": 1, "coalesce_ms": 0}

    def counted_line_by_line() -> bool:
        supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
        try:
            supervisor.start()

            def step_until_counted() -> dict[str, Any] | None:
                supervisor.loop(wait=0.05)
                return read_state(ws)

            wait_until(step_until_counted, 10, "state", 0)
            tracked = supervisor.scheduler.get(ws)
            assert tracked is not None
            return tracked.reader.tally.per_line
        finally:
            supervisor.close()

    counted_line_by_line()  # saves the counts in state.json
    assert not counted_line_by_line()  # narrative's due check reads totals: taken back

    class LineTokens(Narrative):
        needs_line_tokens = True

    monkeypatch.setitem(STRATEGIES, "narrative", LineTokens)
    assert counted_line_by_line()
