"""Workers on demand and the backlog: ``memoryd run`` as a real subprocess with its real
forkserver, the anthropic backend against the real fake Messages API server.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import pytest
from daemon_harness import (
    Processes,
    children,
    cmdline,
    llm_env,
    pool_workers,
    read_heartbeat,
    wait_until,
)
from fake_anthropic import FakeAnthropic, Reply
from writers import line_bytes

from memoryd.conversation.reader import ConversationReader
from memoryd.levels import detect_threshold, usage_ratio

pytestmark = pytest.mark.slow


def write_lines(workspace: Path, count: int, start: int = 0) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    with (workspace / "conversation.jsonl").open("ab") as file:
        file.write(b"".join(line_bytes("w", n) for n in range(start, start + count)))


def forkservers(daemon_pid: int) -> list[int]:
    return [c for c in children(daemon_pid) if "multiprocessing.forkserver" in cmdline(c)]


def test_forkserver_and_workers_start_with_a_job_and_are_gone_when_idle(
    tmp_path: Path, procs: Processes
) -> None:
    """An idle daemon has neither a forkserver nor a worker; a job starts both; after
    ``worker_idle_timeout`` without jobs the workers exit (workers_retired) and then the
    forkserver stops (forkserver_stopped); the next job starts a new forkserver and
    worker and completes."""
    root = tmp_path / "root"
    workspace = root / "ws"
    write_lines(workspace, 5)
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "MEMORYD_TOKEN_LIMIT": "3000",
        "MEMORYD_WORKER_IDLE_TIMEOUT": "2",
    }
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    assert daemon.logged("workspaces_discovered", workspaces=1), "the workspace tracked"
    assert forkservers(daemon.pid) == []

    write_lines(workspace, 45, start=5)
    daemon.wait_log("job_finished", outcome="completed")
    first = pool_workers(daemon.pid)
    assert first, "the job ran in a worker, which stays for worker_idle_timeout"
    server = forkservers(daemon.pid)
    assert len(server) == 1

    retired = daemon.wait_log("workers_retired", timeout=30)
    assert retired["workers"] == len(first)
    daemon.wait_log("forkserver_stopped", timeout=30)
    wait_until(lambda: forkservers(daemon.pid) == [], 10, "the forkserver to exit")
    assert all(not Path(f"/proc/{pid}").exists() for pid in first)

    write_lines(workspace, 45, start=100)
    daemon.wait_log("job_finished", count=2)
    assert [r["outcome"] for r in daemon.logged("job_finished")] == ["completed", "completed"]
    assert not set(pool_workers(daemon.pid)) & set(first)
    assert len(daemon.logged("forkserver_started")) == 2
    assert not set(forkservers(daemon.pid)) & set(server)


def test_a_backlog_runs_most_urgent_first_within_max_concurrent_requests(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    """Four workspaces past the trigger at start, four workers but
    ``max_concurrent_requests = 2``: never more than two requests are in flight, and the
    jobs are dispatched critical first, then by usage ratio, highest first."""
    fake_anthropic.set_default(Reply.echo())
    fake_anthropic.latency = 1.0
    root = tmp_path / "root"
    limit = 3200
    sizes = {"a40": 40, "b55": 55, "c45": 45, "d50": 50}
    for name, count in sizes.items():
        write_lines(root / name, count)
    ratios = {}
    for name in sizes:
        reader = ConversationReader(root / name / "conversation.jsonl", 1 << 20)
        reader.update()
        ratios[name] = usage_ratio(reader.tally.tokens, limit)
    levels = {name: detect_threshold(ratio) for name, ratio in ratios.items()}
    assert levels == {"a40": "warning", "b55": "critical", "c45": "critical", "d50": "critical"}
    env = llm_env(fake_anthropic.base_url, token_limit=str(limit), workers="4")
    env["MEMORYD_ANTHROPIC__MAX_CONCURRENT_REQUESTS"] = "2"
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    daemon.wait_log("job_finished", timeout=60, count=4)

    in_flight, most = 0, 0
    order = []
    for line in daemon.history:
        event = line.record.get("event")
        if event == "summarize_dispatched":
            in_flight += 1
            order.append(Path(line.record["workspace"]).name)
        elif event == "job_finished":
            in_flight -= 1
        most = max(most, in_flight)
    assert most == 2
    assert order == ["b55", "d50", "c45", "a40"]
    assert [r["outcome"] for r in daemon.logged("job_finished")] == ["completed"] * 4


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


@pytest.mark.parametrize("backend", ["extractive", "anthropic"])
def test_the_forkserver_preloads_the_sdk_for_the_anthropic_backend_only(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic, backend: str
) -> None:
    """The forkserver that the first job starts imports the Anthropic SDK (its compiled
    JSON parser, jiter, is mapped there) when the backend is anthropic, so that workers
    inherit it; on the extractive backend it does not. The daemon process itself never
    imports it."""
    fake_anthropic.set_default(Reply.echo())
    fake_anthropic.latency = 1.0
    root = tmp_path / "root"
    write_lines(root / "ws", 5)
    env = llm_env(fake_anthropic.base_url, token_limit="3000")
    env["MEMORYD_SUMMARIZER__BACKEND"] = backend
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    assert daemon.logged("workspaces_discovered", workspaces=1), "the workspace tracked"
    assert forkservers(daemon.pid) == []
    write_lines(root / "ws", 45, start=5)
    forkserver = wait_until(lambda: forkservers(daemon.pid), 30, "a forkserver")[0]
    assert daemon.wait_log("forkserver_started")["sdk"] == (backend == "anthropic")
    daemon.wait_log("job_finished", outcome="completed")
    maps = _maps(forkserver)
    assert "pydantic_core" in maps, "memoryd preloaded"
    assert ("jiter" in maps) == (backend == "anthropic")
    assert "jiter" not in _maps(daemon.pid)


def test_a_job_is_checked_in_from_dispatch_while_the_pool_starts_from_zero(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    """checkin_interval 0.5 s, the first job after the start: no forkserver yet, and the
    one it starts imports the SDK before it forks a worker (seconds). From the moment
    HEARTBEAT.md says active to the job's end, last_checkin never lags by much more than
    the interval: the daemon checks in until a worker takes the job, the worker from
    then on."""
    interval = 0.5
    fake_anthropic.set_default(Reply.echo())
    fake_anthropic.latency = 2.0
    root = tmp_path / "root"
    workspace = root / "ws"
    write_lines(workspace, 5)
    env = llm_env(fake_anthropic.base_url, token_limit="3000", checkin_interval=str(interval))
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    wait_until(lambda: read_heartbeat(workspace).get("status") == "idle", 10, "tidied")
    assert forkservers(daemon.pid) == []
    write_lines(workspace, 45, start=5)
    beats: set[str] = set()

    def ended() -> dict[str, str] | None:
        heartbeat = read_heartbeat(workspace)
        if heartbeat.get("status") == "active":
            beats.update((heartbeat["started_at"], heartbeat["last_checkin"]))
        return heartbeat if heartbeat.get("status") in ("completed", "failed") else None

    final = wait_until(ended, 60, "the job to end", interval=0.01)
    assert final["status"] == "completed"
    assert daemon.logged("forkserver_started"), "the pool started from zero"
    moments = sorted(iso_seconds(beat) for beat in {*beats, final["last_checkin"]})
    assert moments[-1] - moments[0] > 4 * interval, "the job lasted several intervals"
    gaps = [later - earlier for earlier, later in itertools.pairwise(moments)]
    assert max(gaps) <= interval + 0.25, gaps


def iso_seconds(stamp: str) -> float:
    """Epoch seconds of a HEARTBEAT.md time (UTC, milliseconds)."""
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return moment.timestamp()
