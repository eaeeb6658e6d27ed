"""Small, careful file primitives: atomic replace, fsync of folders, safe opens."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from memoryd.errors import InputError, UnsafePathError

TEMP_MARK = ".memoryd-tmp-"
"""Every temporary file memoryd creates carries this in its name (the watcher ignores them)."""


NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
"""Flags for a file memoryd creates: never an existing file, never through a symlink."""


def temp_name(target: Path) -> Path:
    """A fresh temporary path beside ``target``, recognisable as memoryd's own."""
    return target.with_name(f".{target.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` runs (the writer named in a temporary file, the daemon).

    A zombie, dead but not yet reaped by its parent, counts as gone.
    """
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        # No /proc to read here: ask the kernel (EPERM means the process exists).
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat_line[stat_line.rfind(")") + 2 :][:1] not in ("Z", "X")


def is_temp_name(name: str) -> bool:
    """True for the names of memoryd's temporary files."""
    return TEMP_MARK in name


def fsync_dir(folder: Path) -> None:
    """fsync a folder so that a rename or a new file in it survives a crash."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def atomic_write(
    target: Path, data: bytes, mode: int | None = None, *, durable: bool = True
) -> None:
    """Replace ``target`` with ``data`` atomically: temp file, fsync, rename, fsync folder.

    Readers see the old content or the new one, never a mix. The mode of an existing
    ``target`` is kept (``mode`` is used for a new file, default 0o644). A symlink at
    ``target`` is replaced, never written through. ``durable=False`` skips both fsyncs:
    for derived files (state.json) that are rewritten often and rebuilt after a crash.
    """
    if mode is None:
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            mode = 0o644
        else:
            # A symlink's own mode is 0o777: never hand that to the new regular file.
            mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644
    tmp = temp_name(target)
    fd = os.open(tmp, NEW_FILE_FLAGS, 0o600)
    try:
        try:
            write_all(fd, data)
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(target.parent)


def append_line(path: Path, line: bytes) -> int:
    """Append one complete line to ``path`` (created if missing) and fsync; returns its offset."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        offset = os.fstat(fd).st_size
        write_all(fd, line)
        os.fsync(fd)
        return offset
    finally:
        os.close(fd)


@contextlib.contextmanager
def flocked(lock_path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold ``flock(LOCK_EX)`` on ``lock_path`` (created with its folder if missing).

    Yields True when the lock is held; with ``blocking=False`` yields False instead of
    waiting when another process holds it. The lock file is never deleted.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        flags = fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB
        try:
            fcntl.flock(fd, flags)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def resolve_inside(workspace: Path, relative: str | Path) -> Path:
    """The path ``workspace/relative``, refused when a symlink leads it out of the workspace."""
    base = workspace.resolve()
    candidate = workspace / relative
    real = candidate.resolve()
    if real != base and base not in real.parents:
        raise UnsafePathError(f"{candidate}: is a symlink that leads outside the workspace")
    return candidate


def check_workspace(workspace: Path) -> Path:
    """Validate a workspace folder given by a user; returns it as an absolute path."""
    try:
        st = os.stat(workspace)
    except FileNotFoundError:
        raise InputError(f"{workspace}: no such workspace folder") from None
    except PermissionError:
        raise InputError(f"{workspace}: permission denied") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{workspace}: is not a folder")
    if not os.access(workspace, os.R_OK | os.W_OK | os.X_OK):
        raise InputError(f"{workspace}: permission denied (memoryd needs to read and write it)")
    return workspace.absolute()


def is_enospc(exc: OSError) -> bool:
    """True when ``exc`` means the disk (or quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)
