"""The session files of a source read with a cached listing: only the folders whose time
changed since the last pass are read again (docs/design.md#sources)."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from memoryd.sources.layout import (
    MAX_DEPTH,
    SessionFile,
    entry_of,
    spill_folder,
    storable,
    subroots,
)

SETTLE_NS = 2_000_000_000
"""A folder changed this recently is listed again next time, whatever its time says: a
file made in the same tick as the listing would not change it."""


@dataclass(slots=True)
class Listing:
    """What a pass over a source's folders found, reading only folders that changed."""

    names: set[str]
    """Every session file there (by the name the index keeps)."""
    changed: list[SessionFile]
    """Those new, or whose inode, size or time differ from what the index holds."""
    folders: dict[str, int]
    """Each folder walked and its modification time (-1: list it again next time)."""


def list_changes(
    root: Path,
    source: str,
    folders: dict[str, int],
    known: Iterable[str],
    unchanged: Callable[[str, os.stat_result], bool],
) -> Listing:
    """The session files below the folder ``root``, read with a cached listing: a folder
    whose time is the one in ``folders`` (from the last pass) holds the entries it held,
    so it is not read again; only its ``known`` files are looked at (one ``lstat`` each,
    for appends) and its known subfolders walked. A folder that changed is read as
    :func:`session_files` reads it (docs/design.md#sources)."""
    by_folder: dict[str, list[str]] = {}
    for name in known:
        parent, _, _ = name.rpartition("/")
        by_folder.setdefault(parent, []).append(name)
    sub_folders: dict[str, list[str]] = {}
    for name in folders:
        if name:
            parent, _, _ = name.rpartition("/")
            sub_folders.setdefault(parent, []).append(name)
    found = Listing(set(), [], {})
    now = time.time_ns()
    base = os.fspath(root)
    prefix = base + os.sep
    stack = [
        (os.fspath(sub), storable(sub.relative_to(root).as_posix()) if sub != root else "", 0)
        for sub in subroots(root, source)
    ]
    while stack:
        folder, name, depth = stack.pop()
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        settled = st.st_mtime_ns < now - SETTLE_NS
        if settled and folders.get(name) == st.st_mtime_ns:
            found.folders[name] = st.st_mtime_ns
            for file_name in by_folder.get(name, ()):
                path = prefix + file_name
                try:
                    file_st = os.lstat(path)
                except OSError:
                    continue
                if not stat.S_ISREG(file_st.st_mode):
                    continue
                found.names.add(file_name)
                if not unchanged(file_name, file_st):
                    again = entry_of(root, source, Path(path), file_st)
                    if again is not None:
                        found.changed.append(again)
            for sub in sub_folders.get(name, ()):
                if depth < MAX_DEPTH:
                    stack.append((os.path.join(base, sub), sub, depth + 1))
            continue
        trusted = st.st_mtime_ns if settled else -1
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError:
            continue
        spill = spill_folder(Path(folder))
        for entry in entries:
            try:
                entry_st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            child = f"{name}/{entry.name}" if name else entry.name
            if storable(entry.name) != entry.name:
                trusted = -1  # a name the index keeps escaped: read this folder each time
            if stat.S_ISDIR(entry_st.st_mode):
                if depth < MAX_DEPTH and entry.name not in (".memoryd", ".git"):
                    stack.append((entry.path, storable(child), depth + 1))
            elif stat.S_ISREG(entry_st.st_mode) and (
                entry.name.endswith((".jsonl", ".json")) or spill
            ):
                listed = entry_of(root, source, Path(entry.path), entry_st)
                if listed is None:
                    continue
                kept = storable(listed.name)
                found.names.add(kept)
                if not unchanged(kept, entry_st):
                    found.changed.append(listed)
        found.folders[name] = trusted
    found.changed.sort(key=lambda file: file.name)
    return found
