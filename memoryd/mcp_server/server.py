"""``memoryd mcp``: recall, expand, context status, the API view and memory stores as MCP
tools (stdio).

Built on the official ``mcp`` SDK's ``MCPServer``; imported only by ``memoryd mcp``. The
server serves one workspace or the workspaces below its roots, and refuses any path
outside them (docs/design.md#recall).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for nested TypedDicts before 3.12

from memoryd import __version__
from memoryd.config.settings import Settings
from memoryd.errors import MemorydError
from memoryd.files.paths import check_workspace
from memoryd.mcp_server.sources import (
    ExpandOut,
    FilePickArg,
    RoleArg,
    SessionPickArg,
    SourceArg,
    SourceHitOut,
    source_expand,
    source_hit,
    source_path,
    source_search,
)
from memoryd.mcp_server.tools import APPENDS, READS, UNSERVED, ToolServer, tool
from memoryd.search.archive import Hit, expand, recall
from memoryd.search.query import MAX_LIMIT
from memoryd.stores import disk as stores
from memoryd.strict_json import valid_text, valid_unicode
from memoryd.workspace import CONVERSATION

T = TypeVar("T")
INSTRUCTIONS = (
    "memoryd keeps this agent's conversation inside its context budget by replacing old "
    "messages with a summary; the originals are archived, never lost. Use `recall` to "
    "search them when the summary lacks an exact detail (a path, an error text, a number), "
    "then `expand` to read a message word for word with the lines around it. "
    "`context_status` tells how full the context is and what to do about it. "
    "`conversation_messages` gives the conversation as a Messages-API `messages` list, "
    "ready to send to a model."
)


class HitOut(TypedDict):
    """One archived message that matches."""

    workspace: str
    id: str | None
    role: str | None
    timestamp: int | None
    archive: str
    offset: int
    length: int
    snippet: str
    score: float
    all_words: bool
    """The passage holds every word of the query (the first group of hits), as in
    ``memoryd recall --json``."""


class RecallOut(TypedDict):
    hits: list[HitOut | SourceHitOut]


class StatusOut(TypedDict):
    workspace: str
    messages: int
    tokens: int
    token_limit: int
    budget_source: str
    """Where token_limit comes from: daemon, workspace or config."""
    usage_ratio: float
    level: str
    action: str
    summarizing: bool
    last_summary_at: str | None
    strategy: str
    heartbeat: dict[str, str | None]
    media: dict[str, int | float]  # images, documents, their tokens and share of the count


class MessagesOut(TypedDict):
    workspace: str
    messages: list[dict[str, Any]]
    """The Messages-API ``messages`` list: ``role`` and ``content`` only."""
    left_out: list[int]
    """The line numbers (from 1) of malformed lines left out of the view."""


class EntriesOut(TypedDict):
    store: str
    entries: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Scope:
    """The workspaces a server may touch: one workspace, or everything below some roots."""

    roots: tuple[Path, ...]
    workspace: Path | None
    max_depth: int = 4
    sources: tuple[tuple[str, Path], ...] = ()
    """Other agents' session folders served to ``recall``/``expand`` by kind (read-only)."""

    @classmethod
    def for_workspace(cls, workspace: Path) -> Scope:
        """Serve one workspace (it must exist; a read-only one is served for reading)."""
        return cls((), check_workspace(Path(workspace), write=False).resolve())

    @classmethod
    def for_roots(cls, roots: list[Path], max_depth: int) -> Scope:
        """Serve every workspace below ``roots``."""
        return cls(tuple(Path(root).expanduser().resolve() for root in roots), None, max_depth)

    @property
    def bases(self) -> tuple[Path, ...]:
        return (self.workspace,) if self.workspace is not None else self.roots

    def path(self, given: str | None, *, workspace: bool) -> Path:
        """The folder a tool call names (relative to the served folder), refused outside it.

        With ``workspace``, it must be one workspace; otherwise a folder to search.
        """
        if given is None or not given.strip():
            if self.workspace is not None:
                return self.workspace
            if not workspace and len(self.roots) == 1:
                return self.roots[0]
            served = ", ".join(str(base) for base in self.bases)
            raise ToolError(f"name the workspace: this server serves the workspaces below {served}")
        if "\x00" in given:
            raise ToolError("the workspace path contains a NUL character")
        if len(given.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
            raise ToolError(f"the workspace path is longer than {MAX_PATH_BYTES} bytes")
        try:
            candidate = Path(given).expanduser()
            if not candidate.is_absolute():
                base = self.bases[0] if len(self.bases) == 1 else Path.cwd()
                candidate = base / candidate
            real = candidate.resolve()
            if not any(real == base or base in real.parents for base in self.bases):
                served = ", ".join(str(base) for base in self.bases)
                raise ToolError(f"{given}: is outside what this server serves ({served})")
            if workspace and not (real / CONVERSATION).is_file():
                raise ToolError(f"{given}: is not a workspace (no {CONVERSATION})")
        except (OSError, ValueError, RuntimeError) as exc:
            # A name too long for the file system, a loop of symlinks, ~user unknown.
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ToolError(f"the workspace path cannot be used: {reason}") from None
        return real


MAX_PATH_BYTES = 4096
"""The longest workspace path taken (Linux's PATH_MAX); longer is refused in words."""

WorkspaceArg = Annotated[
    str | None,
    Field(
        description="The workspace folder (absolute, or relative to the served folder). "
        "Leave it out when the server serves a single workspace."
    ),
]


def build_server(scope: Scope, settings: Settings, daemon_budget: bool = False) -> MCPServer:
    """An MCP server with memoryd's tools for ``scope``; with ``daemon_budget``,
    ``context_status`` counts a workspace against the budget the daemon recorded for it.

    It advertises tools only: no prompts, no resources, no list changes (the tools are
    fixed)."""
    server = ToolServer(
        "memoryd", instructions=INSTRUCTIONS, version=__version__, subscriptions=False
    )
    for method in UNSERVED:
        server._lowlevel_server._request_handlers.pop(method)

    @tool(server, "recall", READS)
    async def recall_tool(
        query: Annotated[
            str,
            Field(
                description="Words or a question. Messages with every word come first, "
                'then those with any. "Quote a phrase"; end a word with * to match a prefix.'
            ),
        ],
        workspace: WorkspaceArg = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_LIMIT, description="At most this many hits.")
        ] = 10,
        role: RoleArg = None,
        source: SourceArg = None,
    ) -> RecallOut:
        """Search the messages that were summarized away (the archive) for exact details.

        Use it when the conversation summary mentions something but not the detail you
        need. Returns the best hits with the message id, role, time and a snippet where
        the matched words are between ** **; pass an id to `expand` to read it in full.
        Without `workspace`, a server over a root searches every workspace below it.
        A search has a time budget; a cancelled call stops its search. With `source`, it
        searches that agent's past sessions instead (hits name the session and project).
        """
        if source is not None:
            found = source_search(source_path(scope.sources, source), source, query, limit, role)
            try:
                return {"hits": [source_hit(hit) for hit in await run_cancellable(found)]}
            except MemorydError as exc:
                raise ToolError(str(exc)) from None
        path = scope.path(workspace, workspace=False)
        search = functools.partial(recall, path, query, limit, role, max_depth=scope.max_depth)
        try:
            hits = await run_cancellable(search)
        except MemorydError as exc:
            raise ToolError(str(exc)) from None
        return {"hits": [_hit(hit) for hit in hits]}

    @tool(server, "expand", READS)
    def expand_tool(
        id: Annotated[str, Field(description="A message id, as returned by recall.")],
        workspace: WorkspaceArg = None,
        before: Annotated[int, Field(ge=0, le=50, description="Lines before it.")] = 0,
        after: Annotated[int, Field(ge=0, le=50, description="Lines after it.")] = 0,
        source: SourceArg = None,
        session: SessionPickArg = None,
        file: FilePickArg = None,
    ) -> ExpandOut:
        """Read one archived (or live) message word for word, with lines around it.

        Returns the original JSON lines exactly as they were appended, oldest first.
        Use the id of a recall hit, or the firstId/lastId of a summary message. With
        `source`, the message is one of that agent's sessions (lines in session order);
        when its id is in several files, `session` or `file` picks the copy.
        """
        if source is not None:
            path = source_path(scope.sources, source)
            return source_expand(path, source, id, before, after, session, file)
        if session is not None or file is not None:
            raise ToolError("session and file pick a copy in another agent's sessions: give source")
        path = scope.path(workspace, workspace=True)
        try:
            lines = expand(path, id, before, after)
        except MemorydError as exc:
            raise ToolError(str(exc)) from None
        text = [line.decode("utf-8", "replace").rstrip("\n") for line in lines]
        return {"workspace": str(path), "id": valid_text(id), "lines": text}

    @tool(server, "context_status", READS)
    def context_status(workspace: WorkspaceArg = None) -> StatusOut:
        """How full a workspace's context is, and what memoryd advises.

        `usage_ratio` is tokens / token_limit, the budget the daemon counts it against
        (`budget_source` says where that came from); `level` is normal, warning (from 70%) or
        critical (from 85%); `action` is none, prepare_handoff or force_return. The
        heartbeat says whether a summarization is running or how the last one ended;
        `media` how many images and documents the conversation holds and their share.
        """
        from memoryd.status.report import workspace_status

        path = scope.path(workspace, workspace=True)
        try:
            row = workspace_status(path, settings, time.time(), daemon_budget=daemon_budget)
        except (MemorydError, OSError) as exc:
            raise ToolError(str(exc)) from None
        return {key: row[key] for key in StatusOut.__annotations__}  # type: ignore[return-value]

    @tool(server, "conversation_messages", READS)
    def conversation_messages(
        workspace: WorkspaceArg = None,
        thinking: Annotated[bool, Field(description="false if sent with thinking off")] = True,
    ) -> MessagesOut:
        """The workspace's conversation as a Messages-API `messages` list, ready to send.

        conversation.jsonl is memoryd's record, not a request: this is the view a model
        accepts. Only role and content; the summary (or checkpoint) becomes a user turn;
        consecutive turns of one role are merged; every tool_result sits right after its
        tool_use (an orphaned one becomes text saying what it was); the first turn is the
        user's. Malformed lines (their line numbers in `left_out`) and a half-written
        last line are left out. Thinking blocks lead their turn, untouched; with
        `thinking` false (requests sent with extended thinking off) they are left out.
        """
        from memoryd.conversation.api_view import messages_for_api

        path = scope.path(workspace, workspace=True)
        left_out: list[int] = []
        try:
            messages = messages_for_api(path, left_out, thinking)
        except (MemorydError, OSError) as exc:
            raise ToolError(str(exc)) from None
        # A lone surrogate in a message cannot cross UTF-8 JSON (docs/design.md#odd-text).
        messages = valid_unicode(messages)
        return {"workspace": str(path), "messages": messages, "left_out": left_out}

    @tool(server, "memory_write", APPENDS)
    def memory_write(
        store: Annotated[
            Literal["bookmarks", "todos", "decisions", "lessons"],
            Field(description="decisions and lessons are kept forever; the others are compacted."),
        ],
        entry: Annotated[
            dict[str, Any],
            Field(description='A JSON object, e.g. {"text": "...", "status": "open"}.'),
        ],
        workspace: WorkspaceArg = None,
    ) -> dict[str, Any]:
        """Append one entry to a memory store of the workspace (never rewrites it).

        Memory stores outlive summaries: write what must not be forgotten (a decision, a
        lesson, a todo, a bookmark of where you are). A timestamp is added if missing.
        Keep an entry short (a path or message id rather than the text itself): an empty
        entry, or one longer than the server's memory.max_entry_bytes (16 KiB unless
        configured), is refused.
        """
        path = scope.path(workspace, workspace=True)
        try:
            result = stores.write_entry(
                path,
                store,
                entry,
                settings.memory.threshold,
                max_entry_bytes=settings.memory.max_entry_bytes,
            )
        except MemorydError as exc:
            raise ToolError(str(exc)) from None
        return dict(result)

    @tool(server, "memory_read", READS)
    def memory_read(
        store: Annotated[
            Literal["bookmarks", "todos", "decisions", "lessons"],
            Field(description="The store to read."),
        ],
        workspace: WorkspaceArg = None,
        last: Annotated[
            int | None, Field(ge=1, description="Only the newest this many entries.")
        ] = None,
    ) -> EntriesOut:
        """Read the entries of a memory store, oldest first.

        Compacted entries appear as one summary line each.
        """
        path = scope.path(workspace, workspace=True)
        try:
            entries = stores.read_entries(path, store, last)
        except MemorydError as exc:
            raise ToolError(str(exc)) from None
        return {"store": store, "entries": entries}

    return server


async def run_cancellable(search: functools.partial[list[T]]) -> list[T]:
    """``search(cancelled=...)`` in a worker thread; when the call is cancelled (the client
    sent ``notifications/cancelled``), the search is told to stop at once, instead of the
    thread running on to the end of its query (docs/design.md#recall-budget)."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(
            functools.partial(search, cancelled=stop.is_set), abandon_on_cancel=True
        )
    except anyio.get_cancelled_exc_class():
        stop.set()
        raise


def _hit(hit: Hit) -> HitOut:
    """A hit as the tool returns it: the form ``memoryd recall --json`` prints."""
    return cast(HitOut, hit.as_dict())


def serve(scope: Scope, settings: Settings, daemon_budget: bool = False) -> None:
    """Serve MCP on stdin/stdout until the client closes the connection."""
    build_server(scope, settings, daemon_budget).run("stdio")
