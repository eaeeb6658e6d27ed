"""Small, careful file primitives: atomic replace, all-or-nothing appends, fsync of folders.

Writing inside a workspace
--------------------------
Every file memoryd writes or creates in a workspace (``.memoryd/`` and all in it,
``HEARTBEAT.md``, ``checkpoint.json``, ``memory/``, the archive, temp files, locks) goes
through the functions here that take ``root=`` — the workspace folder:

- :func:`atomic_write` (replace a whole file), :func:`append_line` (append, all or
  nothing), :func:`flocked` (a lock file), and from :mod:`memoryd.files.paths`
  :func:`~memoryd.files.paths.open_in` (any other open),
  :func:`~memoryd.files.paths.folder_in` (a folder's descriptor, for ``dir_fd=`` calls),
  :func:`~memoryd.files.paths.read_in` (read a
  file of the workspace, e.g. its config).

They walk from a descriptor of ``root`` one component at a time with ``openat`` and
``O_NOFOLLOW``, so a symlink anywhere below ``root`` — a symlinked ``.memoryd`` or
``memory/``, or a symlink at the file's own name — is refused with
:class:`~memoryd.errors.UnsafePathError` (a :class:`~memoryd.errors.UsageError`, exit 2)
before anything is created, wherever it points, and no race can swap a folder for a
symlink between the check and the write. ``root`` itself may be reached through symlinks:
the user named it. Any other failure is the plain ``OSError`` (a full disk, a read-only
file system), for the caller to report in one line. See docs/design.md#workspace.

Where a path must be handed to code that cannot take a descriptor (SQLite),
:func:`resolve_inside` checks it instead.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from memoryd.errors import UnsafePathError
from memoryd.files.creating import next_temp_tag, open_new, rename_noreplace
from memoryd.files.paths import folder_in, named, open_file_in, open_in

TEMP_MARK = ".memoryd-tmp-"
"""Every temporary file memoryd creates carries this in its name (the watcher ignores them)."""


def temp_name(target: Path) -> Path:
    """A fresh temporary path beside ``target``, recognisable as memoryd's own."""
    return target.with_name(_temp(target.name))


def _temp(name: str) -> str:
    return f".{name}{TEMP_MARK}{next_temp_tag()}"


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
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder_in(root: Path, folder: Path) -> None:
    """fsync ``folder`` (``root`` or below it, no symlink followed): a file just created
    in it keeps its name after a power cut (docs/design.md#power-cut)."""
    with folder_in(root, folder) as fd:
        os.fsync(fd)


def _up_to(root: Path, folder: Path) -> list[Path]:
    """``folder`` and each folder above it, ``root`` last."""
    folders = [folder]
    while folders[-1] != root and root in folders[-1].parents:
        folders.append(folders[-1].parent)
    return folders


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def atomic_write(
    target: Path, data: bytes, mode: int | None = None, *, root: Path, durable: bool = True
) -> None:
    """Replace ``target`` (below ``root``) with ``data`` atomically: temp, fsync, rename.

    Readers see the old content or the new one, never a mix. The mode of an existing
    ``target`` is kept (``mode`` is used for a new file, default 0o644). A symlink at
    ``target`` is replaced, never written through; a symlinked folder between ``root`` and
    ``target`` is refused (UnsafePathError); missing folders are created. ``durable=False``
    skips both fsyncs: for derived files (state.json) rewritten often and rebuilt after a
    crash. On any failure the temp file is removed and ``target`` is unchanged.
    """
    try:
        _atomic_write(target, data, mode, root, durable)
    except OSError as exc:
        raise named(exc, target) from None


def _atomic_write(target: Path, data: bytes, mode: int | None, root: Path, durable: bool) -> None:
    with folder_in(root, target.parent, create=True) as folder:
        replace_in(folder, target.name, data, mode, durable=durable)


def replace_in(
    folder: int,
    name: str,
    data: bytes,
    mode: int | None = None,
    *,
    durable: bool = True,
    staging: int | None = None,
) -> None:
    """:func:`atomic_write` of ``name`` in the open ``folder`` (a descriptor from
    :func:`folder_in`): for a caller that writes several files of one folder and walks to
    it once. With ``staging`` (an open folder of the same file system) the temp file is
    written there and renamed into ``folder``: a watcher of ``folder`` that does not watch
    ``staging`` sees one event instead of five. A durable rename out of ``staging`` fsyncs
    both folders: a rename between two folders is on disk once both are
    (docs/design.md#power-cut)."""
    if staging is None:
        staging = folder
    tmp = _temp(name)
    if mode is None:
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            mode = 0o644
        else:
            # A symlink's own mode is 0o777: never hand that to the new regular file.
            mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644
    fd, chmod = open_new(tmp, mode, staging)
    try:
        try:
            write_all(fd, data)
            if chmod:
                os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=staging, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=staging)
        raise
    if durable:
        os.fsync(folder)
        if staging != folder:
            os.fsync(staging)


def create_in(folder: int, name: str, data: bytes, *, staging: int) -> bool:
    """Create ``name`` in the open ``folder`` holding ``data``, unless it exists; True when
    created. Atomic and lock-free: the bytes are written to a temp file in the open
    ``staging`` folder (same file system) and moved to ``name`` by a rename that refuses
    to replace (``RENAME_NOREPLACE``; a hard link and an unlink where the file system
    lacks it), which fails if anyone made ``name`` first. Not fsynced (for derived
    files). Writing in ``staging`` rather than beside ``name`` keeps the temp file's
    events out of a watched folder.
    """
    tmp = _temp(name)
    fd, chmod = open_new(tmp, 0o644, staging)
    moved = False
    try:
        try:
            write_all(fd, data)
            if chmod:
                os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        moved = rename_noreplace(tmp, name, staging, folder)
        if not moved:
            os.link(tmp, name, src_dir_fd=staging, dst_dir_fd=folder, follow_symlinks=False)
    except FileExistsError:
        return False
    finally:
        if not moved:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=staging)
    return True


def append_all_or_nothing(fd: int, data: bytes, *, seal_torn_tail: bool = False) -> int:
    """Append ``data`` to the ``O_APPEND`` descriptor ``fd`` and fsync it; returns its offset.

    All or nothing: when a write or the fsync fails (a full disk), the file is truncated
    back to its previous length and the OSError is raised, so no partial line is left
    behind. The truncation is skipped when another writer appended meanwhile (its bytes
    are not ours to cut); hold the writers' lock to rule that out. ``seal_torn_tail``
    first ends a last line left without ``\n`` (a writer that died mid-line), so that
    fragment stays byte for byte on a line of its own and ``data`` starts a new one.
    """
    start = os.fstat(fd).st_size
    if seal_torn_tail and start and os.pread(fd, 1, start - 1) != b"\n":
        data = b"\n" + data
    written = 0
    view = memoryview(data)
    try:
        while written < len(data):
            written += os.write(fd, view[written:])
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            if os.fstat(fd).st_size == start + written:
                os.ftruncate(fd, start)
                os.fsync(fd)
        raise
    return start


def append_line(path: Path, line: bytes, *, root: Path) -> int:
    """Append one complete line to ``path`` below ``root`` (created, with its folders,
    if missing), all or nothing, and fsync (the folder too, for the first line); returns
    its offset.

    A torn last line is sealed first (see :func:`append_all_or_nothing`). Raises
    UnsafePathError for a symlink on the way, OSError when the write fails (the file is
    then as it was).
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK
    fd = open_file_in(root, path, flags, make_parents=True)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f"{path}: is not a regular file")
        start = append_all_or_nothing(fd, line, seal_torn_tail=True)
        if start == 0:
            # Maybe a new file: its name must be as durable as its line, and so must the
            # names of the folders above it, which their maker may not have fsynced.
            for folder in _up_to(root, path.parent):
                fsync_folder_in(root, folder)
        return start
    except OSError as exc:
        raise named(exc, path) from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def flocked(lock_path: Path, *, root: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold ``flock(LOCK_EX)`` on ``lock_path`` below ``root`` (created with its folders).

    Yields True when the lock is held; with ``blocking=False`` yields False instead of
    waiting when another process holds it. The lock file is never deleted. A symlink on
    the way is refused (UnsafePathError).
    """
    fd = open_in(root, lock_path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, make_parents=True)
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


def is_enospc(exc: OSError) -> bool:
    """True when ``exc`` means the disk (or quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)
