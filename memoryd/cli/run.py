"""``memoryd run``: the daemon, in the foreground."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from memoryd.cli.options import load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--root`` (repeatable)."""
    parser.add_argument("--root", action="append", type=Path, help="a root to watch (repeatable)")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the daemon until it is stopped; its exit code."""
    from memoryd.daemon.supervisor import run_daemon

    roots = [str(root) for root in args.root] if args.root else None
    loaded = load_config(args, roots=roots)
    result: int = run_daemon(loaded, config_file=args.config, cli_roots=roots)
    return result
