"""``memoryd mcp`` as a real subprocess, driven by the official MCP SDK's own stdio client:
the tools are listed with schemas and descriptions, each tool answers, bad arguments and
paths outside the served folder are refused with an error result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import SettingsFactory, encode_lines, generated_messages
from mcp import Client
from mcp_client import error_text, structured, with_server

from memoryd import __version__
from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.conversation.api_view import messages_for_api
from memoryd.search.query import MAX_LIMIT

REPO = Path(__file__).resolve().parents[2]
TOOLS = {
    "recall",
    "expand",
    "context_status",
    "conversation_messages",
    "memory_write",
    "memory_read",
}


def summarized_workspace(folder: Path, tag: str, make_settings: SettingsFactory) -> None:
    folder.mkdir(parents=True)
    messages = generated_messages(60, 300)
    for n, message in enumerate(messages):
        message["content"] += f" {tag}{n:04d}q"
    (folder / "conversation.jsonl").write_bytes(encode_lines(messages))
    job = make_settings(token_limit=4000, index_archive=False)
    assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"


def archived(folder: Path, message_id: str) -> str:
    for archive in (folder / ".memoryd" / "archive").iterdir():
        for line in archive.read_text().splitlines():
            if json.loads(line).get("id") == message_id:
                return line
    raise AssertionError(f"{message_id} is not archived")


@pytest.mark.slow
def test_mcp_round_trip_over_a_root(tmp_path: Path, make_settings: SettingsFactory) -> None:
    root = tmp_path / "agents"
    alpha, beta = root / "alpha", root / "team" / "beta"
    summarized_workspace(alpha, "alf", make_settings)
    summarized_workspace(beta, "bet", make_settings)
    outside = tmp_path / "outside"
    summarized_workspace(outside, "out", make_settings)

    async def session(client: Client) -> None:
        listed = (await client.list_tools()).tools
        assert {tool.name for tool in listed} == TOOLS
        for tool in listed:
            assert tool.description and len(tool.description) > 60
            properties = tool.input_schema["properties"]
            assert properties and all(p.get("description") for p in properties.values())

        hits = structured(await client.call_tool("recall", {"query": "bet0007q"}))["hits"]
        assert [(Path(h["workspace"]).name, h["id"]) for h in hits] == [("beta", "msg-0007")]
        assert "**bet0007q**" in hits[0]["snippet"]
        everywhere = structured(await client.call_tool("recall", {"query": "msg-0003"}))["hits"]
        assert {Path(h["workspace"]).name for h in everywhere} == {"alpha", "beta"}

        expanded = structured(
            await client.call_tool(
                "expand", {"workspace": "team/beta", "id": "msg-0007", "before": 1}
            )
        )
        assert expanded["lines"] == [archived(beta, "msg-0006"), archived(beta, "msg-0007")]

        status = structured(await client.call_tool("context_status", {"workspace": str(alpha)}))
        assert status["messages"] == (alpha / "conversation.jsonl").read_bytes().count(b"\n")
        assert 0 < status["usage_ratio"] < 1 and status["level"] == "normal"
        assert status["action"] == "none" and status["heartbeat"]["status"] == "completed"
        assert status["media"] == {"images": 0, "documents": 0, "tokens": 0, "share": 0.0}

        entry = {"text": "we ship on friday"}
        written = structured(
            await client.call_tool(
                "memory_write", {"workspace": "alpha", "store": "decisions", "entry": entry}
            )
        )
        assert written["written"] is True and written["entry_count"] == 1
        read = structured(
            await client.call_tool("memory_read", {"workspace": "alpha", "store": "decisions"})
        )
        assert [e["text"] for e in read["entries"]] == ["we ship on friday"]

        bad = await client.call_tool("recall", {"query": "x", "limit": "many"})
        assert "limit" in error_text(bad)
        assert "no words" in error_text(await client.call_tool("recall", {"query": "!!!"}))
        assert "store" in error_text(
            await client.call_tool("memory_read", {"workspace": "alpha", "store": "secrets"})
        )
        refused = await client.call_tool("expand", {"workspace": str(outside), "id": "msg-0001"})
        assert "outside" in error_text(refused)
        refused = await client.call_tool("recall", {"workspace": "../outside", "query": "out*"})
        assert "outside" in error_text(refused)
        unnamed = await client.call_tool("expand", {"id": "msg-0001"})
        assert "name the workspace" in error_text(unnamed)
        unknown = await client.call_tool("expand", {"workspace": "alpha", "id": "nope"})
        assert "no message with this id" in error_text(unknown)

    with_server(tmp_path, "--root", str(root))(session)
    assert not (outside / "memory").exists()
    assert (
        json.loads((alpha / "memory" / "decisions.jsonl").read_text())["text"]
        == "we ship on friday"
    )


@pytest.mark.slow
def test_mcp_server_for_one_workspace_needs_no_workspace_argument(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    alpha = tmp_path / "alpha"
    summarized_workspace(alpha, "alf", make_settings)

    async def session(client: Client) -> None:
        hits = structured(await client.call_tool("recall", {"query": "alf0002q"}))["hits"]
        assert [h["id"] for h in hits] == ["msg-0002"]
        lines = structured(await client.call_tool("expand", {"id": "msg-0002"}))["lines"]
        assert lines == [archived(alpha, "msg-0002")]
        other = await client.call_tool("context_status", {"workspace": str(tmp_path)})
        assert "outside" in error_text(other)
        view = structured(await client.call_tool("conversation_messages", {}))
        assert view["workspace"] == str(alpha)
        assert view["messages"] == messages_for_api(alpha)
        assert view["messages"][0]["role"] == "user"
        assert "[Summary of earlier conversation]" in json.dumps(view["messages"][0])
        off = structured(await client.call_tool("conversation_messages", {"thinking": False}))
        assert off["messages"] == messages_for_api(alpha, thinking=False)
        refused = await client.call_tool("conversation_messages", {"workspace": str(tmp_path)})
        assert "outside" in error_text(refused)

    with_server(tmp_path, "--workspace", str(alpha))(session)


def test_mcp_refuses_roots_that_do_not_exist(tmp_path: Path) -> None:
    assert cli("mcp", "--root", str(tmp_path / "nope"))[0] == 2
    assert cli("mcp", "--workspace", str(tmp_path / "nope"))[0] == 2
    config = tmp_path / "memoryd.toml"
    config.write_text(f'roots = ["{tmp_path / "missing"}"]\n')
    assert cli("--config", str(config), "mcp")[0] == 2


def test_mcp_server_names_its_version_advertises_tools_only_and_annotates_them(
    tmp_path: Path,
) -> None:
    alpha = tmp_path / "alpha"
    alpha.mkdir()
    (alpha / "conversation.jsonl").write_bytes(encode_lines(generated_messages(4, 50)))

    async def session(client: Client) -> None:
        assert client.server_info is not None
        assert (client.server_info.name, client.server_info.version) == ("memoryd", __version__)
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.prompts is None and capabilities.resources is None
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        for name, tool in listed.items():
            assert tool.description is not None
            assert all(line == line.lstrip() for line in tool.description.splitlines()), name
            assert tool.annotations is not None and tool.annotations.open_world_hint is False
            assert tool.annotations.read_only_hint is (name != "memory_write"), name
        assert listed["memory_write"].annotations is not None
        assert listed["memory_write"].annotations.destructive_hint is False
        limit = listed["recall"].input_schema["properties"]["limit"]
        assert limit["maximum"] == MAX_LIMIT

    with_server(tmp_path, "--workspace", str(alpha))(session)


def test_mcp_tool_errors_are_one_line_naming_the_argument(tmp_path: Path) -> None:
    alpha = tmp_path / "alpha"
    alpha.mkdir()
    (alpha / "conversation.jsonl").write_bytes(encode_lines(generated_messages(4, 50)))

    async def refused(client: Client, name: str, arguments: dict[str, Any]) -> str:
        text = error_text(await client.call_tool(name, arguments))
        assert "\n" not in text and "http" not in text, text
        return text

    async def session(client: Client) -> None:
        text = await refused(client, "recall", {"query": "x", "limit": "many"})
        assert "argument limit:" in text and "many" not in text
        text = await refused(client, "recall", {"query": "x", "limit": MAX_LIMIT + 1})
        assert "argument limit:" in text and str(MAX_LIMIT) in text
        assert "argument query: is required" in await refused(client, "recall", {})
        text = await refused(client, "memory_read", {"store": "secrets"})
        assert "argument store:" in text and "secrets" not in text
        empty = {"store": "lessons", "entry": {"text": ""}}
        assert "empty" in await refused(client, "memory_write", empty)
        huge = {"store": "lessons", "entry": {"text": "y" * 20_000}}
        assert "max_entry_bytes (16384)" in await refused(client, "memory_write", huge)
        assert "no message with this id" in await refused(client, "expand", {"id": "nope"})

    with_server(tmp_path, "--workspace", str(alpha))(session)
    assert not (alpha / "memory" / "lessons.jsonl").exists()
