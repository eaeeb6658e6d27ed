"""The daemon's ``[[sources]]``: other agents' session folders tailed into their recall
indexes, so that a question is answered from an up-to-date index (docs/design.md#sources).

One thread owns the indexing: the observers (the same watcher as the workspaces') only put
paths on its queue; it gathers the paths of each source for ``coalesce_ms`` after the
first, then indexes those files (from their byte offsets), and every ``rescan_interval``
it checks the whole folder (the safety net for lost events). The supervisor's loop never
waits for it. After each pass it writes what it holds to ``daemon.json`` in the state
folder, which ``memoryd status`` reads without opening an index.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.daemon.fs_events import FsChange
from memoryd.errors import MemorydError
from memoryd.files.fsutil import atomic_write
from memoryd.search.sessions.places import STATUS_FILE, state_dir

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

    from memoryd.config.sections import SourceEntry

log = structlog.get_logger()

JOIN_TIMEOUT = 10.0


@dataclass(slots=True)
class Tailed:
    """One ``[[sources]]`` entry as the tailer keeps it."""

    kind: str
    path: Path
    root: Path | None = None
    """The resolved folder, once it exists."""
    observer: BaseObserver | None = None
    pending: set[Path] = field(default_factory=set)
    first_noticed: float | None = None
    last_pass: float | None = None
    last_lag: float = 0.0
    """Seconds from the first change noticed to the end of the pass that indexed it."""
    figures: dict[str, int] = field(default_factory=dict)
    error: str | None = None


class SourceTailer:
    """Keeps the indexes of ``[[sources]]`` up to date in a thread of its own."""

    def __init__(self, entries: Sequence[SourceEntry], coalesce: float, rescan: float) -> None:
        self.sources = [Tailed(entry.kind, entry.path) for entry in entries]
        self.coalesce, self.rescan = coalesce, rescan
        self.changes: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.next_rescan = 0.0

    def start(self) -> None:
        """Start the thread (it watches and indexes every source first); no-op without any."""
        if self.sources and self.thread is None:
            self.thread = threading.Thread(target=self._run, name="memoryd-sources", daemon=True)
            self.thread.start()

    def close(self) -> None:
        """Stop the thread (a pass in progress is finished: its transaction is short) and
        the observers."""
        self.stopping.set()
        self.changes.put(None)
        if self.thread is not None:
            self.thread.join(JOIN_TIMEOUT)
        for tailed in self.sources:
            self._unwatch(tailed)

    def _unwatch(self, tailed: Tailed) -> None:
        if tailed.observer is not None:
            with contextlib.suppress(Exception):
                tailed.observer.stop()
                tailed.observer.join(timeout=5)
            tailed.observer = None

    def _watch(self, tailed: Tailed) -> None:
        """Watch a source whose folder exists (a missing one is looked for at each rescan)."""
        from memoryd.daemon.fs_events import start_observer

        if tailed.observer is not None:
            return
        try:
            tailed.root = tailed.path.resolve(strict=True)
            watched = tailed.root if tailed.root.is_dir() else tailed.root.parent
            tailed.observer, _ = start_observer(watched, self.changes)
            tailed.error = None
        except OSError as exc:
            if tailed.error is None:
                log.warning(
                    "source_unwatchable",
                    kind=tailed.kind,
                    path=str(tailed.path),
                    error=exc.strerror or str(exc),
                )
            tailed.error = exc.strerror or str(exc)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step(time.monotonic())
            except Exception as exc:  # the thread must outlive any one bad pass
                log.error("source_tailer_failed", error=type(exc).__name__, reason=str(exc)[:200])
                self.stopping.wait(1.0)

    def step(self, now: float, wait: float | None = None) -> None:
        """One turn: take the changes noticed, index what is due (tests step it)."""
        deadlines = [self.next_rescan] + [
            t.first_noticed + self.coalesce for t in self.sources if t.first_noticed is not None
        ]
        timeout = max(0.0, min(deadlines) - now) if wait is None else wait
        with contextlib.suppress(queue.Empty):
            self._note(self.changes.get(timeout=min(timeout, 1.0)) if timeout else None)
            while True:
                self._note(self.changes.get_nowait())
        now = time.monotonic()
        if now >= self.next_rescan:
            for tailed in self.sources:
                self._watch(tailed)
                if tailed.root is not None:
                    self._pass(tailed, None, now)
            self.next_rescan = time.monotonic() + self.rescan
            self._write_status()
            return
        due = [
            t
            for t in self.sources
            if t.first_noticed is not None and now - t.first_noticed >= self.coalesce
        ]
        for tailed in due:
            paths, tailed.pending = tailed.pending, set()
            self._pass(tailed, paths, tailed.first_noticed or now)
        if due:
            self._write_status()

    def _note(self, change: object) -> None:
        if not isinstance(change, FsChange):
            return
        path = Path(change.path)
        for tailed in self.sources:
            if tailed.root is not None and (
                path == tailed.root or path.is_relative_to(tailed.root)
            ):
                tailed.pending.add(path)
                if tailed.first_noticed is None:
                    tailed.first_noticed = time.monotonic()

    def _pass(self, tailed: Tailed, paths: set[Path] | None, noticed: float) -> None:
        from memoryd.search.sessions.search import figures, update

        assert tailed.root is not None
        if paths is None:
            tailed.pending = set()
        tailed.first_noticed = None
        try:
            result = update(tailed.root, tailed.kind, changed=paths)
            if result is None:
                return  # another process holds the index: the rescan catches up
            tailed.figures = figures(tailed.root, tailed.kind)
            tailed.error = None
        except Exception as exc:  # one bad pass is one log line; the next pass retries
            tailed.error = str(exc)[:200]
            log.warning(
                "source_index_failed",
                kind=tailed.kind,
                path=str(tailed.path),
                error=type(exc).__name__,
                reason=tailed.error,
            )
            return
        tailed.last_pass = time.time()
        tailed.last_lag = time.monotonic() - noticed
        if result.added or result.removed:
            log.info(
                "source_indexed",
                kind=tailed.kind,
                path=str(tailed.path),
                files=result.files,
                bytes=result.bytes,
                added=result.added,
                removed=result.removed,
                lag_seconds=round(tailed.last_lag, 3),
            )

    def status(self) -> list[dict[str, Any]]:
        """What each source's index holds, and how far behind it is."""
        return [
            {
                "kind": tailed.kind,
                "path": str(tailed.path),
                "root": str(tailed.root) if tailed.root is not None else None,
                **tailed.figures,
                "lag_seconds": round(tailed.last_lag, 3),
                "pending_changes": len(tailed.pending),
                "last_pass": tailed.last_pass,
                "error": tailed.error,
            }
            for tailed in self.sources
        ]

    def _write_status(self) -> None:
        folder = state_dir()
        record = {
            "pid": os.getpid(),
            "written": time.time(),
            "rescan_seconds": self.rescan,
            "sources": self.status(),
        }
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            data = json.dumps(record).encode()
            atomic_write(folder / STATUS_FILE, data, 0o600, root=folder, durable=False)
        except (OSError, MemorydError) as exc:
            log.warning("source_status_unwritten", error=getattr(exc, "strerror", None) or str(exc))
