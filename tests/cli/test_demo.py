"""``memoryd demo DIR``: the README's first command. It owns its folder (new, empty or an
earlier demo's), writes real TOML, starts the example afresh on every run, and prints its
follow-up commands, runnable as printed, on stdout."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli

from memoryd.cli.demo import demo_log_format
from memoryd.config.settings import load_settings, settings_for_workspace
from memoryd.demo import DEMO_TOKEN_LIMIT, prepare_demo


def run_demo(folder: Path, home: Path) -> tuple[list[dict[str, Any]], list[str], int]:
    """Run `python -m memoryd demo FOLDER` until its first job finishes, then SIGINT.

    Returns the JSON log events, the other stdout lines and the exit code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMORYD_"))}
    env["HOME"] = str(home)
    process = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "demo", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    events: list[dict[str, Any]] = []
    printed: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if not line.startswith("{"):
                printed.append(line.rstrip("\n"))
                continue
            events.append(json.loads(line))
            if events[-1]["event"] == "job_finished":
                break
        process.send_signal(signal.SIGINT)
        code = process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)
    return events, printed, code


def summary_at_head(folder: Path) -> bool:
    head = (folder / "example-agent" / "conversation.jsonl").read_bytes().split(b"\n")[0]
    return bool(json.loads(head).get("isSummary"))


@pytest.mark.slow
def test_demo_summarizes_again_on_a_second_run_and_prints_runnable_commands(
    tmp_path: Path,
) -> None:
    """Both runs summarize the shipped example with the extractive backend and stop with
    exit 0 on SIGINT; the printed status command, run as printed, shows the workspace."""
    folder = tmp_path / "demo"
    for _ in range(2):
        events, printed, code = run_demo(folder, tmp_path)
        assert code == 0
        finished = [e for e in events if e["event"] == "job_finished"]
        assert finished and finished[0]["outcome"] == "completed"
        starting = next(e for e in events if e["event"] == "daemon_starting")
        assert starting["summarizer"] == "extractive"
        assert summary_at_head(folder)
    status_line = next(line for line in printed if "--config" in line and "status" in line)
    command = shlex.split(status_line.split(":", 1)[1])
    assert command[:3] == [sys.executable, "-m", "memoryd"]
    done = subprocess.run(
        [*command, "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert row["workspace"] == str(folder / "example-agent")
    assert (row["token_limit"], row["budget_source"]) == (DEMO_TOKEN_LIMIT, "workspace")


def test_demo_refuses_a_folder_with_other_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing memoryd.toml of the user's, or another workspace: exit 2, nothing touched."""
    folder = tmp_path / "mine"
    (folder / "other-agent").mkdir(parents=True)
    (folder / "other-agent" / "conversation.jsonl").write_text('{"role":"user","content":"x"}\n')
    (folder / "memoryd.toml").write_text("token_limit = 5000\n")
    code, _ = cli("demo", str(folder))
    assert code == 2
    err = capsys.readouterr().err
    assert "already holds other files" in err and len(err.strip().splitlines()) == 1
    assert (folder / "memoryd.toml").read_text() == "token_limit = 5000\n"
    assert sorted(p.name for p in folder.iterdir()) == ["memoryd.toml", "other-agent"]


def test_demo_refuses_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    assert cli("demo", str(path))[0] == 2
    assert path.read_text() == "x"


@pytest.mark.parametrize("name", ['with "quotes"', "back\\slash", "a\ttab", "naïve ünïcode"])
def test_the_demo_config_is_valid_toml_for_any_folder_name(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    config = prepare_demo(folder)
    settings = load_settings(config, env={}).settings
    assert settings.roots == [folder]
    assert settings.summarizer.backend == "extractive"
    workspace = settings_for_workspace(settings, folder / "example-agent")
    assert workspace.token_limit == DEMO_TOKEN_LIMIT


def test_every_command_sees_the_demo_budget_without_the_demo_config(tmp_path: Path) -> None:
    """The budget is the workspace's own: status without --config counts against it."""
    folder = tmp_path / "demo"
    prepare_demo(folder)
    code, text = cli("status", str(folder / "example-agent"), "--json")
    assert code == 0
    [row] = json.loads(text)
    assert (row["token_limit"], row["budget_source"]) == (DEMO_TOKEN_LIMIT, "workspace")
    assert row["usage_ratio"] > 0.8


def test_a_second_prepare_resets_the_example(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    config = prepare_demo(folder)
    conversation = folder / "example-agent" / "conversation.jsonl"
    original = conversation.read_bytes()
    conversation.write_bytes(b'{"role":"user","content":"changed"}\n')
    (folder / "example-agent" / ".memoryd" / "state.json").write_text("{}")
    assert prepare_demo(folder) == config
    assert conversation.read_bytes() == original
    assert [p.name for p in (folder / "example-agent" / ".memoryd").iterdir()] == ["config.toml"]


def test_the_demo_logs_for_a_person_on_a_terminal_unless_a_format_was_chosen() -> None:
    assert demo_log_format("default", terminal=True) == "console"
    assert demo_log_format("default", terminal=False) is None
    assert demo_log_format("flag", terminal=True) is None
    assert demo_log_format("env MEMORYD_LOG_FORMAT", terminal=True) is None
