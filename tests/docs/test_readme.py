"""The README as a newcomer follows it: every command block of "Try it" and "Wire your
agent" runs, in a temporary folder with ``memoryd`` on PATH as an installed one would be,
and does what the README says of it. The pip install of the first command needs PyPI (its
build backend), so the test runs the command's ``memoryd demo`` with this checkout; every
other block runs as written, but for the MCP configuration's placeholder root, which the
README tells the reader to replace."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_helpers import memoryd_on_path
from daemon_harness import wait_until
from mcp import Client
from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
PLACEHOLDER_ROOT = "/home/me/agents"


def section(title: str) -> str:
    """The text of the README's ``## title`` section, up to the next ``## ``."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert found is not None, f"the README has no section {title!r}"
    return found[1]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def commands(block: str) -> list[str]:
    """The block's commands, one a line, continuation lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


TRY_IT = section("Try it")
WIRE = section("Wire your agent")


@pytest.fixture
def newcomer(tmp_path: Path) -> dict[str, str]:
    """An environment with this checkout's memoryd (and a python that imports it) first on
    PATH, a home of its own, no API key, and the examples where a checkout has them."""
    bin_folder = memoryd_on_path(tmp_path)
    python = bin_folder / "python"
    python.write_text(
        f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} "$@"\n'
    )
    python.chmod(0o755)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMORYD_"))}
    env |= {"PATH": f"{bin_folder}{os.pathsep}{env['PATH']}", "HOME": str(home)}
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["XDG_STATE_HOME"] = str(home / ".state")
    env["PYTHONPATH"] = str(REPO)  # what the demo prints runs this interpreter with -m
    return env


def run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return done


def test_the_two_sections_hold_the_blocks_the_newcomer_runs() -> None:
    assert len(blocks(TRY_IT, "sh")) == 2
    assert len(blocks(WIRE, "python")) == 1
    assert len(blocks(WIRE, "sh")) == 2
    assert len(blocks(WIRE, "json")) == 1


def test_the_test_command_is_the_fast_stage_ci_runs() -> None:
    """The README's test command installs the test extra and runs the stage .ci/run runs
    first, with the same marker expression."""
    [line] = commands(blocks(TRY_IT, "sh")[1])
    venv, install, pytest_run = line.split(" && ")
    assert venv == "python3 -m venv .venv"
    assert install == ".venv/bin/pip install -e '.[test]'"
    ci = (REPO / ".ci" / "run").read_text()
    marker = shlex.split(pytest_run)[-2:]
    assert shlex.split(pytest_run)[:3] == [".venv/bin/python", "-m", "pytest"]
    assert f"stage {shlex.join(marker).replace(chr(39), chr(34))}" in ci
    assert "'.[test,lint,docs]'" in ci, "CI installs at least the extra the README installs"


@pytest.mark.slow
def test_try_it_the_demo_prints_what_the_readme_says(
    tmp_path: Path, newcomer: dict[str, str]
) -> None:
    """The first command's ``memoryd demo``, run in a fresh folder: it prints the two
    commands the README names, its log shows the job, and each printed command works."""
    [line] = commands(blocks(TRY_IT, "sh")[0])
    assert line == "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/memoryd demo"
    assert "It prints two commands to\ntry in another terminal (`status`, and `append`" in TRY_IT
    demo = line.split(" && ")[-1].replace(".venv/bin/memoryd", "memoryd")
    process = subprocess.Popen(
        ["bash", "-c", f"exec {demo}"],
        cwd=tmp_path,
        env=newcomer,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed: list[str] = []
    events: list[str] = []
    try:
        assert process.stdout is not None
        for out in process.stdout:
            if out.startswith("{"):
                events.append(json.loads(out)["event"])
                if events[-1] == "job_finished":
                    break
            else:
                printed.append(out.rstrip("\n"))
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)
    assert "summarize_dispatched" in events and events[-1] == "job_finished"
    to_try = [found[1] for text in printed if (found := re.match(r"  [a-z ]+: +(\S.*)", text))]
    assert len(to_try) == 2
    assert shlex.split(to_try[0])[-1] == "status" and "--config" in to_try[0]
    assert "append" in shlex.split(to_try[1])
    for command in to_try:
        run(command, tmp_path, newcomer)
    assert (tmp_path / "memoryd-demo" / "example-agent" / "HEARTBEAT.md").exists()


def test_wire_the_python_block_appends_blocks_and_gives_a_valid_view(
    tmp_path: Path, newcomer: dict[str, str]
) -> None:
    [code] = blocks(WIRE, "python")
    assert '"type": "tool_use"' in code and '"type": "tool_result"' in code
    run(f"python - <<'EOF'\n{code}EOF", tmp_path, newcomer)
    lines = (tmp_path / "agents" / "fix-bug" / "conversation.jsonl").read_text().splitlines()
    messages = [json.loads(line) for line in lines]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0].get("pinned") is True
    assert messages[2]["content"][0]["tool_use_id"] == messages[1]["content"][1]["id"]


def test_wire_the_cli_block_runs_line_by_line(tmp_path: Path, newcomer: dict[str, str]) -> None:
    """Each line exits 0; ``memoryd messages`` prints the API view of what was appended,
    and ``status`` shows the workspace."""
    outputs = [run(line, tmp_path, newcomer).stdout for line in commands(blocks(WIRE, "sh")[0])]
    view: list[dict[str, Any]] = json.loads(outputs[-2])
    assert [turn["role"] for turn in view] == ["user", "assistant", "user"]
    assert view[1]["content"][0]["type"] == "tool_use"
    assert view[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_02",
        "content": "src tests",
    }
    assert "fix-bug" in outputs[-1]


@pytest.mark.slow
def test_wire_the_example_block_runs_the_offline_loop_under_a_daemon(
    tmp_path: Path, newcomer: dict[str, str]
) -> None:
    """``memoryd run --root agents &`` and then the example, offline, as written: the
    daemon compacts the conversation while it runs (with the daemon's default budget;
    the command gives the workspace its own), and ``memoryd history`` as written lists
    the compactions. The daemon is stopped with SIGTERM afterwards and exits 0."""
    first, second, third = commands(blocks(WIRE, "sh")[1])
    assert first.endswith(" &") and "--offline" in second and third.startswith("memoryd history")
    (tmp_path / "agents").mkdir()
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = subprocess.Popen(
            ["bash", "-c", f"exec {first.removesuffix(' &')}"],
            cwd=tmp_path,
            env=newcomer,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "daemon_ready" in log.read_text(), 30, "daemon_ready")
        done = run(second, tmp_path, newcomer)
        turns = re.search(r"--turns (\d+)", second)
        assert turns is not None and f"{turns[1]} turns" in done.stdout
        workspace = tmp_path / "agents" / "demo-loop"
        compacted = re.search(r"compacted the conversation (\d+) times", done.stdout)
        assert compacted is not None, done.stdout
        # A job still running at the last turn is the daemon's to finish: wait for one.
        wait_until(
            lambda: list((workspace / ".memoryd" / "archive").glob("*.jsonl")), 30, "a compaction"
        )
        history = run(third, tmp_path, newcomer).stdout
        assert re.search(r"\b[1-9]\d* jobs? \([1-9]\d* completed", history), history
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(45) == 0
    assert (workspace / "HEARTBEAT.md").exists(), "the daemon saw the new workspace"


@pytest.mark.slow
def test_wire_the_mcp_configuration_starts_the_server_and_recall_answers(
    tmp_path: Path, newcomer: dict[str, str]
) -> None:
    """The JSON block is examples/mcp.json; with the root replaced, the MCP SDK's client
    starts it by name from PATH, as Claude Desktop, Claude Code and Cursor do."""
    [text] = blocks(WIRE, "json")
    config = json.loads(text)
    assert config == json.loads((REPO / "examples" / "mcp.json").read_text())
    server = config["mcpServers"]["memoryd"]
    root = tmp_path / "agents"
    (root / "alice").mkdir(parents=True)
    (root / "alice" / "conversation.jsonl").write_text("")
    args = [str(root) if arg == PLACEHOLDER_ROOT else arg for arg in server["args"]]
    params = StdioServerParameters(command=server["command"], args=args, env=newcomer)

    async def session() -> tuple[set[str], Any]:
        async with Client(params) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            return tools, await client.call_tool("recall", {"query": "anything"})

    tools, result = anyio.run(session)
    assert {"recall", "expand", "context_status", "conversation_messages"} <= tools
    assert not result.is_error and result.structured_content == {"hits": []}


def test_the_readme_links_only_to_files_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local, "no local link found: the search is broken"
    assert [link for link in local if not (REPO / link).exists()] == []


def test_the_readme_stays_a_front_door() -> None:
    assert len(README.splitlines()) <= 300
