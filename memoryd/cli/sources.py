"""``memoryd recall`` and ``memoryd expand`` on another agent's sessions (a Claude Code,
Codex or Gemini CLI folder or file): the source's index, read-only over the files."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, TextIO

from memoryd.sources.layout import SOURCES, recognise

if TYPE_CHECKING:
    from pathlib import Path

    from memoryd.sources.search import SourceHit


def add_source_option(parser: argparse.ArgumentParser) -> None:
    """``--source``: read PATH as this agent's sessions (else recognised by its layout)."""
    parser.add_argument(
        "--source",
        choices=SOURCES,
        help="PATH holds this agent's sessions (recognised from the files when left out)",
    )


def is_source(args: argparse.Namespace, path: Path) -> bool:
    """True when the command is about a source, not a memoryd workspace."""
    return bool(getattr(args, "source", None)) or recognise(path) is not None


def render(hits: list[SourceHit]) -> str:
    """Human output: one block per hit (source, project, session, time, role, id, snippet)."""
    from memoryd.cli.common import when

    blocks = []
    for hit in hits:
        snippet = " ".join(hit.snippet.split())
        where = hit.project or "?"
        blocks.append(
            f"{hit.source}  {where}  session {hit.session or '?'}\n"
            f"    {when(hit.timestamp)}  {hit.role or '?'}  {hit.id}\n"
            f"    {snippet}\n"
        )
    return "\n".join(blocks)


def recall(args: argparse.Namespace, out: TextIO) -> int:
    """Print the hits of a source (exit 0, also for none)."""
    from memoryd.sources.search import recall_source

    hits = recall_source(
        args.path,
        args.query,
        args.limit,
        args.role,
        raw=args.raw,
        source=args.source,
        timeout=args.timeout,
    )
    if args.json:
        out.write(json.dumps([hit.as_dict() for hit in hits], ensure_ascii=False, indent=2) + "\n")
    elif hits:
        out.write(render(hits))
    else:
        out.write(f"no matches for {args.query!r} in {args.path}\n")
    return 0


def expand(args: argparse.Namespace) -> bytes:
    """The original lines of a source's message, as ``memoryd expand`` prints them."""
    from memoryd.sources.search import expand_source

    lines = expand_source(args.workspace, args.id, args.before, args.after, source=args.source)
    return b"".join(lines)
