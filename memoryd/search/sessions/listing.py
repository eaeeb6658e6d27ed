"""The look for changes before a query, at the cost of what changed: only the folders
whose time changed since the last pass are read again, and only the files an agent may
still be writing are looked at, the rest at most once a minute (docs/design.md#sources)."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path

from memoryd.search.sessions.layout import (
    MAX_DEPTH,
    SessionFile,
    entry_of,
    spill_folder,
    storable,
    subroots,
)
from memoryd.value import Value

SETTLE_NS = 2_000_000_000
"""A folder changed this recently is listed again next time, whatever its time says: a
file made in the same tick as the listing would not change it."""
LIVE_NS = 24 * 3600 * 1_000_000_000
"""A file whose time, when last looked at, was this recent is looked at by every pass
(one ``lstat``): an agent may still be appending to it."""
FULL_LOOK_NS = 60 * 1_000_000_000
"""Every known file is looked at by the first pass this long after the last such look:
an append to a session quiet for a day (one resumed) is found within it."""
FULL_LOOK_KEY = "full_look_ns"
"""The ``meta`` key holding when every known file was last looked at."""


class SyncResult(Value):
    """What one pass did."""

    __slots__ = ("added", "bytes", "files", "problems", "removed", "unknown")
    __hash__ = None  # type: ignore[assignment]  # counted as the pass goes

    def __init__(
        self,
        files: int = 0,
        bytes: int = 0,
        added: int = 0,
        removed: int = 0,
        problems: list[str] | None = None,
        unknown: list[str] | None = None,
    ) -> None:
        self.files = files
        self.bytes = bytes
        self.added = added
        self.removed = removed
        self.problems: list[str] = [] if problems is None else problems
        self.unknown: list[str] = [] if unknown is None else unknown
        """Files of this pass in no format the source writes (skipped until they change)."""


Stat = tuple[int, int, int, int]
"""A file's (dev, ino, mtime_ns, size) as the index holds it."""


class Listing(Value):
    """What a pass over a source's folders found, reading only folders that changed."""

    __slots__ = ("changed", "first", "folders", "full", "gone", "started")
    __hash__ = None  # type: ignore[assignment]  # filled in as the folders are read

    def __init__(
        self,
        changed: list[SessionFile] | None = None,
        gone: list[str] | None = None,
        folders: dict[str, int] | None = None,
        full: bool = False,
        first: bool = False,
        started: int = 0,
    ) -> None:
        self.changed: list[SessionFile] = [] if changed is None else changed
        """Files new, or whose inode, size or time differ from what the index holds."""
        self.gone: list[str] = [] if gone is None else gone
        """Files the index holds that are no longer there (by the name the index keeps)."""
        self.folders: dict[str, int] = {} if folders is None else folders
        """Each folder walked and its modification time (-1: list it again next time)."""
        self.full = full
        """Every known file was looked at (else only the live ones)."""
        self.first = first
        """The index held no file."""
        self.started = started
        """When the look began (ns since the epoch)."""


def _same(held: Stat, st: os.stat_result) -> bool:
    return held == (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _rows_in(conn: sqlite3.Connection, folder: str) -> dict[str, Stat]:
    """The files the index holds directly in ``folder`` (by the name it keeps)."""
    if folder:
        prefix = folder + "/"
        rows = conn.execute(
            "SELECT name, dev, ino, mtime_ns, size FROM archives WHERE name >= ? AND name < ?",
            (prefix, folder + "0"),  # "0" follows "/": the names below the folder
        )
        return {
            name: (dev, ino, mtime, size)
            for name, dev, ino, mtime, size in rows
            if "/" not in name[len(prefix) :]
        }
    rows = conn.execute(
        "SELECT name, dev, ino, mtime_ns, size FROM archives WHERE instr(name, '/') = 0"
    )
    return {name: (dev, ino, mtime, size) for name, dev, ino, mtime, size in rows}


def list_changes(
    conn: sqlite3.Connection, root: Path, source: str, *, full: bool | None = None
) -> Listing:
    """What changed below the folder ``root`` since the index behind ``conn`` was last
    brought up to date (docs/design.md#sources):

    - a folder whose time is the one kept from the last pass holds the entries it held
      (a file made, removed or renamed changes its folder's time), so it is not read
      again; a folder that changed is read and its entries compared with the index's rows;
    - a file in such a folder may still have grown (an append changes the file's time,
      not its folder's): the files whose time was within :data:`LIVE_NS` of now when last
      looked at are looked at (one ``lstat`` each); all known files are when ``full`` is
      True, or, when it is None, once :data:`FULL_LOOK_NS` passed since the last full look.
    """
    now = time.time_ns()
    folders = dict(conn.execute("SELECT name, mtime_ns FROM folders").fetchall())
    if full is None:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (FULL_LOOK_KEY,)).fetchone()
        try:
            since = now - int(row[0]) if row is not None else -1
        except (TypeError, ValueError):
            since = -1
        full = not 0 <= since < FULL_LOOK_NS  # never looked, or the clock went back
    found = Listing(full=full, started=now)
    found.first = conn.execute("SELECT 1 FROM archives LIMIT 1").fetchone() is None
    sub_folders: dict[str, list[str]] = {}
    for name in folders:
        if name:
            parent, _, _ = name.rpartition("/")
            sub_folders.setdefault(parent, []).append(name)
    kept: set[str] = set()
    read: dict[str, dict[str, SessionFile]] = {}
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
            kept.add(name)
            for sub in sub_folders.get(name, ()):
                if depth < MAX_DEPTH:
                    stack.append((os.path.join(base, sub), sub, depth + 1))
            continue
        trusted = st.st_mtime_ns if settled else -1
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError:
            continue  # not walked: its files leave the index until it can be read
        listed_here = read.setdefault(name, {})
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
                if listed is not None:
                    listed_here[storable(listed.name)] = listed
        found.folders[name] = trusted
    # Folders read: their entries against the index's rows. Folders no longer there
    # (removed, or below a removed one): their files are gone.
    for name in [*read, *(name for name in folders if name not in found.folders)]:
        listed_here = read.get(name, {})
        for kept_name, held in _rows_in(conn, name).items():
            listed = listed_here.pop(kept_name, None)
            if listed is None:
                found.gone.append(kept_name)
            elif (held[0], held[1]) != listed.inode or (held[2], held[3]) != (
                listed.mtime_ns,
                listed.size,
            ):
                found.changed.append(listed)
        found.changed.extend(listed_here.values())
    # Folders not read: their live files (every file on a full look) may have grown.
    query = "SELECT name, dev, ino, mtime_ns, size FROM archives"
    rows = (
        conn.execute(query)
        if full
        else conn.execute(f"{query} WHERE mtime_ns >= ?", (now - LIVE_NS,))
    )
    for kept_name, dev, ino, mtime, size in rows:
        parent, _, _ = kept_name.rpartition("/")
        if parent not in kept:
            if full and kept_name and parent not in found.folders and parent not in folders:
                found.gone.append(kept_name)  # in no folder walked (a folder unreadable)
            continue
        path = prefix + kept_name
        try:
            file_st = os.lstat(path)
        except OSError:
            found.gone.append(kept_name)
            continue
        if not stat.S_ISREG(file_st.st_mode):
            found.gone.append(kept_name)
        elif not _same((dev, ino, mtime, size), file_st):
            again = entry_of(root, source, Path(path), file_st)
            if again is not None:
                found.changed.append(again)
    found.changed.sort(key=lambda file: file.name)
    return found


def keep_folders(conn: sqlite3.Connection, listing: Listing) -> None:
    """Remember the folders' times for the next pass's cached listing, and when every
    known file was last looked at."""
    folders = listing.folders
    held = dict(conn.execute("SELECT name, mtime_ns FROM folders").fetchall())
    if held == folders and not listing.full:
        return
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "DELETE FROM folders WHERE name = ?", [(name,) for name in held if name not in folders]
    )
    conn.executemany(
        "INSERT OR REPLACE INTO folders VALUES (?, ?)",
        [item for item in folders.items() if held.get(item[0]) != item[1]],
    )
    if listing.full:
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", (FULL_LOOK_KEY, str(listing.started))
        )
    conn.execute("COMMIT")
