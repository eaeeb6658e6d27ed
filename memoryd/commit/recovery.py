"""Cleaning up after an interrupted commit (docs/design.md#commit).

A crash at any point of a commit leaves either the old file (plus a pending archive and
a temp file, both removed here) or the new one (plus a pending archive, finalised here:
the temp file's inode, part of the pending archive's name, tells which happened), and
maybe a drain mark (:mod:`memoryd.commit.draining`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memoryd.commit.draining import FOLDER as DRAINING
from memoryd.commit.draining import MARK_RE, salvage
from memoryd.commit.rewrite import open_folder
from memoryd.files.fsutil import TEMP_MARK, pid_alive
from memoryd.files.paths import folder_in
from memoryd.workspace import Workspace

PENDING_RE = re.compile(r"^(?P<name>.+\.jsonl)\.(?P<pid>\d+)\.(?P<ino>\d+)\.pending$")
TEMP_PID_RE = re.compile(re.escape(TEMP_MARK) + r"(?P<pid>\d+)-")


@dataclass(frozen=True, slots=True)
class Recovery:
    """What :func:`recover` cleaned up."""

    temp_files_removed: int
    archives_finalised: int
    archives_discarded: int
    lines_salvaged: int = 0
    """Lines a crashed drain left in a replaced file, now appended (see draining)."""


def _pid_alive(pid: int) -> bool:
    """Another process that may still use its files (our own pid's are left over)."""
    return pid != os.getpid() and pid_alive(pid)


def archive_target(workspace: Workspace, name: str) -> Path | None:
    """The file an archive of ``name`` was cut from, by its kind prefix."""
    if name.startswith("conversation-"):
        return workspace.conversation
    if name.startswith("memory-"):
        store = name[len("memory-") :].split("-", 1)[0]
        return workspace.store(store)
    return None


@contextlib.contextmanager
def _existing_folder(root: Path, folder: Path) -> Iterator[int | None]:
    """A descriptor of ``folder`` below ``root``, or None when it does not exist."""
    try:
        fd = open_folder(root, folder)
    except FileNotFoundError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def leftover(folder: str, name: str) -> bool:
    """Whether the file ``name`` is something :func:`recover` may act on (pure): a pending
    archive in ``archive``, a drain mark in ``draining``, a temp file of memoryd's in any
    other folder of the workspace (its own, ``memory``, ``.memoryd``).

    A daemon's start on thousands of workspaces reads the names first and pays the job
    lock and the full recovery only where one of them says so (docs/design.md#scale-start).
    """
    if folder == "archive":
        return PENDING_RE.match(name) is not None
    if folder == DRAINING:
        return MARK_RE.match(name) is not None
    return TEMP_PID_RE.search(name) is not None


def recover(workspace: Workspace) -> Recovery:
    """Clean up what an interrupted commit left in ``workspace``.

    Temp files of dead processes are removed. A pending archive is finalised when its
    commit reached the rename (the target now has the temp file's inode) and discarded
    otherwise (its lines are still in the target). What a process that died in its drain
    window left in the replaced file is appended to the live one (the drain mark says
    from where). Leftovers of live processes — another daemon or a one-shot command
    mid-commit — are left alone. No symlink below the workspace is followed
    (UnsafePathError).
    """
    root = workspace.path
    salvaged = salvage(workspace)
    removed = finalised = discarded = 0
    for folder in (workspace.path, workspace.memory_dir, workspace.meta):
        with _existing_folder(root, folder) as fd:
            if fd is None:
                continue
            here = 0
            for entry in os.scandir(fd):
                match = TEMP_PID_RE.search(entry.name)
                if match and not _pid_alive(int(match["pid"])):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=fd)
                        here += 1
            if here:
                os.fsync(fd)
                removed += here
    with _existing_folder(root, workspace.archive_dir) as fd:
        if fd is not None:
            for entry in os.scandir(fd):
                match = PENDING_RE.match(entry.name)
                if not match or _pid_alive(int(match["pid"])):
                    continue
                target = archive_target(workspace, match["name"])
                if target is None:
                    continue  # not ours to judge: never delete lines we cannot place
                try:
                    with folder_in(root, target.parent) as target_folder:
                        st = os.stat(target.name, dir_fd=target_folder, follow_symlinks=False)
                    committed = st.st_ino == int(match["ino"])
                except FileNotFoundError:
                    committed = False
                if committed:
                    os.rename(entry.name, match["name"], src_dir_fd=fd, dst_dir_fd=fd)
                    finalised += 1
                else:
                    os.unlink(entry.name, dir_fd=fd)
                    discarded += 1
            if finalised or discarded:
                os.fsync(fd)
    return Recovery(removed, finalised, discarded, salvaged)


__all__ = ["Recovery", "archive_target", "recover"]
