"""The daemon end to end: ``memoryd run`` as a real subprocess, a real fake Messages API
server, real writer processes, real signals; plus a stepped in-process Supervisor.

Each test's name and docstring state what it proves. The end-to-end tests start real
processes and so are marked ``slow``; they still run in the default ``pytest`` run.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import logging
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from daemon_harness import (
    API_KEY,
    Processes,
    group_members,
    llm_env,
    pid_talking_to,
    pool_workers,
    read_events,
    read_heartbeat,
    read_state,
    wait_until,
    workspace_lines,
    writer_ids,
)
from fake_anthropic import FakeAnthropic, Reply
from structlog.testing import capture_logs
from writers import line_bytes

from memoryd import cli
from memoryd.config import load_settings
from memoryd.conversation import split_lines
from memoryd.daemon import Supervisor
from memoryd.fsutil import pid_alive
from memoryd.receipts import read_receipts
from memoryd.strategies.narrative import narrative_split
from memoryd.watch import classify
from memoryd.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "systemd" / "memoryd.service"
TRIGGER = 0.80


# ----- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def llm(fake_anthropic: FakeAnthropic) -> FakeAnthropic:
    """The fake Messages API server, answering a digest of each transcript."""
    fake_anthropic.set_default(Reply.echo())
    return fake_anthropic


@pytest.fixture
def info_logs() -> None:
    """Info events reach ``capture_logs`` whatever an earlier test configured (conftest's
    ``_restore_logging`` puts the configuration back afterwards)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))


def write_lines(workspace: Path, writer: str, count: int, start: int = 0) -> None:
    """Write ``count`` writers.py-style lines into a new conversation.jsonl."""
    workspace.mkdir(parents=True, exist_ok=True)
    data = b"".join(line_bytes(writer, n) for n in range(start, start + count))
    (workspace / "conversation.jsonl").write_bytes(data)


def append_lines(workspace: Path, writer: str, start: int, count: int) -> None:
    """Append lines ``start`` .. ``start + count - 1`` of ``writer`` to the conversation."""
    with (workspace / "conversation.jsonl").open("ab") as file:
        file.write(b"".join(line_bytes(writer, n) for n in range(start, start + count)))


def complete_lines(workspace: Path) -> int:
    return (workspace / "conversation.jsonl").read_bytes().count(b"\n")


def types(workspace: Path, *wanted: str) -> list[str]:
    return [e["type"] for e in read_events(workspace) if not wanted or e["type"] in wanted]


def state_is(workspace: Path, key: str, value: object) -> Callable[[], bool]:
    """A condition: state.json has ``key`` equal to ``value``."""
    return lambda: (read_state(workspace) or {}).get(key) == value


def event_seen(workspace: Path, type_: str) -> Callable[[], bool]:
    """A condition: events.jsonl holds an event of ``type_``."""
    return lambda: type_ in types(workspace)


def event_time(event: dict[str, Any]) -> float:
    moment = datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return moment.timestamp()


def settled(workspace: Path, token_limit: int, paired: bool = True) -> bool:
    """No job running or due: the numbers match the file and usage is below the trigger;
    with ``paired``, every summarize_started event has its completed or failed one."""
    state = read_state(workspace)
    if state is None or state["summarizing"]:
        return False
    if state["messages"] != complete_lines(workspace):
        return False
    if state["tokens"] > TRIGGER * token_limit:
        return False
    if read_heartbeat(workspace).get("status") in ("active", None):
        return False
    kinds = Counter(types(workspace))
    ended = kinds["summarize_completed"] + kinds["summarize_failed"]
    return not paired or kinds["summarize_started"] == ended


def wait_settled(
    workspace: Path, token_limit: int, timeout: float = 30, paired: bool = True
) -> None:
    """Wait until :func:`settled` holds for half a second in a row."""
    since: list[float] = []

    def steady() -> bool:
        if not settled(workspace, token_limit, paired):
            since.clear()
            return False
        since.append(time.monotonic())
        return since[-1] - since[0] >= 0.5

    try:
        wait_until(steady, timeout, f"{workspace.name} to settle", interval=0.05)
    except AssertionError as exc:
        state = read_state(workspace)
        kinds = Counter(types(workspace))
        raise AssertionError(
            f"{exc}: state {state}, {complete_lines(workspace)} lines, events {dict(kinds)}, "
            f"heartbeat {read_heartbeat(workspace)}"
        ) from None


def assert_each_line_once(
    workspace: Path, expected: dict[str, int], ordered: bool
) -> tuple[list[bytes], list[bytes]]:
    """Every line writer W wrote (``expected[W]`` of them) is in the live file or the
    archive exactly once; with ``ordered``, in the order W wrote them."""
    archived, live = workspace_lines(workspace)
    for line in archived + live:
        assert isinstance(json.loads(line), dict), f"not one JSON object: {line[:80]!r}"
    ids = list(writer_ids(archived + live))
    counts = Counter(ids)
    duplicated = {i: c for i, c in counts.items() if c > 1}
    assert not duplicated, f"duplicated lines: {sorted(duplicated)[:10]}"
    for writer, count in expected.items():
        wanted = [f"{writer}-{n}" for n in range(count)]
        missing = [i for i in wanted if i not in counts]
        assert not missing, f"lost lines of {writer}: {missing[:10]} ({len(missing)} in all)"
        if ordered:
            mine = [int(i.rsplit("-", 1)[1]) for i in ids if i.rsplit("-", 1)[0] == writer]
            assert mine == list(range(count)), f"{writer}'s lines are out of order"
    return archived, live


def stray_files(workspace: Path) -> list[str]:
    """memoryd temp files and pending archives anywhere in the workspace."""
    return sorted(
        str(p.relative_to(workspace))
        for p in workspace.rglob("*")
        if ".memoryd-tmp-" in p.name or p.name.endswith(".pending")
    )


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
        assert final["last_result"].startswith("replaced ")

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

    # About 8 s of writing: a job takes 0.5-2.5 s on a loaded machine.
    count = 200
    writers = [procs.writer(ws, f"w{i}", count, delay=0.04, lock=lock) for i in range(3)]
    for writer in writers:
        assert writer.wait(60) == 0
    writers_done = time.time()
    wait_settled(ws, limit)

    during = [e for e in read_events(ws) if e["type"] == "summarize_completed"]
    assert len([e for e in during if event_time(e) <= writers_done]) >= 2, (
        "fewer than two rewrites while the writers ran"
    )
    assert "summarize_failed" not in types(ws)
    assert_each_line_once(ws, {f"w{i}": count for i in range(3)}, ordered=lock)
    assert not stray_files(ws)


# ----- 3. SIGKILL of the daemon, again and again ---------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(170)
def test_sigkill_of_the_daemon_ten_times_loses_nothing_and_a_clean_start_tidies(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """The daemon is SIGKILLed at random moments ten times (during its start-up or while it
    works; every other time its workers too, as systemd does to a failed unit) while three
    writers keep appending; after a clean start, every line is in the live file or the
    archive once and in order, and no temp file or pending archive is left."""
    seed = int(os.environ.get("MEMORYD_TEST_SEED", "0")) or random.randrange(1 << 30)
    rng = random.Random(seed)
    llm.latency = 0.3
    root = tmp_path / "root"
    ws = root / "ws"
    ws.mkdir(parents=True)
    (ws / "conversation.jsonl").touch()
    limit = 3000
    env = llm_env(llm.base_url, token_limit=str(limit), coalesce_ms="20", drain_seconds="0.2")

    count = 400
    writers = [procs.writer(ws, f"w{i}", count, delay=0.07) for i in range(3)]
    kills = 0
    for cycle in range(10):
        daemon = procs.daemon([root], tmp_path, env)
        if cycle % 3 == 0:  # during the start-up scan
            time.sleep(rng.uniform(0.2, 1.8))
        else:  # while it works: dispatching, waiting for the LLM, committing
            daemon.wait_ready()
            time.sleep(rng.uniform(0.1, 2.5))
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.process.wait(10)  # type: ignore[union-attr]
        kills += 1
        if cycle % 2:
            daemon.kill_all()
    for writer in writers:
        assert writer.wait(60) == 0, f"seed {seed}"
    for daemon in procs.daemons:
        daemon.kill_all()
        assert not group_members(daemon.pid)
    assert kills == 10

    final = procs.daemon([root], tmp_path, env)
    final.wait_ready()
    # A job cut short by SIGKILL leaves a summarize_started without its end: not paired.
    wait_settled(ws, limit, timeout=40, paired=False)
    final.send(signal.SIGTERM)
    assert final.wait_exit(20) == 0
    assert not stray_files(ws), f"seed {seed}"
    assert_each_line_once(ws, {f"w{i}": count for i in range(3)}, ordered=True)
    assert types(ws, "summarize_completed"), "no rewrite ever happened"


# ----- 4. SIGKILL of a worker mid-job -------------------------------------------------------


@pytest.mark.slow
def test_sigkill_of_a_worker_fails_its_job_only_the_other_is_retried_at_once(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """Two jobs wait for the LLM; the worker running one is SIGKILLed: that job fails
    (HEARTBEAT.md failed with the reason, event summarize_failed), the daemon stays up and
    rebuilds its pool, and the retries succeed. The broken pool fails the other job too:
    its worker is stopped (so it never commits behind the daemon's back) and the job is
    retried at once, not counted as a failure; no line is lost."""
    llm.latency = 5.0
    root = tmp_path / "root"
    names = ("a", "b")
    for name in names:
        write_lines(root / name, "w", 45)
    limit = 3000
    daemon = procs.daemon([root], tmp_path, llm_env(llm.base_url, token_limit=str(limit)))
    daemon.wait_ready()

    port = int(llm.base_url.rsplit(":", 1)[1])
    wait_until(lambda: len(llm.message_requests) == 2, 20, "both jobs' LLM requests")
    workers = pool_workers(daemon.pid)
    victim = wait_until(lambda: pid_talking_to(port, workers), 5, "a worker in an LLM call")
    llm.latency = 0.1
    os.kill(victim, signal.SIGKILL)

    failed = daemon.wait_log("job_failed")
    assert failed["reason"] == "worker process died"
    guilty = Path(failed["workspace"])
    innocent = root / ({"a", "b"} - {guilty.name}).pop()
    retried = daemon.wait_log("job_retried", workspace=str(innocent))
    assert retried["reason"] == "another job's worker died"
    wait_until(event_seen(guilty, "summarize_failed"), 5, "summarize_failed")
    wait_until(event_seen(innocent, "summarize_failed"), 5, "summarize_failed")
    retries = [e.get("retry") for e in read_events(innocent) if e["type"] == "summarize_failed"]
    assert retries == ["now"]
    # The retry waits at least RETRY_FLOOR (2 s): long enough to see the failure.
    beat = read_heartbeat(guilty)
    assert (beat["status"], beat["last_error"]) == ("failed", "worker process died")
    # The lost job has a failed receipt, and its summarize_failed event names it.
    [lost] = [r for r in read_receipts(Workspace(guilty)) if r.outcome == "failed"]
    assert lost.reason == "worker process died"
    failed_jobs = [e.get("job") for e in read_events(guilty) if e["type"] == "summarize_failed"]
    assert failed_jobs == [lost.job]
    daemon.wait_log("pool_rebuilt")
    wait_until(lambda: not any(Path(f"/proc/{w}").exists() for w in workers), 5, "old workers")
    expected = {
        guilty: ["summarize_started", "summarize_failed", "summarize_started"],
        innocent: ["summarize_started", "summarize_failed", "summarize_started"],
    }
    for ws, started in expected.items():
        daemon.wait_log("summarize_completed", workspace=str(ws), timeout=30)
        wait_settled(ws, limit)
        jobs = types(ws, "summarize_started", "summarize_failed", "summarize_completed")
        assert jobs == [*started, "summarize_completed"]
        assert read_heartbeat(ws)["status"] == "completed"
        assert_each_line_once(ws, {"w": 45}, ordered=True)
        assert not stray_files(ws)
    assert len(daemon.logged("job_failed")) == 1
    assert daemon.process.poll() is None  # type: ignore[union-attr]
    assert not [r for r in daemon.logged("job_finished") if r["outcome"] != "completed"]


# ----- 5. SIGTERM, SIGTERM twice, SIGHUP ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["finish", "timeout", "twice"])
def test_sigterm_mid_job_exits_0_in_time_with_files_intact(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic, mode: str
) -> None:
    """SIGTERM while a job waits for the LLM: ``finish`` — the job ends within
    shutdown_timeout and the daemon exits 0 with the new file; ``timeout`` — the job is
    abandoned at shutdown_timeout, exit 0, the conversation byte-identical; ``twice`` — a
    second SIGTERM stops at once, exit 0, the conversation byte-identical."""
    llm.latency = {"finish": 1.5, "timeout": 20.0, "twice": 20.0}[mode]
    shutdown_timeout = {"finish": 10.0, "timeout": 1.0, "twice": 30.0}[mode]
    root = tmp_path / "root"
    ws = root / "ws"
    write_lines(ws, "w", 45)
    before = (ws / "conversation.jsonl").read_bytes()
    env = llm_env(llm.base_url, token_limit="3000", shutdown_timeout=str(shutdown_timeout))
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    wait_until(lambda: llm.message_requests, 20, "the job's LLM request")

    stopped_at = time.monotonic()
    daemon.send(signal.SIGTERM)
    if mode == "twice":
        daemon.wait_log("daemon_stopping")
        daemon.send(signal.SIGTERM)
    margin = 5.0
    limit = {"finish": shutdown_timeout, "timeout": shutdown_timeout, "twice": 0.0}[mode]
    assert daemon.wait_exit(limit + margin) == 0
    took = time.monotonic() - stopped_at
    assert took <= limit + margin
    daemon.wait_log("daemon_stopped")
    after = (ws / "conversation.jsonl").read_bytes()
    if mode == "finish":
        assert took < shutdown_timeout, "the daemon waited past the job's end"
        assert after != before
        assert "summarize_completed" in types(ws)
        assert_each_line_once(ws, {"w": 45}, ordered=True)
        assert not daemon.logged("jobs_abandoned")
    else:
        assert after == before
        assert not (ws / ".memoryd" / "archive").exists() or not list(
            (ws / ".memoryd" / "archive").glob("*.jsonl")
        )
        if mode == "timeout":
            assert took >= shutdown_timeout - 0.1
            assert daemon.logged("jobs_abandoned")
        else:
            assert daemon.logged("second_signal")


def _write_config(path: Path, token_limit: object) -> None:
    path.write_text(f"token_limit = {token_limit}\ncoalesce_ms = 20\n")


@pytest.mark.slow
def test_sighup_applies_a_new_budget_and_refuses_a_bad_one(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """SIGHUP reloads the --config file: a new token_limit is logged (config_reloaded
    lists it), reaches state.json and triggers the summarization it now calls for; a bad
    file is refused (config_reload_refused) and the previous budget stays in force."""
    root = tmp_path / "root"
    ws = root / "ws"
    write_lines(ws, "w", 30)
    config = tmp_path / "memoryd.toml"
    _write_config(config, 50000)
    env = llm_env(llm.base_url)
    daemon = procs.daemon([root], tmp_path, env, config=config)
    daemon.wait_ready()
    wait_until(lambda: (read_state(ws) or {}).get("token_limit") == 50000, 5, "first budget")
    tokens = read_state(ws)["tokens"]  # type: ignore[index]
    new_limit = int(tokens / 0.9)  # usage 90%: over the trigger

    _write_config(config, new_limit)
    daemon.send(signal.SIGHUP)
    reloaded = daemon.wait_log("config_reloaded")
    assert "token_limit" in reloaded["changed"]
    wait_until(lambda: (read_state(ws) or {}).get("token_limit") == new_limit, 5, "new budget")
    daemon.wait_log("summarize_completed", workspace=str(ws))
    wait_settled(ws, new_limit)

    _write_config(config, '"lots"')
    daemon.send(signal.SIGHUP)
    refused = daemon.wait_log("config_reload_refused")
    assert "token_limit" in refused["error"]
    assert procs.writer(ws, "late", 3).wait(10) == 0
    wait_until(lambda: (read_state(ws) or {}).get("messages") == complete_lines(ws), 5, "count")
    assert read_state(ws)["token_limit"] == new_limit  # type: ignore[index]
    assert len(daemon.logged("config_reloaded")) == 1
    assert daemon.process.poll() is None  # type: ignore[union-attr]


# ----- 6. sd_notify -------------------------------------------------------------------------


@pytest.mark.slow
def test_sd_notify_ready_after_the_scan_status_watchdog_pings_and_stopping(
    tmp_path: Path, procs: Processes
) -> None:
    """On a real AF_UNIX datagram socket set as NOTIFY_SOCKET: READY=1 arrives once the
    initial scan is done (the STATUS= line after it already counts every workspace; their
    state files follow), WATCHDOG=1 comes every half WATCHDOG_USEC, and STOPPING=1 arrives
    at SIGTERM."""
    root = tmp_path / "root"
    for name in ("a", "b"):
        write_lines(root / name, "w", 3)
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    address = folder / f"memoryd-notify-{os.getpid()}-{time.monotonic_ns()}.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(address))
    sock.settimeout(0.2)
    received: list[tuple[float, str, bool]] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            message = data.decode()
            states = all(read_state(root / n) is not None for n in ("a", "b"))
            received.append((time.monotonic(), message, states))

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        env = {
            "NOTIFY_SOCKET": str(address),
            "WATCHDOG_USEC": "1000000",
            "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        }
        daemon = procs.daemon([root], tmp_path, env)
        wait_until(lambda: any(m == "READY=1" for _, m, _ in received), 30, "READY=1")
        ready_at = next(t for t, m, _ in received if m == "READY=1")
        wait_until(
            lambda: sum(m == "WATCHDOG=1" and t > ready_at for t, m, _ in received) >= 4,
            10,
            "four WATCHDOG=1 pings after READY=1",
        )
        daemon.send(signal.SIGTERM)
        wait_until(lambda: any(m == "STOPPING=1" for _, m, _ in received), 10, "STOPPING=1")
        assert daemon.wait_exit(10) == 0
    finally:
        stop.set()
        listener.join(5)
        sock.close()
        address.unlink(missing_ok=True)

    messages = [m for _, m, _ in received]
    ready = messages.index("READY=1")
    assert messages.count("READY=1") == 1
    assert received[-1][2], "the state files of the scanned workspaces were never written"
    statuses = [m for m in messages[ready:] if m.startswith("STATUS=")]
    assert statuses and statuses[0] == "STATUS=watching 2 workspaces, 0 summarizing"
    stopping = messages.index("STOPPING=1")
    assert stopping > ready
    pings = [t for t, m, _ in received[ready:stopping] if m == "WATCHDOG=1"]
    assert len(pings) >= 4
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) < 1.0, f"a watchdog gap of {max(gaps):.2f} s (the limit is 1 s)"


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


# ----- 9. the systemd unit ------------------------------------------------------------------


def test_systemd_unit_verifies_and_has_the_required_settings(tmp_path: Path) -> None:
    """``systemd-analyze verify --user`` accepts systemd/memoryd.service without a word on
    stderr, and the unit is Type=notify with WatchdogSec, KillMode=mixed,
    Restart=on-failure and a TimeoutStopSec above the default shutdown_timeout (30 s)."""
    text = UNIT.read_text()
    keys: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            keys[key.strip()] = value.strip()
    assert keys["Type"] == "notify"
    assert int(keys["WatchdogSec"]) > 0
    assert keys["KillMode"] == "mixed"
    assert keys["Restart"] == "on-failure"
    assert float(keys["TimeoutStopSec"]) > 30
    assert "%h/.local/bin/memoryd run" in keys["ExecStart"]

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit's syntax is not verified")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    home = tmp_path / "home"
    binary = home / ".local" / "bin" / "memoryd"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    result = subprocess.run(
        [analyze, "verify", "--user", str(UNIT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stderr == ""
    assert result.returncode == 0


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


# ----- 11. in process: the stepped supervisor and the pure classifier --------------------------


def test_supervisor_loop_can_be_stepped_in_process(tmp_path: Path, info_logs: None) -> None:
    """A Supervisor built from load_settings(overrides) and stepped with loop() finds a
    workspace created after start() (state.json appears), and runs its job to completion
    once appends cross the trigger — no subprocess, no signal. close() leaves no worker,
    forkserver or resource tracker running."""
    root = tmp_path / "root"
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
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)

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
                multiprocessing.forkserver._forkserver._forkserver_pid,  # type: ignore[attr-defined]
                multiprocessing.resource_tracker._resource_tracker._pid,  # type: ignore[attr-defined]
            ]
            workers = pool_workers(os.getpid())
        finally:
            supervisor.close()
    # systemd SIGKILLs whatever outlives the daemon: close() stops the forkserver and the
    # resource tracker too, not only the workers.
    assert all(helpers) and workers
    assert not [pid for pid in [*helpers, *workers] if pid_alive(pid)]
    assert types(ws, "summarize_started", "summarize_completed") == [
        "summarize_started",
        "summarize_completed",
    ]
    assert_each_line_once(ws, {"w": 40}, ordered=True)
    dispatched = [e for e in logs if e["event"] == "summarize_dispatched"]
    assert len(dispatched) == 1
    assert dispatched[0]["workspace"] == str(ws)


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
            assert not supervisor.pending_init
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

    monkeypatch.setattr("memoryd.conversation.os.open", deny)
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
    warning with the sysctl to raise, polls the root, and still finds a folder dropped in."""
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
    write_lines(root / "dropped" / "ws", "w", 3)
    daemon.wait_log("workspace_discovered", 10, workspace=str(root / "dropped" / "ws"))


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


# ----- stopping cleanly under systemd ---------------------------------------------------------


@pytest.mark.slow
def test_a_stop_leaves_no_process_for_systemd_to_kill_and_a_workers_change_is_info(
    tmp_path: Path, procs: Processes
) -> None:
    """systemd (KillMode=mixed) SIGKILLs whatever is left in the unit once the daemon has
    exited: after a SIGTERM nothing of the daemon's process group is alive — no worker,
    no forkserver, no resource tracker. Before that, a SIGHUP that changes ``workers``
    resizes the pool, logged at info (pool_resized), not as a crash (pool_rebuilt)."""
    root = tmp_path / "root"
    write_lines(root / "ws", "w", 3)
    config = tmp_path / "memoryd.toml"
    config.write_text("workers = 2\n")
    env = {"MEMORYD_SUMMARIZER__BACKEND": "extractive"}
    daemon = procs.daemon([root], tmp_path, env, config=config)
    daemon.wait_ready()
    wait_until(
        lambda: len(group_members(daemon.pid)) >= 3, 10, "daemon, forkserver, resource tracker"
    )

    config.write_text("workers = 3\n")
    daemon.send(signal.SIGHUP)
    resized = daemon.wait_log("pool_resized")
    assert (resized["level"], resized["workers"]) == ("info", 3)
    assert not daemon.logged("pool_rebuilt")

    pgid = daemon.pid
    daemon.send(signal.SIGTERM)
    assert daemon.wait_exit(15) == 0
    assert group_members(pgid) == []


def test_a_failing_notify_socket_is_reported_once(tmp_path: Path) -> None:
    """NOTIFY_SOCKET set but unreachable: notify returns False and logs sd_notify_failed
    once, not at every watchdog ping; without NOTIFY_SOCKET nothing is logged."""
    from memoryd import systemd

    env = {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")}
    with capture_logs() as logs:
        results = [systemd.notify("WATCHDOG=1", env) for _ in range(5)]
        assert systemd.notify("READY=1", {}) is False
    assert results == [False] * 5
    failed = [r for r in logs if r["event"] == "sd_notify_failed"]
    assert len(failed) == 1
    assert (failed[0]["log_level"], failed[0]["message"]) == ("warning", "WATCHDOG")
    assert failed[0]["error"] == "No such file or directory"


def test_the_daemon_process_never_imports_the_anthropic_sdk(tmp_path: Path) -> None:
    """The daemon (configured for the anthropic backend, with a workspace to watch) starts
    and runs its loop without importing the SDK: only a worker running a job needs it."""
    root = tmp_path / "root"
    write_lines(root / "ws", "w", 3)
    script = (
        "import sys\n"
        "from memoryd.config import load_settings\n"
        "from memoryd.daemon import Supervisor\n"
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
