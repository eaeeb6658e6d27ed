"""Real small filesystems for tests: a tmpfs to fill up, a read-only one, tree snapshots."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(args: list[str], folder: Path) -> None:
    try:
        done = subprocess.run(["mount", *args, str(folder)], capture_output=True, check=False)
    except FileNotFoundError:
        pytest.skip("no mount(8) here: cannot make a real small filesystem")
    if done.returncode != 0:
        pytest.skip(
            "mounting a tmpfs was refused (needs root with CAP_SYS_ADMIN): "
            + done.stderr.decode(errors="replace").strip()
        )


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str = "4m") -> Iterator[Path]:
    """A real small filesystem mounted at ``folder`` (skips the test when mount is refused)."""
    folder.mkdir(parents=True, exist_ok=True)
    _mount(["-t", "tmpfs", "-o", f"size={size}", "tmpfs"], folder)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def make_read_only(folder: Path) -> None:
    """Remount the tmpfs at ``folder`` read-only (root ignores file modes: EROFS does not)."""
    done = subprocess.run(
        ["mount", "-o", "remount,ro", str(folder)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip("remounting a tmpfs read-only was refused: " + done.stderr.decode().strip())


def fill_up(folder: Path, leave: int = 0) -> Path:
    """Fill ``folder``'s filesystem up to ENOSPC, then free ``leave`` bytes; returns the filler.

    ``leave`` > 0 gives room for the start of a write, so that a larger one fails half
    way through (the case where a partial line could be left behind).
    """
    filler = folder / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for size in (1 << 16, 4096, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry below ``folder`` (symlinks not followed): file bytes, None for others."""
    found: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            relative = str(path.relative_to(folder))
            regular = path.is_file() and not path.is_symlink()
            found[relative] = path.read_bytes() if regular else None
    return found


SPECIAL_KINDS = ("fifo", "socket", "/dev/zero", "folder")
"""What can stand where a regular file belongs: each must be refused without a wait."""


def make_special(path: Path, kind: str) -> socket.socket | None:
    """Put a FIFO (no writer), a listening Unix socket, a symlink to /dev/zero or a folder
    at ``path``; the socket is returned (the caller closes it), else None."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        # Bound at a short path (AF_UNIX paths are short), then moved where it belongs.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp")) / "s"
        listener.bind(str(short))
        listener.listen(1)
        os.rename(short, path)
        short.parent.rmdir()
        return listener
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        raise ValueError(kind)
    return None
