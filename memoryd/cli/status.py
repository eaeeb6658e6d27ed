"""``memoryd status``: one workspace, or every workspace under a folder or the roots."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from memoryd.cli.options import config_given, load_config
from memoryd.errors import MemorydError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from memoryd.config.settings import Settings
    from memoryd.status.report import ForWorkspace, StatusConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """An optional path and ``--json``."""
    parser.add_argument("path", nargs="?", type=Path, help="a workspace or a folder of them")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--sources",
        action="store_true",
        help="only the [[sources]] (other agents' sessions) and their indexes",
    )
    parser.add_argument(
        "--watch", action="store_true", help="refresh the table until Ctrl-C (live on a terminal)"
    )
    parser.add_argument(
        "--interval",
        type=interval,
        default=2.0,
        help=f"seconds between refreshes, from {MIN_INTERVAL:g} to {MAX_INTERVAL:g} (default: 2)",
    )


MIN_INTERVAL = 0.1
"""The shortest refresh interval: below it a watch would redraw in a busy loop."""
MAX_INTERVAL = 3600.0
"""The longest refresh interval of ``--watch`` (an hour); longer is refused, as infinity
is (a wait that long overflowed)."""


def interval(text: str) -> float:
    """A refresh interval for argparse: a number of seconds from 0.1 to an hour."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:  # NaN and infinity fail here too
        raise argparse.ArgumentTypeError(
            f"must be from {MIN_INTERVAL:g} to {MAX_INTERVAL:g} seconds (got {text})"
        )
    return seconds


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print a table (or JSON rows) of usage, level, strategy and heartbeat. Without
    ``--config`` (or ``$MEMORYD_CONFIG``) each workspace is counted against the budget the
    daemon recorded for it (docs/design.md#state)."""
    from memoryd.status.report import collect_status, render_status_table

    settings, for_workspace = _settings(args)
    configured = getattr(settings, "sources", [])  # the fast path has none: no sources set
    if args.sources:
        from memoryd.status.sources import render_sources, source_rows

        found = source_rows(configured)
        out.write(json.dumps(found, indent=2) + "\n" if args.json else render_sources(found))
        return 0
    if args.path:
        paths = [args.path]
    else:
        # A configured root that does not exist yet holds no workspace: say so, no error.
        paths = [root for root in settings.roots if root.is_dir()]
        for root in settings.roots:
            if not root.is_dir():
                print(f"memoryd: root {root} does not exist (yet)", file=sys.stderr)
    daemon_budget = not config_given(args)
    if args.watch:
        return _watch_status(args, paths, load_config(args).settings, out, daemon_budget)
    rows = collect_status(paths, settings, for_workspace, daemon_budget=daemon_budget)
    if args.json:
        json.dump(rows, out, indent=2)
        out.write("\n")
    elif not rows:
        where = ", ".join(str(p) for p in paths) or "the configured roots"
        print(f"no workspaces found under {where}", file=out)
    else:
        out.write(render_status_table(rows))
    if configured and not args.path and not args.json:
        from memoryd.status.sources import render_sources, source_rows

        out.write(render_sources(source_rows(configured)))
    return 0


def _settings(args: argparse.Namespace) -> tuple[StatusConfig, ForWorkspace]:
    """The settings, read by the fast path when it can vouch for them (status is polled;
    docs/design.md#configuration), else by the full loader; and how a workspace's own
    configuration is applied (falling back to the full loader for that workspace)."""
    from memoryd.config.fast import fast_status_settings
    from memoryd.status.report import full_for_workspace

    fast = fast_status_settings(args.config, os.environ, {"log_format": args.log_format})
    if fast is None:
        settings = load_config(args).settings
        return settings, full_for_workspace(settings)
    full: list[ForWorkspace] = []

    def for_workspace(workspace: Path) -> StatusConfig:
        effective = fast.for_workspace(workspace)
        if effective is not None:
            return effective
        if not full:
            full.append(full_for_workspace(load_config(args).settings))
        return full[0](workspace)

    return fast, for_workspace


def _watch_status(
    args: argparse.Namespace,
    paths: list[Path],
    settings: Settings,
    out: TextIO,
    daemon_budget: bool,
) -> int:
    from memoryd.status.report import collect_status
    from memoryd.status.watch import watch

    if args.json:
        raise UsageError("status: --watch and --json cannot be combined")
    # A bad PATH is refused before the screen is taken.
    last = [collect_status(paths, settings, daemon_budget=daemon_budget)]

    def rows() -> list[dict[str, Any]]:
        # A workspace removed between two frames must not end the watch: keep the last frame.
        with contextlib.suppress(MemorydError, OSError):
            last[0] = collect_status(paths, settings, daemon_budget=daemon_budget)
        return last[0]

    return watch(
        rows,
        out,
        args.interval,
        is_tty=out.isatty(),
        colour=not os.environ.get("NO_COLOR"),
    )
