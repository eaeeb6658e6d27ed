"""Finding workspaces under a root: folders with a conversation.jsonl, up to max_depth."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from memoryd.workspace import CONVERSATION, META


def find_workspaces(root: Path, max_depth: int) -> Iterator[Path]:
    """Every workspace at or below ``root`` (depth 0 is the root itself), sorted by path.

    Hidden folders (memoryd's own ``.memoryd`` included) are not entered, and symlinked
    folders are never followed, so a walk never leaves its root. Unreadable folders are
    skipped.
    """
    stack: list[tuple[Path, int]] = [(root, 0)]
    found: list[Path] = []
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name == CONVERSATION and entry.is_file(follow_symlinks=False):
                found.append(folder)
            elif (
                depth < max_depth
                and not entry.name.startswith(".")
                and entry.name != META
                and entry.is_dir(follow_symlinks=False)
            ):
                stack.append((Path(entry.path), depth + 1))
    yield from sorted(found)
