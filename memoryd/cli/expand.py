"""``memoryd expand``: a message's original line, and lines around it, byte for byte."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from memoryd.cli.options import log_to_stderr
from memoryd.cli.recall import count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """WORKSPACE, ID, ``--before``, ``--after``, ``--session``, ``--file`` and
    ``--source``."""
    from memoryd.cli.sources import add_source_option

    parser.add_argument(
        "workspace",
        type=Path,
        metavar="PATH",
        help="a workspace, or a Claude Code, Codex or Gemini CLI folder or session file",
    )
    parser.add_argument("id", help="a message id (from recall, or a summary's firstId/lastId)")
    parser.add_argument("--before", type=count, default=0, help="lines before it (0)")
    parser.add_argument("--after", type=count, default=0, help="lines after it (0)")
    parser.add_argument(
        "--session",
        help="another agent's sessions: the copy of this id in this session (when one id is "
        "in several; else the line said first is printed)",
    )
    parser.add_argument(
        "--file", help="another agent's sessions: the copy of this id in this file (a path)"
    )
    add_source_option(parser)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the original JSON lines on stdout, exactly as they were appended."""
    from memoryd.cli import sources

    if sources.is_source(args, args.workspace):
        from memoryd.search.lazylog import before_first_line

        with before_first_line(lambda: log_to_stderr(args)):
            data = sources.expand(args)
    else:
        log_to_stderr(args)
        from memoryd.search.archive import expand

        data = b"".join(expand(args.workspace, args.id, args.before, args.after))
    binary = getattr(out, "buffer", None)
    if binary is None:  # a text stream (tests): the lines are UTF-8 unless malformed
        out.write(data.decode("utf-8", "surrogateescape"))
        return 0
    out.flush()
    binary.write(data)
    binary.flush()
    return 0
