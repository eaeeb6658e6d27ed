"""The processes of the worker pool: what its forkserver preloads, and how workers, the
forkserver and multiprocessing's resource tracker are stopped, each within a bounded
time (docs/design.md#pool).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import structlog

log = structlog.get_logger()

PRELOAD = [
    "memoryd.daemon.worker",
    "memoryd.compaction.job.run",
    "memoryd.search.archive_index",
    "memoryd.search.history",
]
"""Imported once in the forkserver, so that every worker (and every pool rebuilt after a
crash) starts without importing memoryd again, the modules its first job imports after
its commit (the recall index) included."""
SDK_PRELOAD = [
    "anthropic",
    "memoryd.llm.anthropic",
    "httpcore2",
    "h11",
    "truststore",
    "memoryd.llm.tls_ready",
]
"""With the anthropic backend: the SDK, the HTTP stack it imports at its first request,
and the TLS context its clients share (built once, inherited by every worker). Without
the HTTP stack and the context, a burst's first round made every fresh worker import and
build them at once (docs/design.md#burst). A name that cannot be imported is skipped by
the forkserver."""
SDK_PRELOADS = {
    "anthropic": SDK_PRELOAD,
    "openai": ["openai", "memoryd.llm.openai_compat", "httpcore2", "h11", "memoryd.llm.tls_ready"],
}
"""What each LLM backend's jobs import, preloaded alike."""
KILL_WAIT = 2.0
"""Longest wait for a SIGKILLed worker to be gone."""


def preload(sdk: bool, backend: str = "anthropic") -> list[str]:
    """What a forkserver imports before it forks a worker (``sdk``: the LLM ``backend``'s
    SDK too)."""
    return [*PRELOAD, *(SDK_PRELOADS.get(backend, []) if sdk else [])]


def process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None once it has exited.

    A worker is known by its pid and this start time, so a pid the kernel has given to a
    new process since never reads as the worker still running. A zombie reads as exited:
    it holds no lock and no memory any more.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name (field 2) may hold spaces and parentheses: read past its end.
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def kill_workers(workers: dict[int, int | None]) -> None:
    """SIGKILL the worker processes ``workers`` (pid: start time, as each reported
    itself) that still run, and wait up to ``KILL_WAIT`` for each to be gone.

    Workers ignore SIGTERM (only the daemon decides), so killing is the only way. They
    are the forkserver's children, not the daemon's: once dead they are reaped by it (or
    by init, when the forkserver is gone), so the wait watches /proc. A killed worker's
    locks are free once it has exited, so a job retried at once does not find its
    workspace busy.
    """
    running = {
        pid: start
        for pid, start in workers.items()
        if start is not None and process_start(pid) == start
    }
    for pid in running:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT
    while running and time.monotonic() < deadline:
        running = {pid: start for pid, start in running.items() if process_start(pid) == start}
        if running:
            time.sleep(0.01)


def children(pid: int) -> list[int]:
    """The child pids of ``pid`` (from /proc/<pid>/task/*/children)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(child) for child in f.read().split()]
    return found


def forkservers() -> list[int]:
    """The daemon's running forkserver (a list: none, or one), found among its children."""
    return [pid for pid in children(os.getpid()) if _is_server(pid)]


def _is_server(pid: int) -> bool:
    """Is ``pid`` running the forkserver's code (a zombie's command line is empty)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"multiprocessing.forkserver" in cmdline.read()
    except OSError:
        return False


def stop_server(force: bool = False) -> list[int] | None:
    """SIGTERM the daemon's forkserver and remove its socket file; returns its pid, or
    None (and leaves it running) while it still has a worker, unless ``force``.

    The standard library has no public way to stop it, but it checks at every
    ``ensure_running()`` whether its forkserver has exited and then starts a new one. So
    the exited forkserver must stay unreaped (a zombie, no memory) until then: its exit
    status is that check's to collect. Call it only when no worker is left: a worker
    forked from it would lose the socket it was started through.
    """
    pids = forkservers()
    if not force and any(children(pid) for pid in pids):
        return None
    for pid in pids:
        sockets = _listening_sockets(pid)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        for path in sockets:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return pids


def _listening_sockets(pid: int) -> list[str]:
    """The file system paths of the Unix sockets ``pid`` holds open (the forkserver's
    one listening socket, in multiprocessing's temporary folder)."""
    inodes: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    paths: list[str] = []
    with contextlib.suppress(OSError), open(f"/proc/{pid}/net/unix") as table:
        next(table, None)
        for line in table:
            fields = line.split()
            if len(fields) >= 8 and fields[6] in inodes and fields[7].startswith("/"):
                paths.append(fields[7])
    return paths


def wait_exited(pids: list[int]) -> None:
    """Wait up to ``KILL_WAIT`` for ``pids`` (the daemon's children, asked to stop) to
    have exited, without reaping them; SIGKILL those still running."""
    deadline = time.monotonic() + KILL_WAIT
    while (running := [pid for pid in pids if process_start(pid) is not None]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.01)
    for pid in running:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class Forkserver:
    """The pool's forkserver: started for a job when none runs, stopped (SIGTERM, without
    waiting) once no worker is left, checked at later loop steps (SIGKILL past
    ``KILL_WAIT``) and before the next start (docs/design.md#pool)."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._up = False
        self._exiting: dict[int, float] = {}
        """Forkservers asked to stop and still running, with when to SIGKILL them."""

    def ensure(self, sdk: bool, backend: str) -> None:
        """Start the forkserver (and the resource tracker) unless it runs: a worker forks
        from it in milliseconds instead of starting an interpreter that imports memoryd."""
        from multiprocessing import forkserver

        if not forkservers():
            # The standard library starts a new one only once the last has exited.
            wait_exited(list(self._exiting))
            self._exiting.clear()
            self._context.set_forkserver_preload(preload(sdk, backend))
            log.info("forkserver_started", sdk=sdk, backend=backend)
        self._up = True
        forkserver.ensure_running()

    def stop(self) -> None:
        # The resource tracker stays (~6 MB): executors' semaphores may outlive their
        # workers and unregister later.
        if self._up:
            pids = stop_server()
            if pids is None:
                return  # a worker still runs: asked again at the next loop step
            self._up = False
            for pid in pids:
                self._exiting[pid] = time.monotonic() + KILL_WAIT
            log.info("forkserver_stopped")

    def reap(self) -> None:
        for pid, deadline in list(self._exiting.items()):
            if process_start(pid) is not None:
                if time.monotonic() > deadline:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                continue
            del self._exiting[pid]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            wait_exited(list(self._exiting))
        self._exiting.clear()
        self._up = False


def shut_server() -> None:
    """Stop the forkserver for good (the pool's end), its workers killed first: as between
    jobs (:func:`stop_server`), but within ``KILL_WAIT`` and whether or not it still has a
    child. It is left for the standard library (or whoever outlives the daemon) to reap."""
    with contextlib.suppress(Exception):
        wait_exited(stop_server(force=True) or [])


def stop_tracker() -> None:
    """Stop multiprocessing's resource tracker within ``KILL_WAIT``: the last thing the
    daemon does (at its exit), so that systemd finds nothing left to kill.

    The tracker stops once the last copy of its pipe's write end is closed. The daemon's
    copy is found through /proc and pointed at /dev/null (so that the standard library,
    which keeps the descriptor's number, never writes into a file that reused it); the
    forkserver's and the workers' copies went with them. The standard library then takes
    the tracker for alive, so nothing in this process may use multiprocessing afterwards.
    A tracker still running past ``KILL_WAIT`` (a worker that outlived its forkserver
    holds a copy) is SIGKILLed. Like the forkserver it is not reaped: the standard library
    may wait for it at exit.
    """
    with contextlib.suppress(Exception):
        running = trackers()
        for pid in running:
            _close_copy(_tracker_pipe(pid))
        wait_exited(running)


_AT_EXIT: list[bool] = []


def stop_tracker_at_exit() -> None:
    """Have :func:`stop_tracker` run as this process exits (once, however often asked)."""
    if not _AT_EXIT:
        import atexit

        _AT_EXIT.append(True)
        atexit.register(stop_tracker)


def trackers() -> list[int]:
    """The daemon's running resource tracker (none, or one), found among its children."""
    return [pid for pid in children(os.getpid()) if _tracker_pipe(pid) is not None]


def _tracker_pipe(pid: int) -> str | None:
    """The pipe (``pipe:[inode]``) a resource tracker ``pid`` reads, named in its command
    line as ``main(fd)``; None when ``pid`` is no running tracker."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            text = cmdline.read()
        if b"multiprocessing.resource_tracker" not in text:
            return None
        fd = int(text.split(b"main(", 1)[1].split(b")", 1)[0])
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except (OSError, IndexError, ValueError):
        return None


def _close_copy(pipe: str | None) -> None:
    """Point the daemon's descriptors on ``pipe`` at /dev/null (closing them for the
    reader, keeping their numbers taken)."""
    if pipe is None:
        return
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") == pipe:
                null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.dup2(null, int(fd), inheritable=False)
                finally:
                    os.close(null)
