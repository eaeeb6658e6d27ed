"""Finding workspaces under a root: folders with a conversation.jsonl, up to max_depth."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from memoryd.files.fsutil import TEMP_MARK
from memoryd.workspace import CONVERSATION, HEARTBEAT, META


@dataclass(frozen=True, slots=True)
class Found:
    """A workspace and what the listing of its folder already told about it, so that a
    daemon's start opens only what is there (docs/design.md#scale-start)."""

    path: Path
    meta: bool
    """It has a ``.memoryd`` (a symlink counts: it is refused when opened)."""
    heartbeat: bool
    """It has a HEARTBEAT.md."""
    temp: bool
    """Its folder holds a temp file of memoryd's (maybe left by a crash)."""
    memory: bool
    """It has a ``memory`` folder (where a crash may have left a temp file too)."""


def find_workspaces(root: Path, max_depth: int) -> Iterator[Path]:
    """Every workspace at or below ``root`` (depth 0 is the root itself), sorted by path.

    Hidden folders (memoryd's own ``.memoryd`` included) are not entered, and symlinked
    folders are never followed, so a walk never leaves its root. Unreadable folders are
    skipped.
    """
    for found in scan_workspaces(root, max_depth):
        yield found.path


def _holds_conversation(entry: os.DirEntry[str]) -> bool:
    """A symlink that leads to a folder with a conversation.jsonl (a workspace)."""
    return os.path.isfile(os.path.join(entry.path, CONVERSATION))


def look(path: Path) -> Found | None:
    """The workspace at ``path`` as :func:`scan_workspaces` would find it (None when it
    has no conversation.jsonl)."""
    found = scan_workspaces(path, 0)
    return found[0] if found else None


STAMP_MARGIN = 2.0
"""Seconds: a folder whose mtime is this recent when it is stamped may change again
within the same clock tick unseen, so its stamp is not trusted."""


def scan_workspaces(
    root: Path,
    max_depth: int,
    visit: Callable[[str], None] | None = None,
    stamps: dict[str, int] | None = None,
    skipped: Callable[[str, str], None] | None = None,
) -> list[Found]:
    """:func:`find_workspaces`, each with what its folder's listing showed.

    ``visit`` is called with each folder below ``root`` that can hold a workspace or its
    ``memory`` (down to ``max_depth + 1``), before that folder is listed: a daemon's first
    scan of a root watches each folder there, so that nothing made in it after the
    listing goes unseen (docs/design.md#scale-start).

    ``stamps``, when given, gets the mtime (ns) of each folder listed, taken before its
    listing (-1 when too recent to trust): while none of them changes, a new walk would
    find the same workspaces (:func:`stamps_hold`; docs/design.md#idle-rescan).
    ``skipped`` is called with the path of a workspace the walk does not take, and why:
    one reached through a symlinked folder, or whose conversation.jsonl is a symlink.
    """
    stack: list[tuple[str, int]] = [(os.fspath(root), 0)]
    found: list[tuple[str, bool, bool, bool, bool]] = []
    while stack:
        folder, depth = stack.pop()
        try:
            if stamps is not None:
                stamps[folder] = _stamp(folder, time.time())
            entries = list(os.scandir(folder))
        except OSError:
            continue
        workspace = meta = heartbeat = temp = memory = False
        for entry in entries:
            name = entry.name
            if name == CONVERSATION:
                workspace = workspace or entry.is_file(follow_symlinks=False)
                if skipped is not None and entry.is_symlink():
                    skipped(folder, "its conversation.jsonl is a symlink (never followed)")
                continue
            if name == META:
                meta = True
                continue
            if name == HEARTBEAT:
                heartbeat = True
            elif name == "memory":
                memory = True
            elif TEMP_MARK in name:
                temp = True
            if name[0] == "." or (depth == max_depth and visit is None):
                continue
            if not entry.is_dir(follow_symlinks=False):
                if skipped is not None and entry.is_symlink() and _holds_conversation(entry):
                    skipped(entry.path, "a symlinked folder (never followed out of a root)")
                continue
            if visit is not None:
                visit(entry.path)
            if depth < max_depth:
                stack.append((entry.path, depth + 1))
        if workspace:
            found.append((folder, meta, heartbeat, temp, memory))
    # In the order of Path comparison (by components), without making a Path to compare.
    found.sort(key=lambda item: item[0].split(os.sep))
    return [Found(Path(path), *flags) for path, *flags in found]


def stamps_hold(stamps: Mapping[str, int] | None) -> bool:
    """True when every folder of ``stamps`` (from :func:`scan_workspaces`) still has its
    mtime: no entry was added, removed or renamed in any, so a walk would find the same
    workspaces. One stat a folder, no listing."""
    if not stamps:
        return False
    now = time.time()
    return all(stamp >= 0 and _stamp(folder, now) == stamp for folder, stamp in stamps.items())


def _stamp(folder: str, now: float) -> int:
    try:
        mtime = os.stat(folder).st_mtime_ns
    except OSError:
        return -2  # gone (or unreadable): never equal to a stamp taken
    return mtime if mtime < (now - STAMP_MARGIN) * 1e9 else -1
