"""What runs inside a pool worker: its set-up, the orphan guard and the job wrappers.

The daemon process hands these functions to its pool (``memoryd.daemon.pool``); they are
imported in the forkserver, never needed by the daemon's own loop.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from memoryd.config.settings import Settings
from memoryd.daemon.logs import configure_logging
from memoryd.errors import MemorydError
from memoryd.files.fsutil import pid_alive
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.stores import disk as stores
from memoryd.stores.compaction import CompactionReport
from memoryd.workspace import Workspace

ORPHAN_CHECK_SECONDS = 1.0

_started: Connection | None = None
"""Where a worker says that it started and which job it takes: see :func:`worker_init`
and :func:`call`."""


def worker_init(
    log_format: str,
    log_level: str,
    daemon_pid: int,
    started: Connection | None = None,
    executor: int = 0,
) -> None:
    """Pool initializer: tells the daemon this worker's pid (for executor ``executor``),
    then ignores the stop signals (only the parent decides when to stop) and logs in the
    same format.

    The pid is sent first: a worker that the daemon has not heard of yet still dies of
    the SIGTERM its executor sends when it breaks (docs/design.md#pool).
    """
    global _started
    _started = started
    if started is not None:
        started.send(("worker", executor, os.getpid()))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    configure_logging(log_format, log_level, sys.stdout)
    threading.Thread(
        target=_exit_with_daemon, args=(daemon_pid,), name="memoryd-orphan-guard", daemon=True
    ).start()


def call(job_id: int, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` after telling the daemon which process runs job ``job_id``.

    When a worker dies the whole pool fails every job it held; knowing which process ran
    which job lets the daemon blame only the job whose worker died
    (docs/design.md#daemon).
    """
    if _started is not None:
        _started.send(("job", job_id, os.getpid()))
    return fn(*args)


def _exit_with_daemon(daemon_pid: int) -> None:
    """End this worker once the daemon is gone (it was SIGKILLed, say).

    Workers ignore SIGTERM, and the forkserver between them and the daemon does not always
    die with it, so an orphan would otherwise live forever, holding the daemon's stdout
    open. Stopping mid-job is safe: the commit protocol is crash-safe.
    """
    while True:
        time.sleep(ORPHAN_CHECK_SECONDS)
        if not pid_alive(daemon_pid):
            os._exit(0)


def compact_stores_job(workspace: Path, settings: Settings) -> CompactionReport:
    """Worker side of a memory-store compaction, with HEARTBEAT.md like any job."""
    heartbeat = HeartbeatManager(Workspace(workspace))
    try:
        # The daemon checked in for the job until now (docs/design.md#checkins).
        with heartbeat.checkins(settings.checkin_interval, immediately=True):
            report = stores.compact(
                workspace,
                None,
                settings.memory.threshold,
                settings.memory.keep_bookmarks,
                drain_seconds=settings.drain_seconds,
            )
    except MemorydError as exc:
        heartbeat.fail_task(f"memory compaction failed: {exc}")
        raise
    heartbeat.complete_task(report.describe())
    return report
