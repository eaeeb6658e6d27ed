"""``memoryd mcp``: recall, expand, context status and memory stores as MCP tools (stdio)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from memoryd.cli.common import config_given, load_config, log_to_stderr
from memoryd.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--root`` or ``--workspace`` (default: the configured roots)."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--root", type=Path, help="serve every workspace below this folder")
    scope.add_argument("--workspace", type=Path, help="serve this one workspace")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Serve on stdin/stdout until the client closes the connection; logs go to stderr."""
    from memoryd.mcp_server.server import Scope, serve

    log_to_stderr(args)
    settings = load_config(args).settings
    if args.workspace is not None:
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
    serve(scope, settings, daemon_budget=not config_given(args))
    return 0
