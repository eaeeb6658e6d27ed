"""What ``memoryd mcp`` adds to the MCP SDK's ``MCPServer``: one-line argument errors,
dedented tool descriptions, tool annotations and the methods it does not serve
(docs/design.md#mcp-server)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import ValidationError

READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
"""A tool that only reads the served workspaces."""
APPENDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
"""A tool that appends (a second call appends again) and never rewrites or deletes."""
UNSERVED = (
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
)
"""Methods the SDK answers with empty lists; without them the server does not advertise
prompts or resources it does not have."""

_Tool = TypeVar("_Tool", bound=Callable[..., Any])


class ToolServer(MCPServer):
    """``MCPServer`` whose argument errors are one line naming the argument
    (docs/design.md#mcp-server)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Call a tool; a refused argument raises a one-line ``ToolError``."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {argument_problem(cause)}") from None


def argument_problem(error: ValidationError) -> str:
    """The first problem of a refused argument on one line: the argument's name and what is
    wrong, never the value given (it is the caller's data) nor pydantic's help URL."""
    problems = error.errors(include_url=False, include_input=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "arguments"
    message = " ".join(str(first["msg"]).split())
    if first["type"] == "missing":
        message = "is required"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"argument {where}: {message}{more}"


def tool(server: MCPServer, name: str, annotations: ToolAnnotations) -> Callable[[_Tool], _Tool]:
    """Register a tool under ``name`` with its docstring, dedented, as its description."""

    def register(fn: _Tool) -> _Tool:
        description = inspect.cleandoc(fn.__doc__ or "")
        server.add_tool(fn, name=name, description=description, annotations=annotations)
        return fn

    return register
