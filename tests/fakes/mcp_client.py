"""Driving ``memoryd mcp`` as a real subprocess through the official MCP SDK's stdio client."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parents[2]


def with_server(
    tmp_path: Path, *scope: str
) -> Callable[[Callable[[Client], Awaitable[None]]], None]:
    """Run a session against ``memoryd mcp <scope>`` started by the SDK's stdio client."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", *scope],
        env={
            "PYTHONPATH": str(REPO),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        },
        cwd=str(tmp_path),
    )

    def run(session: Callable[[Client], Awaitable[None]]) -> None:
        async def main() -> None:
            with anyio.fail_after(60):
                async with Client(params) as client:
                    await session(client)

        anyio.run(main)

    return run


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    content: dict[str, Any] = result.structured_content
    return content


def error_text(result: Any) -> str:
    assert result.is_error
    text: str = result.content[0].text
    return text
