"""The ``source`` argument of the MCP ``recall`` and ``expand`` tools: other agents'
sessions (Claude Code, Codex CLI, Gemini CLI) served read-only, from the ``[[sources]]``
of the configuration and ``memoryd mcp --source PATH`` (docs/guides/sources.md)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Literal, NotRequired, cast

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from typing_extensions import TypedDict

from memoryd.errors import MemorydError
from memoryd.search.sessions.search import Pick, SourceHit, expand_source, recall_source

RoleArg = Annotated[
    Literal["user", "assistant", "tool", "summary", "info"] | None,
    Field(
        description="Only this role's messages; tool (a tool's output), summary and info are "
        "in another agent's sessions only."
    ),
]
SourceKind = Literal["claude-code", "codex", "gemini"]
SourceArg = Annotated[
    SourceKind | None,
    Field(
        description="Search another agent's past sessions instead of memoryd's archive: "
        "claude-code, codex or gemini (the session folder this server was given for it)."
    ),
]

SessionPickArg = Annotated[
    str | None,
    Field(
        description="With source, when one id is in several sessions: the copy in this "
        "session (a hit's `session`); else the line said first."
    ),
]
FilePickArg = Annotated[
    str | None,
    Field(
        description="With source, when one id is in several files: the copy in this file "
        "(a hit's `file` or one of its `copies`)."
    ),
]


class ExpandOut(TypedDict):
    workspace: str
    id: str
    lines: list[str]
    """The original JSON lines, oldest first, the message itself among them."""
    notes: NotRequired[list[str]]
    """With ``source``: that several different lines have this id, and which was given."""


class SourceHitOut(TypedDict):
    """One message of an agent's past session that matches."""

    source: str
    session: str | None
    project: str | None
    id: str
    role: str | None
    timestamp: int | None
    file: str
    offset: int
    length: int
    snippet: str
    score: float
    copies: list[str]
    """Other files holding the same line (a subagent's copy); ``file`` said it first."""


def source_path(sources: tuple[tuple[str, Path], ...], kind: str) -> Path:
    """The folder served for ``kind``; a one-line ToolError when there is none."""
    for served_kind, path in sources:
        if served_kind == kind:
            return path
    served = ", ".join(k for k, _ in sources) or "none"
    raise ToolError(
        f"no {kind} sessions are served (served: {served}); add a [[sources]] entry or "
        "run memoryd mcp --source PATH"
    )


def source_search(
    path: Path, kind: str, query: str, limit: int, role: str | None
) -> functools.partial[list[SourceHit]]:
    """The search of a recall call on a source (run with ``cancelled=``)."""
    return functools.partial(recall_source, path, query, limit, role, source=kind)


def source_hit(hit: SourceHit) -> SourceHitOut:
    """A hit as the tool returns it: the form ``memoryd recall --json`` prints, but for
    ``all_words``."""
    shown = hit.as_dict()
    del shown["all_words"]
    return cast(SourceHitOut, shown)


def source_expand(
    path: Path,
    kind: str,
    id: str,
    before: int,
    after: int,
    session: str | None = None,
    file: str | None = None,
) -> ExpandOut:
    """What the ``expand`` tool returns for a source's message: its original lines as
    text, the copy in ``session`` or ``file`` when given, and ``notes`` when several
    different lines have the id."""
    notes: list[str] = []
    try:
        lines = expand_source(
            path, id, before, after, source=kind, pick=Pick(session, file), notes=notes
        )
    except MemorydError as exc:
        raise ToolError(str(exc)) from None
    text = [line.decode("utf-8", "replace").rstrip("\n") for line in lines]
    out: ExpandOut = {"workspace": str(path), "id": id, "lines": text}
    if notes:
        out["notes"] = notes
    return out
