"""``memoryd messages``: the conversation as a Messages-API ``messages`` list (the API view)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workspace, ``--json`` and ``--no-thinking``."""
    parser.add_argument("workspace", type=Path)
    parser.add_argument(
        "--json",
        action="store_true",
        help='one object: {"messages": [...], "left_out": [line numbers of malformed lines]}',
    )
    parser.add_argument(
        "--no-thinking",
        dest="thinking",
        action="store_false",
        help="leave thinking blocks out, for requests sent with extended thinking off",
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the API view as one JSON array on stdout (docs/design.md#api-view); a
    malformed line left out of it is counted on stderr (and in ``--json``'s ``left_out``)."""
    from memoryd.conversation.api_view import messages_for_api

    left_out: list[int] = []
    messages = messages_for_api(args.workspace, left_out, args.thinking)
    if left_out:
        shown = ", ".join(map(str, left_out[:10])) + (", …" if len(left_out) > 10 else "")
        print(
            f"memoryd: {len(left_out)} malformed line{'s' * (len(left_out) != 1)} left out of "
            f"the view (line {shown}), kept in the file",
            file=sys.stderr,
        )
    # ASCII escapes: any text (even a lone surrogate a line may hold) prints on any stdout.
    answer = {"messages": messages, "left_out": left_out} if args.json else messages
    out.write(json.dumps(answer) + "\n")
    return 0
