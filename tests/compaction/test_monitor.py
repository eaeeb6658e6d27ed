"""The context monitor: pure thresholds, ContextMonitor's persisted state and events, and
how ``memoryd status`` shows a monitor that stopped checking in."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import SettingsFactory, WorkspaceFactory

from memoryd.clock import iso_ms
from memoryd.errors import InputError
from memoryd.files.fsutil import TEMP_MARK
from memoryd.levels import detect_threshold, get_threshold_action, should_emit_event
from memoryd.published.events import read_events
from memoryd.published.monitor import ContextMonitor, monitor_path, read_monitors

FIXED_NOW = 1_700_000_000.0
"""2023-11-14T22:13:20Z: a fixed clock, far in the past of any real ``time.time()``."""

STATE_FIELDS = {
    "agent_id",
    "session_id",
    "active",
    "started_at",
    "last_heartbeat",
    "cumulative_chars",
    "estimated_tokens",
    "usage_ratio",
    "threshold_status",
    "current_task",
    "tasks_completed",
    "tasks_total",
}


class Clock:
    """A settable clock for ContextMonitor (epoch seconds)."""

    def __init__(self, now: float = FIXED_NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def saved_state(folder: Path, agent_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(monitor_path(folder, agent_id).read_bytes())
    return data


def threshold_events(folder: Path) -> list[dict[str, Any]]:
    return [
        e
        for e in read_events(folder / ".memoryd" / "events.jsonl")
        if e["type"] == "threshold_changed"
    ]


def chars_for(tokens: int) -> int:
    """Characters that the monitor counts as exactly ``tokens`` tokens (chars / 4, rounded up)."""
    return tokens * 4


# --- pure thresholds ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "level"),
    [
        (0.0, "normal"),
        (0.6999, "normal"),
        (0.70, "warning"),
        (0.7001, "warning"),
        (0.8499, "warning"),
        (0.85, "critical"),
        (0.8501, "critical"),
        (1.2, "critical"),
    ],
)
def test_default_levels_change_exactly_at_070_and_085(ratio: float, level: str) -> None:
    """Without a config: 0.6999 normal, 0.70 warning, 0.8499 warning, 0.85 critical."""
    assert detect_threshold(ratio) == level
    assert detect_threshold(ratio, None) == level


@pytest.mark.parametrize(
    ("ratio", "level"),
    [
        (0.4999, "normal"),
        (0.50, "warning"),
        (0.6999, "warning"),
        (0.70, "warning"),
        (0.7499, "warning"),
        (0.75, "critical"),
        (0.85, "critical"),
    ],
)
def test_a_settings_object_as_config_moves_both_boundaries(
    ratio: float, level: str, make_settings: SettingsFactory
) -> None:
    """A Settings with warning_at 0.50 and critical_at 0.75 sets the levels, inclusive."""
    settings = make_settings(warning_at=0.50, summarize_at=0.70, critical_at=0.75)
    assert detect_threshold(ratio, settings) == level


@pytest.mark.parametrize(
    ("ratio", "level"),
    [(0.6999, "normal"), (0.70, "warning"), (0.8499, "warning"), (0.85, "critical")],
)
def test_default_settings_object_gives_the_default_boundaries(
    ratio: float, level: str, make_settings: SettingsFactory
) -> None:
    """A default Settings as config behaves like no config at all."""
    assert detect_threshold(ratio, make_settings()) == level


def test_explicit_thresholds_win_over_the_config(make_settings: SettingsFactory) -> None:
    """warning_at= / critical_at= given by keyword override the Settings' values."""
    settings = make_settings(warning_at=0.50, summarize_at=0.70, critical_at=0.75)
    assert detect_threshold(0.6, settings, warning_at=0.65) == "normal"
    assert detect_threshold(0.8, settings, critical_at=0.9) == "warning"
    assert detect_threshold(0.9, settings, critical_at=0.9) == "critical"


@pytest.mark.parametrize(
    ("level", "action", "message"),
    [
        ("normal", "none", "Context normal - continue working"),
        (
            "warning",
            "prepare_handoff",
            "Context warning (70%+) - complete current task, prepare clean handoff",
        ),
        (
            "critical",
            "force_return",
            "Context critical (85%+) - initiating checkpoint return: save state and return control",
        ),
    ],
)
def test_each_level_maps_to_its_action_and_human_readable_message(
    level: str, action: str, message: str
) -> None:
    """none / prepare_handoff / force_return, each with its sentence for the agent."""
    result = get_threshold_action(level)  # type: ignore[arg-type]
    assert (result.level, result.action, result.message) == (level, action, message)


def test_should_emit_event_only_when_the_level_changes() -> None:
    """Same level twice: no event; any change (or the first level seen): an event."""
    levels = ("normal", "warning", "critical")
    for previous in levels:
        for current in levels:
            assert should_emit_event(previous, current) is (previous != current)  # type: ignore[arg-type]
    assert should_emit_event(None, "normal") is True


# --- ContextMonitor -------------------------------------------------------------------------


def test_track_content_returns_none_then_prepare_handoff_then_force_return(
    tmp_path: Path,
) -> None:
    """With a 10,000-token budget: 6,999 tokens -> none, 7,000 -> prepare_handoff,
    8,499 -> prepare_handoff, 8,500 -> force_return (chars / 4 estimate)."""
    monitor = ContextMonitor(tmp_path, "agent-1", token_limit=10_000, clock=Clock())
    monitor.start()

    seen = []
    total = 0
    for tokens in (6_999, 7_000, 8_499, 8_500):
        action = monitor.track_content("x" * (chars_for(tokens) - total))
        total = chars_for(tokens)
        seen.append((monitor.get_state().estimated_tokens, action.action))
        assert monitor.get_threshold_action() == action

    assert seen == [
        (6_999, "none"),
        (7_000, "prepare_handoff"),
        (8_499, "prepare_handoff"),
        (8_500, "force_return"),
    ]
    assert monitor.get_state().threshold_status == "critical"


def test_monitor_thresholds_are_configurable(tmp_path: Path) -> None:
    """warning_at / critical_at of the monitor move where its actions change."""
    monitor = ContextMonitor(
        tmp_path, "agent-1", token_limit=1_000, warning_at=0.5, critical_at=0.6, clock=Clock()
    )
    monitor.start()
    assert monitor.track_content("x" * chars_for(499)).action == "none"
    assert monitor.track_content("x" * 4).action == "prepare_handoff"
    assert monitor.track_content("x" * chars_for(100)).action == "force_return"


def test_state_file_has_every_field_after_each_step(tmp_path: Path) -> None:
    """The file an orchestrator polls holds agent and session ids, activity, times, the
    counts, the level and the tasks — and follows start, track, task and heartbeat calls."""
    clock = Clock()
    monitor = ContextMonitor(
        tmp_path, "agent-7", session_id="session-42", token_limit=1_000, tasks_total=3, clock=clock
    )
    path = monitor_path(tmp_path, "agent-7")
    assert path == tmp_path / ".memoryd" / "monitors" / "agent-7.json"

    monitor.start()
    state = saved_state(tmp_path, "agent-7")
    assert set(state) >= STATE_FIELDS
    assert state["agent_id"] == "agent-7"
    assert state["session_id"] == "session-42"
    assert state["active"] is True
    assert state["started_at"] == state["last_heartbeat"] == iso_ms(FIXED_NOW)
    assert (state["cumulative_chars"], state["estimated_tokens"], state["usage_ratio"]) == (0, 0, 0)
    assert state["threshold_status"] == "normal"
    assert (state["current_task"], state["tasks_completed"], state["tasks_total"]) == (None, 0, 3)

    clock.now += 10
    monitor.set_current_task("write the parser")
    clock.now += 10
    monitor.track_content("y" * 2_810)  # 703 tokens of 1,000
    state = saved_state(tmp_path, "agent-7")
    assert state["current_task"] == "write the parser"
    assert state["cumulative_chars"] == 2_810
    assert state["estimated_tokens"] == 703
    assert state["usage_ratio"] == 0.703
    assert state["threshold_status"] == "warning"
    assert state["started_at"] == iso_ms(FIXED_NOW)
    assert state["last_heartbeat"] == iso_ms(FIXED_NOW + 20)

    clock.now += 10
    monitor.complete_task()
    state = saved_state(tmp_path, "agent-7")
    assert (state["current_task"], state["tasks_completed"], state["tasks_total"]) == (None, 1, 3)

    clock.now += 10
    monitor.update_heartbeat()
    state = saved_state(tmp_path, "agent-7")
    assert state["last_heartbeat"] == iso_ms(FIXED_NOW + 40)
    assert state["started_at"] == iso_ms(FIXED_NOW)
    assert state == dataclasses.asdict(monitor.get_state())


def test_completing_more_tasks_than_announced_raises_the_total(tmp_path: Path) -> None:
    """tasks_total never falls below tasks_completed."""
    monitor = ContextMonitor(tmp_path, "agent-1", tasks_total=1, clock=Clock())
    monitor.start()
    monitor.complete_task()
    monitor.complete_task()
    state = saved_state(tmp_path, "agent-1")
    assert (state["tasks_completed"], state["tasks_total"]) == (2, 2)


def test_state_file_is_rewritten_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    """Every write replaces the file by rename (a new inode each time); a reader polling
    meanwhile always parses a complete JSON object; no temporary file stays behind."""
    monitor = ContextMonitor(tmp_path, "agent-1", token_limit=100_000, clock=Clock())
    monitor.start()
    path = monitor_path(tmp_path, "agent-1")
    inode = path.stat().st_ino
    monitor.track_content("first text")
    assert path.stat().st_ino != inode

    problems: list[str] = []
    reads = 0
    stop = threading.Event()

    def poll() -> None:
        nonlocal reads
        while not stop.is_set():
            data = path.read_bytes()
            reads += 1
            try:
                state = json.loads(data)
            except ValueError:
                problems.append(repr(data[:80]))
                continue
            if not set(state) >= STATE_FIELDS:
                problems.append(f"fields missing: {sorted(STATE_FIELDS - set(state))}")

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for i in range(150):
            monitor.track_content(f"text number {i} " * 5)
    finally:
        stop.set()
        reader.join()

    assert problems == []
    assert reads > 0
    names = [name for _, _, files in os.walk(tmp_path / ".memoryd") for name in files]
    assert not [name for name in names if TEMP_MARK in name]
    assert sorted(os.listdir(path.parent)) == ["agent-1.json"]


def test_threshold_changed_is_emitted_once_per_level_change(tmp_path: Path) -> None:
    """Many small texts within one level emit nothing; each crossing emits exactly one
    threshold_changed event with the previous and new level, the ratio and the action."""
    monitor = ContextMonitor(tmp_path, "agent-1", token_limit=1_000, clock=Clock())
    monitor.start()

    for _ in range(100):  # 100 x 20 chars = 500 tokens: normal all along
        monitor.track_content("a" * 20)
    assert threshold_events(tmp_path) == []

    monitor.track_content("b" * chars_for(200))  # 700 tokens: warning
    for _ in range(50):  # 50 x 8 chars = 100 tokens more: still warning
        monitor.track_content("c" * 8)
    assert len(threshold_events(tmp_path)) == 1

    monitor.track_content("d" * chars_for(50))  # 850 tokens: critical
    for _ in range(20):
        monitor.track_content("e" * 40)

    changes = threshold_events(tmp_path)
    assert [(e["previous"], e["level"], e["action"]) for e in changes] == [
        ("normal", "warning", "prepare_handoff"),
        ("warning", "critical", "force_return"),
    ]
    assert [e["usage_ratio"] for e in changes] == [0.7, 0.85]
    assert all(e["agent_id"] == "agent-1" for e in changes)
    assert all(e["workspace"] == str(tmp_path) for e in changes)
    assert all(e["ts"] == iso_ms(FIXED_NOW) for e in changes)


def test_monitor_refuses_an_agent_id_that_is_not_a_file_name(tmp_path: Path) -> None:
    """An agent id with a slash (or empty) is refused: it names the monitor's file."""
    for bad in ("../escape", "", "a/b"):
        with pytest.raises(InputError, match="agent id"):
            ContextMonitor(tmp_path, bad)
    assert not (tmp_path / ".memoryd").exists()


# --- stale monitors in memoryd status -------------------------------------------------------


def test_read_monitors_marks_stale_only_past_stale_after(tmp_path: Path) -> None:
    """Exactly stale_after seconds of silence is not stale yet; one second more is."""
    monitor = ContextMonitor(tmp_path, "agent-1", clock=Clock())
    monitor.start()
    [fresh] = read_monitors(tmp_path, stale_after=300, now=FIXED_NOW + 300)
    [late] = read_monitors(tmp_path, stale_after=300, now=FIXED_NOW + 301)
    assert fresh["stale"] is False
    assert late["stale"] is True
    assert late["agent_id"] == "agent-1"


def test_status_json_and_table_show_a_silent_monitor_as_stale(
    workspace: WorkspaceFactory,
) -> None:
    """A monitor whose last heartbeat (fixed clock, years ago) is older than stale_after is
    stale in --json and named in the table; one that checked in just now is not."""
    folder = workspace(4, 100)
    silent = ContextMonitor(folder, "silent-agent", clock=Clock())
    silent.start()
    silent.track_content("some work")
    lively = ContextMonitor(folder, "lively-agent")
    lively.start()

    code, out = cli("status", str(folder), "--json")
    assert code == 0
    [row] = json.loads(out)
    monitors = {m["agent_id"]: m for m in row["monitors"]}
    assert monitors["silent-agent"]["stale"] is True
    assert monitors["silent-agent"]["active"] is True
    assert monitors["silent-agent"]["last_heartbeat"] == iso_ms(FIXED_NOW)
    assert monitors["lively-agent"]["stale"] is False

    code, table = cli("status", str(folder))
    assert code == 0
    assert "stale monitor: silent-agent" in table
    assert "lively-agent" not in table


def test_stale_after_is_configurable_for_status(
    workspace: WorkspaceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With MEMORYD_STALE_AFTER larger than the silence, the same monitor is not stale."""
    folder = workspace(4, 100)
    ContextMonitor(folder, "agent-1", clock=lambda: time.time() - 120).start()
    assert json.loads(cli("status", str(folder), "--json")[1])[0]["monitors"][0]["stale"] is False
    monkeypatch.setenv("MEMORYD_STALE_AFTER", "60")
    assert json.loads(cli("status", str(folder), "--json")[1])[0]["monitors"][0]["stale"] is True


def test_stopped_monitor_is_inactive_and_never_stale(workspace: WorkspaceFactory) -> None:
    """stop() writes active false; a stopped monitor is not reported stale however old."""
    folder = workspace(4, 100)
    monitor = ContextMonitor(folder, "done-agent", clock=Clock())
    monitor.start()
    stopped = monitor.stop()
    assert stopped.active is False
    assert saved_state(folder, "done-agent")["active"] is False

    code, out = cli("status", str(folder), "--json")
    assert code == 0
    [entry] = json.loads(out)[0]["monitors"]
    assert entry["active"] is False
    assert entry["stale"] is False
    code, table = cli("status", str(folder))
    assert "stale monitor" not in table
