"""What a new user reads in the daemon's log in the first hour: a workspace is named one
way, absolute, in every log line and in events.jsonl, even when its root was given
relative (``--root agents``); a root that is missing is said once, not at every look."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from daemon_harness import read_heartbeat, read_state, wait_until
from daemon_workspaces import append_lines, write_lines
from structlog.testing import capture_logs

from memoryd.config.fast import fast_status_settings
from memoryd.config.settings import load_settings
from memoryd.daemon.supervisor import Supervisor


def test_a_relative_root_names_its_workspaces_absolutely_and_a_missing_root_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, info_logs: None
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agents").mkdir()
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {
        "roots": ["agents", "not-yet"],
        "workers": 1,
        "token_limit": 2000,
        "coalesce_ms": 0,
        "drain_seconds": 0,
        "rescan_interval": 1,
        "summarizer.backend": "extractive",
        "summarizer.max_summary_tokens": 200,
    }
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    ws = tmp_path / "agents" / "try-it"

    def step() -> bool:
        supervisor.loop(wait=0.05)
        return False

    with capture_logs() as logs:
        try:
            supervisor.start()
            write_lines(ws, "w", 3)
            wait_until(lambda: step() or read_state(ws), 10, "state.json", interval=0)
            append_lines(ws, "w", 3, 37)
            wait_until(
                lambda: step() or read_heartbeat(ws).get("status") == "completed",
                30,
                "the job to complete",
                interval=0,
            )
            wait_until(
                lambda: step() or not any(t.running for t in supervisor.scheduler),
                10,
                "job done",
                0,
            )
            for _ in range(30):  # a few rescans of the missing root
                step()
        finally:
            supervisor.close()
    missing = [entry for entry in logs if entry["event"] == "root_missing"]
    assert len(missing) == 1, missing
    named = {entry["workspace"] for entry in logs if "workspace" in entry}
    assert named == {str(ws)}, named
    events = (ws / ".memoryd" / "events.jsonl").read_text().splitlines()
    assert {json.loads(line).get("workspace", str(ws)) for line in events} == {str(ws)}
    assert missing[0]["root"] == str(tmp_path / "not-yet")


def test_the_fast_path_reads_a_relative_root_as_the_full_loader_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "memoryd.toml"
    config.write_text('roots = ["agents"]\n')
    fast = fast_status_settings(config, {}, {})
    assert fast is not None
    assert fast.roots == load_settings(config, env={}).settings.roots == [tmp_path / "agents"]
    assert os.path.isabs(fast.roots[0])
