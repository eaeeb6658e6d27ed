"""A record of what memoryd asks of the file system during one real run (docs/design.md#power-cut).

:func:`recording` wraps the ``os`` functions that change files (``open`` with
``O_CREAT``/``O_TRUNC``, ``write``, ``pwrite``, ``copy_file_range``, ``ftruncate``,
``fsync``, ``rename``, ``replace``, ``link``, ``unlink``, ``remove``, ``mkdir``) in the
test process for the length of a ``with`` block, and notes, in order, each one that
touches a file below the recorded folder. Every module of memoryd calls these through
the ``os`` module, so the record is what the run really asked, whoever asked it: the
commit, the drain, recovery, the appends, and a test's own writer. Nothing is wrapped
outside the block.

Files are named by a *file id* (one per inode, new for each created file), so a write to
a file that has since been renamed or unlinked still has its owner. Names that carry an
inode number (a pending archive, a drain mark) are kept as templates, ``{ino:ID}``, filled
with the inode numbers of the folder a crash state is built in.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from powerloss_ops import (
    DIR,
    Create,
    Fsync,
    FsyncDir,
    Link,
    Mkdir,
    Op,
    Recording,
    Rename,
    Returned,
    Truncate,
    Unit,
    Unlink,
    Write,
)

_INODE_NAMES = (
    # .memoryd/archive/<name>.<pid>.<inode of the temp file>.pending
    re.compile(r"^.+\.jsonl\.\d+\.(?P<ino>\d+)\.pending$"),
    # .memoryd/draining/<file>.<pid>.<inode of the replaced file>.<offset>[...]
    re.compile(r"^(?:conversation\.jsonl|memory~[a-z]+\.jsonl)\.\d+\.(?P<ino>\d+)\.\d+"),
)
WRAPPED = (
    "open",
    "write",
    "pwrite",
    "copy_file_range",
    "ftruncate",
    "fsync",
    "rename",
    "replace",
    "link",
    "unlink",
    "remove",
    "mkdir",
)
"""The ``os`` functions a record wraps: every one memoryd changes files with."""


class _Recorder:
    """The state behind the wrapped ``os`` functions while a record is running."""

    def __init__(self, root: Path, ignore: Callable[[str], bool]) -> None:
        self.root = os.path.realpath(root)
        self.dev = os.stat(self.root).st_dev
        self.ignore = ignore
        self.guard = threading.RLock()
        self.next_fid = 0
        self.by_ino: dict[int, int] = {}
        self.recording = Recording({}, {}, {})
        self._baseline()

    def _baseline(self) -> None:
        files: list[tuple[str, int]] = []
        for folder, dirs, names in os.walk(self.root):
            for name in dirs:
                rel = self.relative(os.path.join(folder, name))
                assert rel is not None
                self.recording.names[rel] = DIR
            for name in names:
                full = os.path.join(folder, name)
                rel = self.relative(full)
                assert rel is not None
                st = os.lstat(full)
                if not stat.S_ISREG(st.st_mode):
                    continue
                with open(full, "rb") as file:
                    content = file.read()
                if self.ignore(rel):
                    self.recording.units[rel] = content
                    continue
                if st.st_ino not in self.by_ino:
                    fid = self.by_ino[st.st_ino] = self._new_fid()
                    self.recording.data[fid] = content
                files.append((rel, st.st_ino))
        for rel, ino in files:  # once every inode has its id: names may carry them
            self.recording.names[self.template(rel)] = self.by_ino[ino]

    def _new_fid(self) -> int:
        self.next_fid += 1
        return self.next_fid

    def relative(self, full: str) -> str | None:
        """``full`` relative to the recorded folder, or None when it is outside."""
        full = os.path.normpath(full)
        if full == self.root or not full.startswith(self.root + os.sep):
            return None
        return full[len(self.root) + 1 :]

    def resolve(self, path: Any, dir_fd: int | None) -> str | None:
        """The recorded-folder-relative name of ``path`` (opened relative to ``dir_fd``)."""
        name = os.fsdecode(path)
        if not os.path.isabs(name):
            base = os.getcwd() if dir_fd is None else os.readlink(f"/proc/self/fd/{dir_fd}")
            name = os.path.join(base, name)
        return self.relative(name)

    def template(self, rel: str) -> str:
        """``rel`` with an inode number in its last component replaced by ``{ino:ID}``."""
        folder, _, name = rel.rpartition("/")
        for pattern in _INODE_NAMES:
            match = pattern.match(name)
            if match is not None:
                fid = self.by_ino.get(int(match["ino"]))
                if fid is not None:
                    name = f"{name[: match.start('ino')]}{{ino:{fid}}}{name[match.end('ino') :]}"
                break
        return f"{folder}/{name}" if folder else name

    def fid_of(self, fd: int) -> int | None:
        """The file id behind descriptor ``fd``, or None for a file not recorded."""
        st = os.fstat(fd)
        if st.st_dev != self.dev or not stat.S_ISREG(st.st_mode):
            return None
        return self.by_ino.get(st.st_ino)

    def folder_of(self, fd: int) -> str | None:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            return None
        full = os.readlink(f"/proc/self/fd/{fd}")
        return "" if os.path.normpath(full) == self.root else self.relative(full)

    def add(self, op: Op) -> None:
        self.recording.ops.append(op)


def _wrappers(rec: _Recorder, real: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    """The stand-ins for the ``os`` functions, each calling the real one."""

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        with rec.guard:
            rel = rec.resolve(path, dir_fd)
            if rel is None or rec.ignore(rel):
                return int(real["open"](path, flags, mode, dir_fd=dir_fd))
            try:
                before: os.stat_result | None = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                before = None
            fd = int(real["open"](path, flags, mode, dir_fd=dir_fd))
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return fd
            if before is None:
                fid = rec.by_ino[st.st_ino] = rec._new_fid()
                rec.add(Create(rec.template(rel), fid))
            elif flags & os.O_TRUNC and before.st_size:
                rec.add(Truncate(rec.by_ino[st.st_ino], 0))
            return fd

    def _position(fd: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
            return os.fstat(fd).st_size
        return os.lseek(fd, 0, os.SEEK_CUR)

    def write(fd: int, data: Any) -> int:
        with rec.guard:
            fid = rec.fid_of(fd)
            if fid is None:
                return int(real["write"](fd, data))
            offset = _position(fd)
            written = int(real["write"](fd, data))
            rec.add(Write(fid, offset, bytes(memoryview(data)[:written])))
            return written

    def pwrite(fd: int, data: Any, offset: int) -> int:
        with rec.guard:
            written = int(real["pwrite"](fd, data, offset))
            fid = rec.fid_of(fd)
            if fid is not None:
                rec.add(Write(fid, offset, bytes(memoryview(data)[:written])))
            return written

    def copy_file_range(src: int, dst: int, count: int, *args: Any, **kwargs: Any) -> int:
        with rec.guard:
            fid = rec.fid_of(dst)
            if fid is None:
                return int(real["copy_file_range"](src, dst, count, *args, **kwargs))
            if len(args) > 1 or "offset_dst" in kwargs:
                raise AssertionError("copy_file_range with offset_dst is not recorded")
            source = args[0] if args else kwargs.get("offset_src")
            if source is None:
                source = os.lseek(src, 0, os.SEEK_CUR)
            offset = _position(dst)
            copied = int(real["copy_file_range"](src, dst, count, *args, **kwargs))
            if copied > 0:  # what was copied, read from the source (dst may be write-only)
                rec.add(Write(fid, offset, os.pread(src, copied, source)))
            return copied

    def ftruncate(fd: int, length: int) -> None:
        with rec.guard:
            real["ftruncate"](fd, length)
            fid = rec.fid_of(fd)
            if fid is not None:
                rec.add(Truncate(fid, length))

    def fsync(fd: Any) -> None:
        with rec.guard:
            number = fd if isinstance(fd, int) else fd.fileno()
            real["fsync"](number)
            fid = rec.fid_of(number)
            if fid is not None:
                rec.add(Fsync(fid))
                return
            folder = rec.folder_of(number)
            if folder is not None:
                rec.add(FsyncDir(folder))

    def _entry(path: Any, dir_fd: int | None) -> tuple[str | None, int | None]:
        rel = rec.resolve(path, dir_fd)
        if rel is None or rec.ignore(rel):
            return None, None
        try:
            st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return rel, None
        if stat.S_ISDIR(st.st_mode):
            return rel, DIR
        return rel, rec.by_ino.get(st.st_ino)

    def rename_as(name: str) -> Callable[..., None]:
        def rename(
            src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
        ) -> None:
            with rec.guard:
                rel, fid = _entry(src, src_dir_fd)
                target = rec.resolve(dst, dst_dir_fd)
                source = rec.template(rel) if rel is not None else None
                real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                if source is not None and target is not None and fid is not None:
                    if fid == DIR:
                        raise AssertionError(f"renaming a folder is not recorded: {rel}")
                    rec.add(Rename(source, rec.template(target), fid))

        return rename

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        with rec.guard:
            _, fid = _entry(src, kwargs.get("src_dir_fd"))
            target = rec.resolve(dst, kwargs.get("dst_dir_fd"))
            real["link"](src, dst, **kwargs)
            if target is not None and fid is not None:
                rec.add(Link(rec.template(target), fid))

    def unlink_as(name: str) -> Callable[..., None]:
        def unlink(path: Any, *, dir_fd: int | None = None) -> None:
            with rec.guard:
                rel, fid = _entry(path, dir_fd)
                source = rec.template(rel) if rel is not None else None
                real[name](path, dir_fd=dir_fd)
                if source is not None and fid is not None:
                    rec.add(Unlink(source))

        return unlink

    def mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        with rec.guard:
            real["mkdir"](path, mode, dir_fd=dir_fd)
            rel = rec.resolve(path, dir_fd)
            if rel is not None and not rec.ignore(rel):
                rec.add(Mkdir(rel))

    return {
        "open": open_,
        "write": write,
        "pwrite": pwrite,
        "copy_file_range": copy_file_range,
        "ftruncate": ftruncate,
        "fsync": fsync,
        "rename": rename_as("rename"),
        "replace": rename_as("replace"),
        "link": link,
        "unlink": unlink_as("unlink"),
        "remove": unlink_as("remove"),
        "mkdir": mkdir,
    }


class Recorder:
    """What a scenario uses while recording: note acknowledged writes and SQLite units."""

    def __init__(self, state: _Recorder) -> None:
        self._state = state

    @property
    def recording(self) -> Recording:
        return self._state.recording

    @property
    def root(self) -> Path:
        """The recorded folder."""
        return Path(self._state.root)

    def returned(self, path: str, data: bytes, *, replaced: bool = False) -> None:
        """``data`` was appended to ``path`` (or, ``replaced``, is its content) and the
        caller was told so: from here on it must survive a power cut."""
        with self._state.guard:
            self._state.add(Returned(path, data, replaced))

    def acknowledged_before(self, path: str, data: bytes) -> None:
        """``data`` was acknowledged as appended to ``path`` before the record began."""
        self._state.recording.acknowledged.append(Returned(path, data))

    @contextlib.contextmanager
    def acknowledged(self, path: str) -> Iterator[None]:
        """Whatever the block appends to ``path`` (the file of that name when the block
        ends) is acknowledged when it ends without an exception."""
        state = self._state
        start = len(state.recording.ops)
        yield
        with state.guard:
            try:
                fid = state.by_ino.get(os.stat(os.path.join(state.root, path)).st_ino)
            except FileNotFoundError:
                return
            data = b"".join(
                op.data
                for op in state.recording.ops[start:]
                if isinstance(op, Write) and op.fid == fid
            )
            state.add(Returned(path, data))

    def unit(self) -> None:
        """Note the ignored (SQLite) files as they are now: one unit of change."""
        state = self._state
        with state.guard:
            files = []
            for folder, _dirs, names in os.walk(state.root):
                for name in names:
                    rel = state.relative(os.path.join(folder, name))
                    if rel is not None and state.ignore(rel):
                        with open(os.path.join(folder, name), "rb") as file:
                            files.append((rel, file.read()))
            state.add(Unit(tuple(sorted(files))))


@contextlib.contextmanager
def recording(root: Path, ignore: Callable[[str], bool] = lambda _rel: False) -> Iterator[Recorder]:
    """Record every file-system change below ``root`` made inside the block.

    Everything in ``root`` when the block starts is taken as durable. Files for which
    ``ignore(relative path)`` is true are not recorded (SQLite's: see :class:`Unit`).
    """
    state = _Recorder(root, ignore)
    real = {name: getattr(os, name) for name in WRAPPED}
    for name, wrapper in _wrappers(state, real).items():
        setattr(os, name, wrapper)
    try:
        yield Recorder(state)
    finally:
        for name, function in real.items():
            setattr(os, name, function)
