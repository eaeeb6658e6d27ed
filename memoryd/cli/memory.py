"""The ``memoryd memory`` command group: write, read and compact memory stores.

See docs/design.md#memory-stores.

Every action prints one JSON object to ``out`` and raises
:class:`~memoryd.errors.MemorydError` subclasses for ``main`` to report. ``threshold`` and
``keep_bookmarks`` come from the flag when given, else from ``[memory]`` in the
configuration.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from memoryd.cli.options import json_argument, load_config, log_to_stderr
from memoryd.stores import disk as stores
from memoryd.stores.entries import STORES, check_store, newest_entries


def memory_setting(args: argparse.Namespace, name: str) -> int:
    """A ``[memory]`` setting: the flag when given, else the configuration's value."""
    given = getattr(args, name, None)
    if given is not None:
        return int(given)
    configured: int = getattr(load_config(args).settings.memory, name)
    return configured


def _write_json(out: TextIO, result: object) -> None:
    out.write(json.dumps(result, ensure_ascii=False) + "\n")


def handle_write(args: argparse.Namespace, out: TextIO) -> int:
    """``memory write``: append one entry and print the write result."""
    check_store(args.store)
    entry: dict[str, Any] = json_argument("--entry", args.entry, dict, "a JSON object")
    threshold = memory_setting(args, "threshold")
    largest = memory_setting(args, "max_entry_bytes")
    result = stores.write_entry(
        args.workspace, args.store, entry, threshold, max_entry_bytes=largest
    )
    _write_json(out, result)
    return 0


def handle_read(args: argparse.Namespace, out: TextIO) -> int:
    """``memory read``: print the store's entries (the ``--last`` newest) and malformed lines."""
    entries = stores.load_store(args.workspace, args.store)
    _write_json(
        out,
        {
            "store": args.store,
            "total": len(entries),
            "entries": newest_entries(entries, args.last),
            "malformed_lines": [e.line_no for e in entries if e.value is None],
        },
    )
    return 0


def handle_compact(args: argparse.Namespace, out: TextIO) -> int:
    """``memory compact``: compact one store or all that are not sacred; print the report."""
    report = stores.compact(
        args.workspace,
        args.store,
        threshold=memory_setting(args, "threshold"),
        keep_bookmarks=memory_setting(args, "keep_bookmarks"),
        dry_run=args.dry_run,
    )
    _write_json(out, report.as_json())
    return 0


def _add_workspace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workspace",
        type=Path,
        default=Path("."),
        metavar="W",
        help="the workspace folder (default: the current directory)",
    )


def _add_threshold(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--threshold",
        type=int,
        default=None,
        metavar="N",
        help=f"{what} (default: memory.threshold, 50)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``memory write|read|compact`` and their arguments."""
    store_help = f"the store: {', '.join(STORES)}"
    parser.description = "Append to, read and compact the memory stores of a workspace."
    actions = parser.add_subparsers(dest="memory_action", metavar="ACTION", required=True)

    write = actions.add_parser("write", help="append one entry to a store")
    write.add_argument("--store", required=True, metavar="S", help=store_help)
    write.add_argument("--entry", required=True, metavar="JSON", help="one JSON object")
    _add_workspace(write)
    _add_threshold(write, "entries past which compact_needed is reported")
    write.set_defaults(handler=handle_write)

    read = actions.add_parser("read", help="print a store's entries")
    read.add_argument("--store", required=True, metavar="S", help=store_help)
    read.add_argument("--last", type=int, default=None, metavar="N", help="only the N newest")
    _add_workspace(read)
    read.set_defaults(handler=handle_read)

    compact = actions.add_parser(
        "compact", help="compact bookmarks and todos (decisions and lessons are sacred)"
    )
    compact.add_argument("--store", default=None, metavar="S", help=f"{store_help} (default: all)")
    _add_threshold(compact, "entries past which a store is compacted")
    compact.add_argument(
        "--dry-run", action="store_true", help="print the report and change nothing"
    )
    _add_workspace(compact)
    compact.set_defaults(handler=handle_compact)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the chosen action."""
    log_to_stderr(args)
    code: int = args.handler(args, out)
    return code
