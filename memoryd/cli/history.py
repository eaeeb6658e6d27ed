"""``memoryd history``: the receipts of past jobs, for one workspace or every one below a
folder, with totals of tokens saved and cost."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from memoryd.cli.options import load_config
from memoryd.cli.recall import count
from memoryd.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The path, ``--json`` and ``--limit``."""
    parser.add_argument("path", type=Path, help="a workspace, or a folder (a root) of them")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--limit", type=count, metavar="N", help="only the N most recent jobs (totals cover all)"
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the table (or JSON) of receipts, oldest first, and the totals."""
    from memoryd.discovery import find_workspaces
    from memoryd.receipts.records import read_receipts
    from memoryd.receipts.totals import history_totals, latest, render_history
    from memoryd.workspace import CONVERSATION, Workspace

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be a whole number of 1 or more (got {args.limit})")
    path: Path = args.path
    if not path.is_dir():
        raise UsageError(f"{path}: no such folder")
    settings = load_config(args).settings
    own = Workspace(path)
    if (path / CONVERSATION).exists() or own.meta.joinpath("receipts.jsonl").exists():
        folders = [path]
    else:
        folders = list(find_workspaces(path, settings.max_depth))
    receipts = [r for folder in folders for r in read_receipts(Workspace(folder))]
    shown = latest(receipts, args.limit)
    totals = history_totals(receipts)
    if args.json:
        records = [{"workspace": r.workspace, **r.to_record()} for r in shown]
        json.dump({"receipts": records, "totals": totals.to_record()}, out, indent=2)
        out.write("\n")
    elif not receipts:
        print(f"no jobs recorded under {path}", file=out)
    else:
        many = len(folders) > 1
        if many:
            shown = [replace(r, workspace=_relative(r.workspace, path)) for r in shown]
        out.write(render_history(shown, totals, many=many) + "\n")
    return 0


def _relative(workspace: str | None, root: Path) -> str:
    if workspace is None:
        return "?"
    try:
        return str(Path(workspace).relative_to(root)) or "."
    except ValueError:
        return workspace
