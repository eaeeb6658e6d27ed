"""The daemon under signals, as real processes: SIGKILL of the daemon again and again,
SIGKILL of a worker mid-job, SIGTERM (once, twice, past the timeout) and SIGHUP."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from daemon_harness import (
    Processes,
    group_members,
    llm_env,
    pid_talking_to,
    pool_workers,
    read_events,
    read_heartbeat,
    read_state,
    wait_until,
)
from daemon_workspaces import (
    assert_each_line_once,
    complete_lines,
    event_seen,
    stray_files,
    types,
    wait_settled,
    write_lines,
)
from fake_anthropic import FakeAnthropic

from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "memoryd.service"


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
