"""``memoryd messages``: the conversation as a Messages-API ``messages`` list (the API view)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workspace."""
    parser.add_argument("workspace", type=Path)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the API view as one JSON array on stdout (docs/design.md#api-view)."""
    from memoryd.api_view import messages_for_api

    # ASCII escapes: any text (even a lone surrogate a line may hold) prints on any stdout.
    out.write(json.dumps(messages_for_api(args.workspace)) + "\n")
    return 0
