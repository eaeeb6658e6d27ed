"""Call memoryd's ``recall`` tool through MCP, as an agent's client does.

It reads an MCP client configuration of the form Claude Desktop, Claude Code and Cursor
use (examples/mcp.json: ``{"mcpServers": {"memoryd": {"command": ..., "args": [...]}}}``),
starts that server over stdio with the official MCP SDK's client, and prints the hits:

    python examples/mcp_recall.py examples/mcp.json "connection string"
    python examples/mcp_recall.py my-config.json "deploy key" --limit 3 --workspace alice

Write your own root in the configuration first (examples/mcp.json names /home/me/agents).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def server_parameters(config: Path, name: str) -> StdioServerParameters:
    """The stdio server ``name`` of an MCP client configuration file."""
    servers = json.loads(config.read_text(encoding="utf-8"))["mcpServers"]
    spec = servers[name]
    return StdioServerParameters(
        command=spec["command"], args=spec.get("args", []), env=spec.get("env")
    )


async def recall(params: StdioServerParameters, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """The hits of one ``recall`` call, as the tool returns them."""
    async with Client(params) as client:
        result = await client.call_tool("recall", arguments)
    if result.is_error:
        said = [getattr(block, "text", "") for block in result.content]
        raise RuntimeError(" ".join(said) or "recall failed")
    hits: list[dict[str, Any]] = (result.structured_content or {})["hits"]
    return hits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="an MCP client configuration (JSON)")
    parser.add_argument("query", help="words or a question")
    parser.add_argument("--server", default="memoryd", help="its name in mcpServers")
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--workspace", help="one workspace, relative to the served root")
    args = parser.parse_args(argv)
    try:
        params = server_parameters(args.config, args.server)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"{args.config}: not an MCP configuration with server {args.server!r} ({exc})")
    arguments: dict[str, Any] = {"query": args.query, "limit": args.limit}
    if args.workspace:
        arguments["workspace"] = args.workspace
    try:
        hits = anyio.run(recall, params, arguments)
    except RuntimeError as exc:
        print(f"mcp_recall: {exc}", file=sys.stderr)
        return 1
    for hit in hits:
        mark = "all words" if hit["all_words"] else "some words"
        print(f"{hit['workspace']}  {hit['role']}  {hit['id']}  ({mark})\n    {hit['snippet']}")
    if not hits:
        print("no matches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
