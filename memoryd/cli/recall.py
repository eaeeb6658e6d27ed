"""``memoryd recall``: search the messages memoryd summarized (the archive)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memoryd.cli.options import log_to_stderr, when
from memoryd.search.query import QUERY_SECONDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Protocol, TextIO, TypeVar

    from memoryd.search.archive import Hit

    class Shown(Protocol):
        @property
        def snippet(self) -> str: ...

        def as_dict(self) -> dict[str, object]: ...

    ShownT = TypeVar("ShownT", bound=Shown)


def count(text: str) -> int:
    """A whole number of 0 or more, for argparse."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {value}")
    return value


def seconds(text: str) -> float:
    """A number of seconds for argparse (its range is checked by the search)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """PATH, QUERY, ``--limit``, ``--role``, ``--json``, ``--raw`` and ``--timeout``.

    A query that starts with ``-`` is the query, not an unknown option (``-postgres``);
    ``--`` ends the options too.
    """
    from memoryd.cli import take_dash_words

    take_dash_words(parser)
    parser.add_argument(
        "path",
        type=Path,
        help="a workspace, or a folder to search every workspace below; or a Claude Code, "
        "Codex or Gemini CLI folder or session file, or a folder of several of them "
        "(docs/guides/sources.md)",
    )
    parser.add_argument(
        "query",
        help='words or a question (hits with every word first); "a phrase"; word* for a prefix '
        "(2 letters or more); a query that starts with - is a query",
    )
    parser.add_argument("--limit", type=count, default=10, help="at most this many hits (10)")
    from memoryd.cli.sources import ROLES

    parser.add_argument(
        "--role",
        choices=ROLES,
        help="only this role's messages (tool: a tool's output; summary: a compaction "
        "summary; tool, summary and info are in other agents' sessions only)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--raw", action="store_true", help="the query is SQLite FTS5 syntax")
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=QUERY_SECONDS,
        metavar="SECONDS",
        help=f"stop a search that runs longer than this ({QUERY_SECONDS:g})",
    )
    from memoryd.cli.sources import add_source_option

    add_source_option(parser)


def print_hits(
    args: argparse.Namespace,
    out: TextIO,
    hits: Sequence[ShownT],
    block: Callable[[ShownT, str], str],
) -> int:
    """Print ``hits`` (exit 0, also for none): JSON with ``--json``; else one block per
    hit, ``block(hit, snippet)`` with the snippet on one line; else "no matches" in words."""
    if args.json:
        out.write(json.dumps([hit.as_dict() for hit in hits], ensure_ascii=False, indent=2) + "\n")
    elif hits:
        out.write("\n".join(block(hit, " ".join(hit.snippet.split())) for hit in hits))
    else:
        out.write(f"no matches for {args.query!r} in {args.path}\n")
    return 0


def _block(hit: Hit, snippet: str) -> str:
    """A workspace's hit: workspace, time, role, id, then the snippet."""
    said = f"{hit.workspace}  {when(hit.timestamp)}  {hit.role or '?'}  {hit.id or '(no id)'}"
    return f"{said}\n    {snippet}\n"


def _nothing_here(path: Path, depth: int) -> None:
    """Refuse (one line, exit 2) a path that holds neither a workspace nor any agent's
    session of a known kind: "no matches" would hide the mistake."""
    from memoryd.errors import InputError
    from memoryd.search.archive import workspaces_under

    if path.is_file():
        raise InputError(
            f"{path}: not a memoryd workspace, nor a Claude Code, Codex or Gemini CLI session "
            "file of a known kind"
        )
    if path.is_dir() and not workspaces_under(path, depth):
        raise InputError(
            f"{path}: no memoryd workspace and no Claude Code, Codex or Gemini CLI session of "
            "any known kind here"
        )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the hits, or "no matches" in words (exit 0)."""
    from memoryd.cli import sources
    from memoryd.search.lazylog import before_first_line

    with before_first_line(lambda: log_to_stderr(args)):
        if sources.is_source(args, args.path):
            return print_hits(args, out, sources.recall(args), sources.block)
        return _recall_workspaces(args, out)


def _recall_workspaces(args: argparse.Namespace, out: TextIO) -> int:
    """The hits of the workspaces at ``args.path``, printed."""
    from memoryd.search.archive import recall

    if args.role not in (None, "user", "assistant"):
        from memoryd.errors import UsageError

        raise UsageError(
            f"--role {args.role}: a workspace's messages are user or assistant ones "
            "(tool, summary and info are roles of other agents' sessions)"
        )
    if (args.path / "conversation.jsonl").is_file():
        depth = 0
    else:
        from memoryd.cli.options import load_config

        depth = load_config(args).settings.max_depth
        _nothing_here(args.path, depth)
    hits = recall(
        args.path,
        args.query,
        args.limit,
        args.role,
        raw=args.raw,
        max_depth=depth,
        timeout=args.timeout,
    )
    return print_hits(args, out, hits, _block)
