"""examples/mcp.json and examples/mcp_recall.py: the MCP client configuration the README
gives, started by the official MCP SDK's client as Claude Desktop, Claude Code or Cursor
start it, and a ``recall`` through it whose hits carry what ``recall --json`` gives."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest
from cli_helpers import cli, memoryd_on_path
from conftest import SettingsFactory, encode_lines, generated_messages

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summarized_root(root: Path, make_settings: SettingsFactory) -> Path:
    workspace = root / "alice"
    workspace.mkdir(parents=True)
    messages = generated_messages(60, 300)
    for n, message in enumerate(messages):
        message["content"] += f" alf{n:04d}q"
    (workspace / "conversation.jsonl").write_bytes(encode_lines(messages))
    job = make_settings(token_limit=4000, index_archive=False)
    assert run_job(JobRequest(workspace, job, force=True)).outcome == "completed"
    return workspace


@pytest.mark.slow
def test_recall_through_the_example_configuration(
    tmp_path: Path,
    make_settings: SettingsFactory,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """capfd, not capsys: the SDK hands the server its stderr, which must be a file."""
    root = tmp_path / "agents"
    summarized_root(root, make_settings)
    example = json.loads((EXAMPLES / "mcp.json").read_text())
    server = example["mcpServers"]["memoryd"]
    assert server["command"] == "memoryd"
    assert server["args"] == ["mcp", "--root", "/home/me/agents"]
    server["args"][-1] = str(root)  # what the reader is told to do: their own root
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps(example))
    monkeypatch.setenv("PATH", f"{memoryd_on_path(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    mcp_recall = load("mcp_recall")
    assert mcp_recall.main([str(config), "alf0007q"]) == 0
    printed = capfd.readouterr().out
    assert "msg-0007  (all words)" in printed
    assert "**alf0007q**" in printed

    params = mcp_recall.server_parameters(config, "memoryd")
    import anyio

    hits = anyio.run(mcp_recall.recall, params, {"query": "alf0007q alf0009q"})
    code, out = cli("recall", str(root), "alf0007q alf0009q", "--json")
    assert code == 0
    from_cli = json.loads(out)
    assert [set(hit) for hit in hits] == [set(hit) for hit in from_cli]
    assert [hit["all_words"] for hit in hits] == [hit["all_words"] for hit in from_cli]
    assert [hit["all_words"] for hit in hits] == [False, False]


def test_a_configuration_without_the_server_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {}}')
    with pytest.raises(SystemExit) as exited:
        load("mcp_recall").main([str(config), "query"])
    assert exited.value.code == 2
    assert "not an MCP configuration with server 'memoryd'" in capsys.readouterr().err
