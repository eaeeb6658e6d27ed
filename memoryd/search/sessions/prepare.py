"""Parsing session files a few files ahead of the indexer, in a second process
(docs/design.md#sources-pipeline).

A long pass (the first index of a big tree) is two kinds of work of about the same size:
reading JSON lines and cutting their text into passages (Python), and writing those
passages into FTS5 (SQLite). A worker process does the first for the next files while the
indexer writes the current one. The worker opens a file as the indexer would (no symlink,
the inode listed) and returns plain tuples; the indexer uses a result only when it is for
the file and offset it is about to read, and reads anything past it (or anything the
worker could not read) itself. A pass with little to read never starts the worker.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from memoryd.search.schema import Cut, passage_cuts
from memoryd.search.sessions import claude, codex, gemini
from memoryd.search.sessions.layout import LINES, SessionFile
from memoryd.search.sessions.reader import Changed, lines_from, open_regular
from memoryd.search.sessions.record import Record

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

PARSERS: dict[str, Callable[[bytes], Record]] = {
    claude.SOURCE: claude.parse,
    codex.SOURCE: codex.parse,
    gemini.SOURCE: gemini.parse,
}
PIPELINE_BYTES = 32 << 20
"""A pass with less than this to read parses in-line: starting the worker costs more."""
AHEAD_BYTES = 48 << 20
"""Bytes of files handed to the worker and not yet written, at most (one file at least)."""

MessageTuple = tuple[str | None, str | None, int | None, int, str, list[Cut] | None]
"""(id, role, timestamp, item, text, passages): a message, its passages already cut (its
text then left out) or None (the indexer cuts its text)."""
LineTuple = tuple[
    int, int, str | None, str | None, str | None, str | None, bool, tuple[MessageTuple, ...]
]
"""(offset, length, problem, session, project, rewind_to, reset, messages): what one line
says (a :class:`Record`) as plain values, which cross to the indexer at pickle's speed and
which it takes without building an object per message."""


class Parsed(NamedTuple):
    """What the worker read of one file: from ``start`` to ``end``, a line at a time."""

    inode: tuple[int, int]
    start: int
    end: int
    lines: list[LineTuple]


def parse_file(path: str, inode: tuple[int, int], source: str, start: int) -> Parsed | None:
    """Parse the complete lines of ``path`` from ``start`` (run in the worker); None when
    the file is gone or is not the one listed."""
    try:
        fd = open_regular(Path(path), inode)
    except (OSError, Changed):
        return None
    try:
        parse = PARSERS[source]
        lines: list[LineTuple] = []
        end = start
        for offset, data, length in lines_from(fd, start):
            record = parse(data) if data is not None else Record(problem="line too long")
            lines.append(as_values(offset, length, record, cut=True))
            end = offset + length
            if end - start >= AHEAD_BYTES:
                break  # the indexer reads the rest itself, a line at a time
        return Parsed(inode, start, end, lines)
    except OSError:
        return None
    finally:
        os.close(fd)


def as_values(offset: int, length: int, record: Record, *, cut: bool) -> LineTuple:
    """One line's ``record`` as plain values; with ``cut``, each message's passages cut
    and its text left out (pure)."""
    messages = tuple(
        (m.id, m.role, m.timestamp, m.item, "", passage_cuts(m.text))
        if cut
        else (m.id, m.role, m.timestamp, m.item, m.text, None)
        for m in record.messages
    )
    return (
        offset,
        length,
        record.problem,
        record.session,
        record.project,
        record.rewind_to,
        record.reset,
        messages,
    )


def lines_of(
    parse: Callable[[bytes], Record], fd: int, start: int, parsed: Parsed | None
) -> Iterator[LineTuple]:
    """The lines of the file open as ``fd`` from ``start``: what the worker parsed of it
    when that is this file from this offset (and the file has not shrunk since), then what
    it did not read, parsed here."""
    st = os.fstat(fd)
    same = parsed is not None and parsed.inode == (st.st_dev, st.st_ino)
    if parsed is not None and same and parsed.start == start and parsed.end <= st.st_size:
        yield from parsed.lines
        start = parsed.end
    for offset, data, length in lines_from(fd, start):
        record = parse(data) if data is not None else Record(problem="line too long")
        yield as_values(offset, length, record, cut=False)


def _ignore_signals() -> None:
    """The worker leaves SIGINT and SIGTERM to the indexer, which shuts it down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Ahead:
    """The worker and the files handed to it, by their number in the pass."""

    def __init__(self, source: str, todo: list[tuple[SessionFile, int | None]]) -> None:
        """``todo``: each file of the pass and the offset the indexer will read it from
        when it only grew (None: from the start)."""
        # Imported here: a query that indexes little never starts a worker.
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.source, self.todo = source, todo
        self.pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("forkserver"), initializer=_ignore_signals
        )
        self.handed: dict[int, tuple[Future[Parsed | None], int]] = {}
        self.next = 0
        self.bytes = 0

    def take(self, number: int) -> Parsed | None:
        """What the worker parsed of file ``number`` (waiting for it), None when it was
        not handed over, could not be read, or the worker is gone."""
        from concurrent.futures.process import BrokenProcessPool

        self._fill(number)
        handed = self.handed.pop(number, None)
        self._fill(number + 1)
        if handed is None:
            return None
        future, size = handed
        self.bytes -= size
        try:
            return future.result()
        except BrokenProcessPool:
            self.close()  # the rest is parsed in-line
            return None

    def _fill(self, number: int) -> None:
        from concurrent.futures.process import BrokenProcessPool

        self.next = max(self.next, number)
        while self.pool is not None and self.next < len(self.todo):
            if self.handed and self.bytes >= AHEAD_BYTES:
                return
            file, start = self.todo[self.next]
            if file.shape == LINES and file.inode is not None:
                begin = start or 0
                try:
                    future = self.pool.submit(
                        parse_file, os.fspath(file.path), file.inode, self.source, begin
                    )
                except BrokenProcessPool:
                    self.close()  # the rest is parsed in-line
                    return
                size = min(max(file.size - begin, 0), AHEAD_BYTES)
                self.handed[self.next] = (future, size)
                self.bytes += size
            self.next += 1

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.handed.clear()
