"""The budget an agent is told is the daemon's: without ``--config``, ``memoryd status``,
``status --watch`` and MCP ``context_status`` count a workspace against the budget the
daemon recorded in its state.json, and say where the figure came from."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_helpers import cli
from conftest import WorkspaceFactory, generated_messages
from daemon_harness import Processes, clean_env, wait_until
from daemon_workspaces import write_lines
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from memoryd.published.state import read_state, recorded_budget
from memoryd.status.report import Budget, budget_of
from memoryd.workspace import Workspace


@dataclass(frozen=True)
class Configured:
    """A configuration's budget, as the status path sees it."""

    token_limit: int = 100_000
    warning_at: float = 0.7
    critical_at: float = 0.85
    strategy: str = "narrative"


RECORDED = {"token_limit": 13_000, "warning_at": 0.5, "critical_at": 0.6, "strategy": "rolling"}


def test_the_recorded_budget_replaces_the_configured_one() -> None:
    assert budget_of(Configured(), frozenset(), RECORDED) == Budget(
        13_000, 0.5, 0.6, "rolling", "daemon"
    )
    assert budget_of(Configured(), frozenset()) == Budget(100_000, 0.7, 0.85, "narrative", "config")
    assert budget_of(Configured(), frozenset(), {}) == budget_of(Configured(), frozenset())


def test_the_workspaces_own_config_wins_over_what_was_recorded() -> None:
    """The daemon applied the workspace's file too: its keys are the configured values."""
    mine = Configured(token_limit=20_000, strategy="checkpoint")
    budget = budget_of(mine, frozenset({"token_limit", "strategy"}), RECORDED)
    assert budget == Budget(20_000, 0.5, 0.6, "checkpoint", "workspace")
    assert budget_of(mine, frozenset({"token_limit"})).source == "workspace"


@pytest.mark.parametrize(
    "recorded",
    [
        {"token_limit": 0},
        {"token_limit": True},
        {"token_limit": "13000"},
        {"token_limit": 1.5e4},
        {"warning_at": 0.5},
    ],
)
def test_no_usable_token_limit_recorded_means_the_configuration(recorded: dict[str, Any]) -> None:
    assert budget_of(Configured(), frozenset(), recorded) == budget_of(Configured(), frozenset())


def test_recorded_values_the_configuration_would_refuse_are_not_used() -> None:
    odd = {"token_limit": 9_000, "warning_at": 1.5, "critical_at": 0.6, "strategy": "magic"}
    assert budget_of(Configured(), frozenset(), odd) == Budget(
        9_000, 0.7, 0.85, "narrative", "daemon"
    ), "0.6 alone would put the levels out of order with the configured 0.7"
    reversed_levels = {"token_limit": 9_000, "warning_at": 0.9, "critical_at": 0.6}
    assert budget_of(Configured(), frozenset(), reversed_levels) == Budget(
        9_000, 0.7, 0.85, "narrative", "daemon"
    )


def test_recorded_budget_picks_the_budget_fields_of_a_state() -> None:
    state = {"workspace": "/w", "tokens": 5, **RECORDED, "level": "normal"}
    assert recorded_budget(state) == RECORDED
    assert recorded_budget({"strategy": "rolling"}) == {}


def test_status_without_config_uses_the_recorded_budget_and_says_so(
    workspace: WorkspaceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = workspace(messages=generated_messages(20, 400))
    state = {"token_limit": 13_000, "warning_at": 0.05, "critical_at": 0.1, "strategy": "rolling"}
    (folder / ".memoryd").mkdir(exist_ok=True)
    Workspace(folder).state.write_text(json.dumps(state))
    code, text = cli("status", str(folder), "--json")
    [row] = json.loads(text)
    assert code == 0 and row["budget_source"] == "daemon"
    assert (row["token_limit"], row["strategy"], row["level"]) == (13_000, "rolling", "critical")
    assert row["usage_ratio"] == round(row["tokens"] / 13_000, 4)
    table = cli("status", str(folder))[1]
    assert "BUDGET" in table and " rolling   daemon " in table

    config = tmp_path / "mine.toml"
    config.write_text("token_limit = 50000\n")
    [row] = json.loads(cli("--config", str(config), "status", str(folder), "--json")[1])
    assert (row["token_limit"], row["budget_source"]) == (50_000, "config")
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    [row] = json.loads(cli("status", str(folder), "--json")[1])
    assert (row["token_limit"], row["budget_source"]) == (50_000, "config")


@pytest.mark.slow
def test_every_status_surface_reports_the_budget_of_a_daemon_started_with_config(
    tmp_path: Path, procs: Processes
) -> None:
    """The demo's setup: a daemon whose --config says token_limit = 13000. status (table and
    JSON), status --watch and MCP context_status, run without --config, report 13,000 and
    the daemon's usage and level; with another --config, that file's budget."""
    root = tmp_path / "root"
    ws = root / "ws"
    write_lines(ws, "w", 40)
    config = tmp_path / "memoryd.toml"
    config.write_text('token_limit = 13000\n[summarizer]\nbackend = "extractive"\n')
    daemon = procs.daemon([root], tmp_path / "daemon-home", config=config)
    daemon.wait_ready()
    wait_until(
        lambda: (read_state(Workspace(ws)) or {}).get("messages") == 40, 10, "the daemon's count"
    )
    state = read_state(Workspace(ws)) or {}
    assert state["token_limit"] == 13_000 and 0.05 < state["usage_ratio"] < 0.8

    env = clean_env(tmp_path / "home")
    memoryd = [sys.executable, "-m", "memoryd"]
    shown = subprocess.run([*memoryd, "status", str(ws), "--json"], env=env, capture_output=True)
    [row] = json.loads(shown.stdout)
    assert (row["token_limit"], row["budget_source"]) == (13_000, "daemon")
    assert (row["usage_ratio"], row["level"]) == (state["usage_ratio"], state["level"])
    table = subprocess.run([*memoryd, "status", str(ws)], env=env, capture_output=True, text=True)
    assert f"{state['tokens']:,}/13,000" in table.stdout and " daemon " in table.stdout

    other = tmp_path / "other.toml"
    other.write_text("token_limit = 100000\n")
    argv = [*memoryd, "--config", str(other), "status", str(ws), "--json"]
    [row] = json.loads(subprocess.run(argv, env=env, capture_output=True).stdout)
    assert (row["token_limit"], row["budget_source"]) == (100_000, "config")

    watch = subprocess.Popen(
        [*memoryd, "status", str(root), "--watch", "--interval", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stdout is not None
        frame = [watch.stdout.readline() for _ in range(3)]
    finally:
        watch.kill()
        watch.communicate(timeout=30)
    assert frame[2].startswith(str(ws)) and f"{state['usage_ratio']:4.0%}" in frame[2]

    async def ask_mcp() -> dict[str, Any]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "memoryd", "mcp", "--root", str(root)], env=env
        )
        with anyio.fail_after(60):
            async with Client(params) as client:
                result = await client.call_tool("context_status", {"workspace": "ws"})
        assert not result.is_error, result.content
        content: dict[str, Any] = result.structured_content
        return content

    status = anyio.run(ask_mcp)
    assert (status["token_limit"], status["budget_source"]) == (13_000, "daemon")
    assert (status["usage_ratio"], status["level"]) == (state["usage_ratio"], state["level"])
