"""Where a source's index lives and what it holds (docs/design.md#sources).

One SQLite file per source path under ``$XDG_STATE_HOME/memoryd/sources/`` (by default
``~/.local/state``), mode 0600 in a 0700 folder: it holds message text. Nothing is ever
written under the source's own folder. What it holds is
:data:`memoryd.search.schema.SESSIONS`: the tables of every recall index, so that the same
ranking reads them, with what a session file adds. :class:`Batch` is the transaction a
pass indexes its files in.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from memoryd import strict_json
from memoryd.search import database
from memoryd.search.sessions.places import state_dir
from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Final

WRITER_CACHE_KIB = 64 << 10


def index_path(root: Path, source: str) -> Path:
    """The index file of the source at ``root`` (an absolute, resolved path)."""
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:20]
    return state_dir() / f"{source}-{digest}.sqlite"


PROGRESS_SECONDS = 0.5
"""A pass says how far it is at most this often, and only once it has lasted this long."""


class Progress(Value):
    """How far a pass over a source's files is (docs/design.md#sources)."""

    __slots__ = (
        "bytes_done",
        "bytes_total",
        "files_done",
        "files_total",
        "first",
        "pid",
        "seconds",
    )

    def __init__(
        self,
        first: bool,
        files_done: int,
        files_total: int,
        bytes_done: int,
        bytes_total: int,
        seconds: float,
        pid: int = 0,
    ) -> None:
        self.first: Final = first
        """The index held nothing when the pass began: it is being built."""
        self.files_done: Final = files_done
        self.files_total: Final = files_total
        self.bytes_done: Final = bytes_done
        self.bytes_total: Final = bytes_total
        self.seconds: Final = seconds
        """Since the pass began."""
        self.pid: Final = pid

    def as_dict(self) -> dict[str, object]:
        """The fields by name, as the progress file holds them."""
        return {name: getattr(self, name) for name in self.__slots__}

    @property
    def percent(self) -> int:
        """Bytes done, in whole percent (100 only when done)."""
        if self.bytes_total <= 0 or self.bytes_done >= self.bytes_total:
            return 100 if self.files_done >= self.files_total else 99
        return min(99, self.bytes_done * 100 // self.bytes_total)

    def line(self) -> str:
        """One line for a terminal: files, MB, rate, time left."""
        rate = self.bytes_done / self.seconds if self.seconds > 0 else 0.0
        left = (self.bytes_total - self.bytes_done) / rate if rate > 0 else None
        eta = f", about {left:.0f} s left" if left is not None else ""
        return (
            f"indexing: {self.files_done:,} of {self.files_total:,} files, "
            f"{self.bytes_done / 1e6:,.0f} of {self.bytes_total / 1e6:,.0f} MB "
            f"({self.percent}%), {rate / 1e6:.1f} MB/s{eta}"
        )


def progress_path(path: Path) -> Path:
    """The file where a long pass over the index at ``path`` says how far it is."""
    return Path(f"{path}.progress")


@contextlib.contextmanager
def progress_file(
    path: Path, tell: Callable[[Progress], None] | None
) -> Iterator[Callable[[Progress], None]]:
    """A function a pass calls as it goes: past :data:`PROGRESS_SECONDS` it writes the
    progress file (atomically, for other processes) and tells ``tell``; a first index
    writes it at once. The file is removed when the pass ends."""
    target = progress_path(path)
    last = [-PROGRESS_SECONDS]

    def told(progress: Progress) -> None:
        done = progress.files_done >= progress.files_total
        now = time.monotonic()
        if progress.first and last[0] < 0:
            last[0] = 0.0  # a first index says so at once: others must not read it as empty
        elif progress.seconds < PROGRESS_SECONDS or (now - last[0] < PROGRESS_SECONDS and not done):
            return
        else:
            last[0] = now
            if tell is not None:
                tell(progress)
        temp = Path(f"{target}.{os.getpid()}.tmp")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(strict_json.dumps_line({**progress.as_dict(), "pid": os.getpid()}))
            os.replace(temp, target)
        except OSError:
            pass  # other processes then read what is indexed without knowing how far

    try:
        yield told
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)


def read_progress(path: Path) -> Progress | None:
    """What the progress file of the index at ``path`` says (None when there is none, or
    its writer is gone)."""
    try:
        data = progress_path(path).read_bytes()
        value = strict_json.loads(data)
        progress = Progress(**value)
        os.kill(progress.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return progress
    except (OSError, strict_json.JSONProblem, TypeError):
        return None
    return progress


def file_path(root: Path, name: str, raw: bytes | None) -> Path:
    """The path of an indexed file: ``root`` itself for the name "", else below it."""
    if raw is not None:
        return root / os.fsdecode(raw)
    return root / name if name else root


def _make_private_dir(folder: Path) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.lstat()
    if folder.is_symlink() or not st.st_mode & 0o040000:
        raise OSError(f"{folder}: is not a folder")


def create_file(path: Path) -> None:
    """Create an empty index file, mode 0600 in a private folder (:func:`memoryd.search.
    database.create_file`)."""
    _make_private_dir(path.parent)
    database.create_file(path)


def connect(path: Path) -> sqlite3.Connection:
    """The writer's connection: WAL, not syncing (a cache of files that are still there:
    an index a crash damaged is rebuilt), a page cache that holds the FTS5 segments being
    merged (docs/design.md#sources). The caller holds :func:`writer_lock`."""
    conn = database.connect_wal(path, "OFF")
    conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
    return conn


def meta(root: Path, source: str) -> dict[str, str]:
    """What the ``meta`` table of the index of ``root`` holds: the folder and its agent."""
    return {"root": os.fsdecode(root), "source": source}


@contextlib.contextmanager
def writer_lock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold ``flock`` on ``<index>.lock``: one process indexes a source at a time.

    Yields False instead of waiting when ``blocking`` is False and another holds it.
    """
    _make_private_dir(path.parent)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


class Batch:
    """The transaction that files are indexed in: one for many files, committed once
    ``commit_bytes`` were read (within a file too, so a reader sees a long first pass
    grow). There is no savepoint per file: FTS5 writes its pending terms to disk at every
    savepoint, a segment per file to merge later. A file that fails midway rolls the
    whole transaction back instead (:meth:`end_file` says so), and the pass indexes the
    files of that transaction again without it (docs/design.md#sources)."""

    def __init__(self, conn: sqlite3.Connection, commit_bytes: int) -> None:
        self.conn, self.commit_bytes = conn, commit_bytes
        self.open = False
        self.pending = 0
        """Bytes read in the open transaction."""
        self.current = 0
        """The number (in the pass) of the file being indexed."""
        self.began = 0
        """The number of the file the open transaction began in."""
        self.on_begin: Callable[[], None] | None = None
        """Called as a transaction begins (the pass notes its counts)."""

    def begin_file(self) -> None:
        if not self.open:
            self.conn.execute("BEGIN IMMEDIATE")
            self.open = True
            self.began = self.current
            if self.on_begin is not None:
                self.on_begin()

    def end_file(self, ok: bool) -> bool:
        """False when the transaction is gone: rolled back because the file failed (or by
        SQLite itself: disk full, ...); the files since :attr:`began` must be read again."""
        if not self.conn.in_transaction:
            self.open, self.pending = False, 0
            return False
        if not ok:
            self.rollback()
            return False
        if self.pending >= self.commit_bytes:
            self.commit()
        return True

    def commit_within_file(self) -> None:
        self.commit()
        self.begin_file()

    def commit(self) -> None:
        if self.open:
            self.conn.execute("COMMIT")
            self.open, self.pending = False, 0

    def rollback(self) -> None:
        if self.open and self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        self.open, self.pending = False, 0
