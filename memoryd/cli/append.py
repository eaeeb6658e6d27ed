"""``memoryd append``: one message, under the writers' lock."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memoryd.cli.options import json_argument
from memoryd.conversation.lines import ROLES, append_message
from memoryd.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workspace, ``--role``, ``--content`` (else stdin), ``--blocks`` and ``--pin``."""
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--role", required=True, choices=ROLES)
    parser.add_argument("--content", help="the text (default: read from stdin)")
    parser.add_argument(
        "--blocks", action="store_true", help="the content is a JSON list of content blocks"
    )
    parser.add_argument(
        "--pin", action="store_true", help="pin the message: it is never summarized away"
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Append the message; print its id as JSON."""
    text = args.content if args.content is not None else _read_stdin()
    content: Any = text
    if args.blocks:
        content = json_argument("--blocks", text, list, "a JSON list of content blocks")
    message = append_message(args.workspace, args.role, content, pinned=args.pin)
    print(json.dumps({"appended": True, "id": message["id"]}), file=out)
    return 0


def _read_stdin() -> str:
    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"the message on stdin is not UTF-8 text (byte {exc.start}); nothing appended"
        ) from None
