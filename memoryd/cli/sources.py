"""``memoryd recall`` and ``memoryd expand`` on another agent's sessions (a Claude Code,
Codex or Gemini CLI folder or file): the source's index, read-only over the files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memoryd.search.sessions.layout import SOURCES, by_layout, recognise, sources_in

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

    from memoryd.search.sessions.search import SourceHit
    from memoryd.search.sessions.store import Progress

ROLES = ("user", "assistant", "tool", "summary", "info")
"""The roles ``--role`` takes: a workspace's messages are user or assistant ones; a
source's are also ``tool`` (a tool's output), ``summary`` and ``info``."""


def add_source_option(parser: argparse.ArgumentParser) -> None:
    """``--source``: read PATH as this agent's sessions (else recognised by its layout)."""
    parser.add_argument(
        "--source",
        choices=SOURCES,
        help="PATH holds this agent's sessions (recognised from the files when left out)",
    )


def is_source(args: argparse.Namespace, path: Path) -> bool:
    """True when the command is about a source (or a folder of agents' folders), not a
    memoryd workspace."""
    if getattr(args, "source", None) or by_layout(path) is not None:
        return True
    if path.is_dir() and sources_in(path):
        return True
    return recognise(path) is not None


class ProgressLine:
    """The progress of a first index, on one line of a terminal (rewritten in place)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.shown = stream, False

    def __call__(self, progress: Progress) -> None:
        self.stream.write("\r" + progress.line() + "\x1b[K")
        self.stream.flush()
        self.shown = True

    def end(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False


def _on_terminal() -> ProgressLine | None:
    return ProgressLine(sys.stderr) if sys.stderr.isatty() else None


def _say(notes: list[str]) -> None:
    for note in dict.fromkeys(notes):
        print(f"memoryd: {note}", file=sys.stderr)


def block(hit: SourceHit, snippet: str) -> str:
    """A source's hit: source, project, session, time, role, id, then the snippet."""
    from memoryd.cli.options import when

    return (
        f"{hit.source}  {hit.project or '?'}  session {hit.session or '?'}\n"
        f"    {when(hit.timestamp)}  {hit.role or '?'}  {hit.id}\n"
        f"    {snippet}\n"
    )


def recall(args: argparse.Namespace) -> list[SourceHit]:
    """The hits of a source, best first; what the caller should know beside them (files
    skipped, an index still being built) is said on stderr."""
    from memoryd.search.sessions.search import recall_source

    notes: list[str] = []
    line = _on_terminal()
    try:
        hits = recall_source(
            args.path,
            args.query,
            args.limit,
            args.role,
            raw=args.raw,
            source=args.source,
            timeout=args.timeout,
            notes=notes,
            progress=line,
        )
    finally:
        if line is not None:
            line.end()
    _say(notes)
    return hits


def expand(args: argparse.Namespace) -> bytes:
    """The original lines of a source's message, as ``memoryd expand`` prints them."""
    from memoryd.search.sessions.search import Pick, expand_source

    notes: list[str] = []
    pick = Pick(getattr(args, "session", None), getattr(args, "file", None))
    lines = expand_source(
        args.workspace, args.id, args.before, args.after, source=args.source, pick=pick, notes=notes
    )
    _say(notes)
    return b"".join(lines)
