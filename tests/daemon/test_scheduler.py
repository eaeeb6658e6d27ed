"""The daemon's pure parts, without processes or a clock: the scheduler (coalescing, due
times, retries, rescans, reload), the outcome rules after a job, the back-off of failed
writes, and the STATUS line."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from memoryd.compaction.job.request import JobResult
from memoryd.config.settings import Settings
from memoryd.conversation.reader import ConversationReader
from memoryd.daemon.publisher import Publisher
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.tracked import (
    RETRY_FLOOR,
    WRITE_RETRY_MAX,
    Job,
    Tracked,
    job_lost,
    settle,
    write_failed,
    write_succeeded,
)
from memoryd.workspace import Workspace

WINDOW = 0.2


def tracked(name: str = "ws", shared: Settings | None = None, **settings: object) -> Tracked:
    """A workspace the scheduler tracks, with ``settings`` (or the ``shared`` ones)."""
    path = Path("/nowhere") / name
    return Tracked(
        workspace=Workspace(path),
        root=Path("/nowhere"),
        settings=shared if shared is not None else Settings(**settings),  # type: ignore[arg-type]
        reader=ConversationReader(path / "conversation.jsonl"),
    )


def scheduler(*workspaces: Tracked, rescan: float = 10_000.0) -> Scheduler:
    result = Scheduler(WINDOW, rescan)
    result.rescanned(0.0)
    for workspace in workspaces:
        result.add(workspace)
    return result


def names(found: list[Tracked]) -> list[str]:
    return [t.workspace.path.name for t in found]


# ----- the scheduler ------------------------------------------------------------------------


def test_a_first_change_is_due_at_once_and_a_burst_is_coalesced_into_one_more_look() -> None:
    ws = tracked()
    plan = scheduler(ws)
    plan.schedule(ws, 100.0)
    assert names(plan.due(100.0)) == ["ws"]
    ws.last_processed = 100.0
    for moment in (100.01, 100.05, 100.1):
        plan.schedule(ws, moment)
    assert plan.due(100.1) == []
    assert plan.next_deadline() == pytest.approx(100.0 + WINDOW)
    assert names(plan.due(100.0 + WINDOW)) == ["ws"]
    assert plan.due(1000.0) == []


def test_due_returns_each_workspace_once_in_due_order_and_only_what_is_due() -> None:
    a, b, c = tracked("a"), tracked("b"), tracked("c")
    plan = scheduler(a, b, c)
    plan.wake_at(c, 5.0)
    plan.wake_at(a, 7.0)
    plan.wake_at(a, 6.0)
    plan.wake_at(b, 9.0)
    assert names(plan.due(4.9)) == []
    assert names(plan.due(7.0)) == ["c", "a"]
    assert plan.next_deadline() == 9.0
    assert names(plan.due(9.0)) == ["b"]


def test_a_workspace_removed_from_the_registry_is_never_due() -> None:
    ws = tracked()
    plan = scheduler(ws)
    plan.schedule(ws, 1.0)
    assert plan.remove(ws.workspace.path) is ws
    assert plan.due(2.0) == []
    assert ws.workspace.path not in plan and len(plan) == 0


def test_the_rescan_is_due_every_interval_and_bounds_the_next_deadline() -> None:
    plan = Scheduler(WINDOW, 30.0)
    assert plan.rescan_due(0.0)
    plan.rescanned(10.0)
    assert not plan.rescan_due(39.9)
    assert plan.rescan_due(40.0)
    assert plan.next_deadline() == 40.0


def test_reload_takes_now_looks_at_every_workspace_and_forgets_ineffective_marks() -> None:
    a, b = tracked("a"), tracked("b")
    a.ineffective_tokens, a.state_numbers = 5000, 12
    a.last_processed = b.last_processed = 50.0
    plan = scheduler(a, b)
    plan.rescanned(50.0)
    plan.reload(0.5, 10.0, now=60.0)
    assert (plan.coalesce, plan.rescan_interval) == (0.5, 10.0)
    assert plan.rescan_due(60.0)
    assert sorted(names(plan.due(60.0))) == ["a", "b"]
    assert a.ineffective_tokens is None and a.state_numbers is None


def test_thousands_of_idle_workspaces_cost_nothing_per_step() -> None:
    """The heap holds only what is due: a step over 10,000 idle workspaces finds nothing
    and does not touch them."""
    shared = Settings()  # one configuration for them all, as one root gives them
    many = [tracked(f"w{i}", shared) for i in range(10_000)]
    plan = scheduler(*many)
    plan.wake_at(many[42], 3.0)
    assert plan.due(2.0) == []
    assert names(plan.due(3.0)) == ["w42"]
    assert plan.next_deadline() == plan.next_rescan


# ----- the outcome rules ----------------------------------------------------------------------


def running(ws: Tracked) -> Job:
    """A summarization job in flight for ``ws``."""
    return Job(ws.workspace.path, 1, "summarize", Future())


def result(outcome: str, **fields: object) -> JobResult:
    return JobResult(workspace=Path("/nowhere/ws"), outcome=outcome, reason="", **fields)  # type: ignore[arg-type]


def test_a_completed_job_clears_failures_and_records_its_calibration_and_time() -> None:
    ws = tracked()
    ws.job, ws.failures = running(ws), 2
    settle(ws, result("completed", calibration=1.25), now=10.0, wall=0.0)
    assert (ws.running, ws.failures, ws.calibration) == (False, 0, 1.25)
    assert ws.last_summary_at == "1970-01-01T00:00:00.000Z"
    assert ws.ineffective_tokens is None


def test_an_ineffective_job_waits_for_growth_from_the_tokens_it_left() -> None:
    ws = tracked()
    settle(ws, result("ineffective", ineffective=True, tokens_after=9000), now=1.0, wall=0.0)
    assert (ws.failures, ws.ineffective_tokens) == (0, 9000)


def test_a_busy_workspace_is_retried_after_the_retry_floor_without_more_failures() -> None:
    ws = tracked()
    settle(ws, result("busy"), now=100.0, wall=0.0)
    assert (ws.failures, ws.retry_at) == (1, 100.0 + RETRY_FLOOR)
    settle(ws, result("busy"), now=200.0, wall=0.0)
    assert (ws.failures, ws.retry_at) == (1, 200.0 + RETRY_FLOOR)


def test_failures_back_off_from_the_floor_to_the_cooldown() -> None:
    ws = tracked(max_consecutive_failures=3, failure_cooldown=100.0)
    waits = []
    for _ in range(6):
        settle(ws, result("failed"), now=0.0, wall=0.0)
        waits.append(ws.retry_at)
    assert waits == [RETRY_FLOOR, RETRY_FLOOR, 30.0, 60.0, 100.0, 100.0]


def test_a_job_failed_with_the_pool_but_not_by_its_own_worker_is_retried_at_once() -> None:
    ws = tracked()
    ws.job, ws.failures = running(ws), 1
    job_lost(ws, 50.0, its_fault=False)
    assert (ws.running, ws.failures, ws.retry_at) == (False, 1, 50.0)
    job_lost(ws, 60.0, its_fault=True)
    assert (ws.failures, ws.retry_at) == (2, 60.0 + RETRY_FLOOR)


# ----- failed writes --------------------------------------------------------------------------


def test_a_failing_write_backs_off_and_is_reported_once_per_workspace_and_reason() -> None:
    ws = tracked()
    full = "No space left on device"
    reported = [write_failed(ws, "state.json", full, 0.0) for _ in range(10)]
    assert reported == [True] + [False] * 9
    assert ws.write_retry_at == WRITE_RETRY_MAX
    assert not write_failed(ws, "HEARTBEAT.md", full, 0.0)
    assert write_failed(ws, "events.jsonl", "Too many levels of symbolic links", 0.0)
    assert write_succeeded(ws, "state.json") is None  # HEARTBEAT.md still fails: full
    assert (ws.write_failures, ws.write_retry_at) == (0, 0.0)
    assert write_succeeded(ws, "HEARTBEAT.md") == full
    assert write_succeeded(ws, "events.jsonl") == "Too many levels of symbolic links"
    assert ws.unwritable is None
    assert write_succeeded(ws, "state.json") is None
    assert write_failed(ws, "state.json", full, 5.0)
    assert ws.write_retry_at == 5.0 + RETRY_FLOOR


def test_status_says_one_workspace_in_the_singular(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []
    monkeypatch.setattr(
        "memoryd.daemon.systemd.notify", lambda message, env=None: sent.append(message)
    )
    publisher = Publisher({}, lambda tracked, when: None)
    publisher.status(1, 0, [])
    publisher.status(1, 0, [])
    publisher.status(2, 1, [Path("/r")])
    assert sent == [
        "STATUS=watching 1 workspace, 0 summarizing",
        "STATUS=watching 2 workspaces, 1 summarizing (1 roots polled: inotify limit)",
    ]
