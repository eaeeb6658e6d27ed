"""``memoryd mcp``: recall, expand, context status and memory stores as MCP tools (stdio)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.cli.options import config_given, load_config, log_to_stderr
from memoryd.errors import InputError

if TYPE_CHECKING:
    from memoryd.config.sections import SourceEntry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--root`` or ``--workspace`` (default: the configured roots)."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--root", type=Path, help="serve every workspace below this folder")
    scope.add_argument("--workspace", type=Path, help="serve this one workspace")
    parser.add_argument(
        "--source",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="also serve this Claude Code, Codex or Gemini CLI session folder to recall and "
        "expand (their source argument); repeatable; [[sources]] of the config are served too",
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Serve on stdin/stdout until the client closes the connection; logs go to stderr."""
    from dataclasses import replace

    from memoryd.mcp_server.server import Scope, serve

    log_to_stderr(args)
    settings = load_config(args).settings
    sources = _sources(args.source, settings.sources)
    if args.workspace is None and args.root is None and sources:
        roots = [root for root in settings.roots if root.is_dir()]
        scope = Scope.for_roots(roots, settings.max_depth)
    elif args.workspace is not None:
        scope = Scope.for_workspace(args.workspace)
    elif args.root is not None:
        if not args.root.is_dir():
            raise InputError(f"--root {args.root}: no such folder")
        scope = Scope.for_roots([args.root], settings.max_depth)
    else:
        roots = [root for root in settings.roots if root.is_dir()]
        if not roots:
            named = ", ".join(str(root) for root in settings.roots) or "none"
            raise InputError(f"none of the configured roots exists ({named}); pass --root")
        scope = Scope.for_roots(roots, settings.max_depth)
    serve(replace(scope, sources=sources), settings, daemon_budget=not config_given(args))
    return 0


def _sources(given: list[Path], configured: list[SourceEntry]) -> tuple[tuple[str, Path], ...]:
    """The session folders served by kind: ``--source`` ones first (recognised from their
    files, refused in one line when they are none), then the configured ones."""
    from memoryd.search.sessions.search import resolve

    found = []
    for path in given:  # one path; or, for a folder of agents' folders, each of them
        targets = resolve(path)
        single = len(targets) == 1
        found += [(path if single else target.root, target.source) for target in targets]
    found += [(entry.path, entry.kind) for entry in configured if entry.path.exists()]
    return tuple((kind, path) for path, kind in found)
