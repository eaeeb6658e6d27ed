"""Compaction while the agent is idle, pure over ``now``: when a workspace is due, what the
scheduler wakes for, and the daemon's choice between a triggered and an idle job."""

from __future__ import annotations

import math
from concurrent.futures import Future
from pathlib import Path

from memoryd.config.settings import Settings
from memoryd.conversation.reader import ConversationReader
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.tracked import Job, Tracked, idle_due_at, job_due_now
from memoryd.workspace import Workspace

LIMIT = 10_000
AFTER = 300.0


def workspace(usage: float, **settings: object) -> Tracked:
    """A workspace at ``usage`` of its budget whose conversation last changed at 1000."""
    path = Path("/nowhere/ws")
    values: dict[str, object] = {
        "token_limit": LIMIT,
        "idle_compact_after": AFTER,
        "idle_compact_at": 0.6,
        **settings,
    }
    tracked = Tracked(
        workspace=Workspace(path),
        root=Path("/nowhere"),
        settings=Settings(**values),  # type: ignore[arg-type]
        reader=ConversationReader(path / "conversation.jsonl"),
        changed_at=1000.0,
    )
    tracked.reader.tally.tokens = round(usage * LIMIT)
    tracked.reader.tally.messages = 40
    return tracked


def test_off_by_default_and_below_the_ratio() -> None:
    assert idle_due_at(workspace(0.7, idle_compact_after=0)) is None
    assert idle_due_at(workspace(0.59)) is None
    assert idle_due_at(workspace(0.61)) == 1000.0 + AFTER


def test_an_idle_workspace_is_due_once_quiet_for_idle_compact_after() -> None:
    ws = workspace(0.7)
    assert job_due_now(ws, 1000.0 + AFTER - 1) is None
    assert job_due_now(ws, 1000.0 + AFTER) == (f"idle for {AFTER:g} s", "idle")


def test_the_usual_trigger_comes_first() -> None:
    assert job_due_now(workspace(0.85), 1000.0 + AFTER) == ("usage above 80%", "trigger")


def test_one_idle_compaction_per_quiet_spell() -> None:
    ws = workspace(0.7)
    ws.idle_compacted_at = 1000.0 + AFTER
    assert idle_due_at(ws) is None  # still above the ratio after the job: no second one
    ws.changed_at = 2000.0  # the agent wrote again
    assert idle_due_at(ws) == 2000.0 + AFTER


def test_not_while_running_nor_after_a_job_that_could_not_lower_usage() -> None:
    ws = workspace(0.7)
    ws.job = Job(ws.workspace.path, 1, "summarize", Future())
    assert idle_due_at(ws) is None
    ws.job = None
    ws.ineffective_tokens = ws.tokens
    assert idle_due_at(ws) is None


def test_a_failing_workspace_waits_for_its_back_off() -> None:
    ws = workspace(0.7)
    ws.failures, ws.retry_at = 3, 5000.0
    assert idle_due_at(ws) == 5000.0


def test_the_scheduler_keeps_one_idle_wake_and_a_wake_that_comes_early_sets_the_next() -> None:
    ws = workspace(0.7)
    plan = Scheduler(0.2, 1e9)
    plan.rescanned(0.0)
    plan.add(ws)
    plan.wake_when_idle(ws, 1000.0)
    plan.wake_when_idle(ws, 1001.0)  # nothing changed: no second entry
    assert plan.next_deadline() == 1000.0 + AFTER
    ws.changed_at = 1100.0  # the agent wrote meanwhile
    plan.wake_when_idle(ws, 1100.0)  # the pending wake is earlier: kept, not duplicated
    assert [t.workspace.path.name for t in plan.due(1000.0 + AFTER)] == ["ws"]
    assert job_due_now(ws, 1000.0 + AFTER) is None  # woken early: not idle long enough
    plan.wake_when_idle(ws, 1000.0 + AFTER)
    assert plan.next_deadline() == 1100.0 + AFTER
    assert [t.workspace.path.name for t in plan.due(1100.0 + AFTER)] == ["ws"]
    assert job_due_now(ws, 1100.0 + AFTER) == (f"idle for {AFTER:g} s", "idle")
    assert plan.due(math.inf) == []
