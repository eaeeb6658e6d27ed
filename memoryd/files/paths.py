"""Paths inside a workspace, walked without following a symlink: each folder opened with
O_NOFOLLOW relative to the one before it, so that nothing memoryd opens, creates or
reads ever leads out of the workspace (docs/design.md#workspace).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath

from memoryd.errors import InputError, UnsafePathError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


SYMLINK_REFUSED = "is a symlink; memoryd never writes through a symlink inside a workspace"
"""The end of the one-line error for a symlink found below a workspace."""


def named(exc: OSError, path: Path) -> OSError:
    """``exc`` again, naming ``path`` in full (a call relative to a folder descriptor names
    only the last component); its errno, and so its subclass, is kept."""
    if exc.filename is not None and Path(exc.filename).is_absolute():
        return exc
    return OSError(exc.errno, exc.strerror, str(path))


def _components(root: Path, path: Path) -> tuple[str, ...]:
    """The names leading from ``root`` to ``path`` (lexically; ``..`` refused)."""
    try:
        parts = PurePath(path).relative_to(root).parts
    except ValueError:
        raise UnsafePathError(f"{path}: is not inside {root}") from None
    if any(part in ("..", ".") for part in parts):
        raise UnsafePathError(f"{path}: climbs out of {root} with '..'")
    return parts


def _refuse(path: Path, dir_fd: int, name: str) -> UnsafePathError:
    """The error for a component that could not be opened as a folder (ELOOP, ENOTDIR)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return UnsafePathError(f"{path}: is not a folder")
    if stat.S_ISLNK(st.st_mode):
        return UnsafePathError(f"{path}: {SYMLINK_REFUSED}")
    return UnsafePathError(f"{path}: is not a folder")


def _walk(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of ``root/parts...``, each folder opened without following a symlink."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = root
    try:
        for name in parts:
            here = here / name
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                    # The new folder's entry must outlive a power cut before anything is
                    # put in it (docs/design.md#power-cut).
                    os.fsync(fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _refuse(here, fd, name) from None
                    raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(here, fd, name) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def folder_in(root: Path, folder: Path, *, create: bool = False) -> Iterator[int]:
    """A descriptor of ``folder`` (``root`` or below it), for ``dir_fd=`` calls.

    No symlink below ``root`` is followed (UnsafePathError); ``create`` makes missing
    folders (mode 0755). Closed on exit.
    """
    fd = _walk(root, _components(root, folder), create)
    try:
        yield fd
    finally:
        os.close(fd)


def open_in(
    root: Path, path: Path, flags: int, mode: int = 0o644, *, make_parents: bool = False
) -> int:
    """``os.open(path, flags)`` for a file below ``root``, following no symlink on the way.

    A symlink at ``path`` itself or at any folder between ``root`` and it raises
    UnsafePathError; ``make_parents`` creates missing folders. Returns the descriptor.
    """
    parts = _components(root, path)
    if not parts:
        raise UnsafePathError(f"{path}: is the workspace itself, not a file in it")
    try:
        parent = _walk(root, parts[:-1], make_parents)
    except OSError as exc:
        raise named(exc, path) from None
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{path}: {SYMLINK_REFUSED}") from None
        raise named(exc, path) from None
    finally:
        os.close(parent)


def open_file_in(root: Path, path: Path, flags: int, *, make_parents: bool = False) -> int:
    """:func:`open_in` for a file that must be a regular one: a socket there (ENXIO) or a
    folder opened for writing (EISDIR) is refused in the words a FIFO is (the caller checks
    the rest with ``fstat``)."""
    try:
        return open_in(root, path, flags, 0o644, make_parents=make_parents)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise UnsafePathError(f"{path}: is not a regular file") from None
        raise


def read_in(root: Path, path: Path) -> bytes:
    """The bytes of ``path`` below ``root``, read without following a symlink.

    FileNotFoundError (and other OSErrors) pass through; a symlink is UnsafePathError.
    """
    fd = open_file_in(root, path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f"{path}: is not a regular file")
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise named(exc, path) from None
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


def check_workspace(workspace: Path, *, write: bool = True) -> Path:
    """Validate a workspace folder given by a user; returns it as an absolute path.

    Without ``write``, reading it is enough (a server that may only search it).
    """
    try:
        st = os.stat(workspace)
    except FileNotFoundError:
        raise InputError(f"{workspace}: no such workspace folder") from None
    except PermissionError:
        raise InputError(f"{workspace}: permission denied") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{workspace}: is not a folder")
    if write and not os.access(workspace, os.R_OK | os.W_OK | os.X_OK):
        raise InputError(f"{workspace}: permission denied (memoryd needs to read and write it)")
    if not write and not os.access(workspace, os.R_OK | os.X_OK):
        raise InputError(f"{workspace}: permission denied (memoryd needs to read it)")
    return workspace.absolute()
