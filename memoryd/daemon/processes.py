"""The processes of the worker pool: what its forkserver preloads, and how workers, the
forkserver and multiprocessing's resource tracker are stopped, each within a bounded
time (docs/design.md#pool).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

PRELOAD = [
    "memoryd.daemon.worker",
    "memoryd.job.run",
    "memoryd.search.index",
    "memoryd.search.history",
]
"""Imported once in the forkserver, so that every worker (and every pool rebuilt after a
crash) starts without importing memoryd again, the modules its first job imports after
its commit (the recall index) included."""
SDK_PRELOAD = ["anthropic", "memoryd.summarizers.anthropic", "httpcore2", "h11", "truststore"]
"""With the anthropic backend: the SDK, and the HTTP stack it imports at its first
request. Without the latter, a burst's first round made every fresh worker import them
at once (docs/design.md#burst). A name that cannot be imported is skipped by the
forkserver."""
SDK_PRELOADS = {
    "anthropic": SDK_PRELOAD,
    "openai": ["openai", "memoryd.summarizers.openai_compat", "httpcore2", "h11"],
}
"""What each LLM backend's jobs import, preloaded alike."""
KILL_WAIT = 2.0
"""Longest wait for a SIGKILLed worker to be gone."""


def preload(sdk: bool, backend: str = "anthropic") -> list[str]:
    """What a forkserver imports before it forks a worker (``sdk``: the LLM ``backend``'s
    SDK too)."""
    return [*PRELOAD, *(SDK_PRELOADS.get(backend, []) if sdk else [])]


def kill_executor(executor: ProcessPoolExecutor) -> None:
    """SIGKILL every worker of ``executor`` and wait for each to be gone."""
    # Workers ignore SIGTERM (only the daemon decides), so killing is the only way; Python
    # 3.11 has no public API for it (3.14 adds kill_workers()).
    # Joined too: a killed worker's locks are free once it is gone, so a job retried at
    # once does not find its workspace busy.
    kill_processes(list((getattr(executor, "_processes", None) or {}).values()))


def kill_processes(processes: list[Any]) -> None:
    """SIGKILL ``processes`` (also a worker that outlived its forkserver) and join them."""
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
        # A worker whose forkserver died reads as exited (its sentinel pipe came from the
        # forkserver), so kill() above skips it although it runs on.
        with contextlib.suppress(Exception):
            if process.exitcode is not None and _is_forkserver_child(process.pid):
                os.kill(process.pid, signal.SIGKILL)
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=KILL_WAIT)


def _is_forkserver_child(pid: int) -> bool:
    """Is ``pid`` alive and a process forked by a forkserver (a worker, not a reused pid)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"multiprocessing.forkserver" in cmdline.read()
    except OSError:
        return False


def stop_helpers() -> None:
    """Stop the forkserver and the resource tracker, each within ``KILL_WAIT``.

    Both stop when the daemon closes its end of their pipe. The standard library's own
    ``_stop()`` then waits for them without a limit, and the tracker only sees the end of
    its pipe once every process holding a copy has gone: a worker that outlived its
    forkserver would hold the stop forever. So: close, wait a bounded time, then kill.
    Private attributes, present since Python 3.8.
    """
    from multiprocessing import forkserver, resource_tracker

    with contextlib.suppress(Exception):
        close_and_reap(stop_forkserver(forkserver._forkserver), None)
    tracker: Any = resource_tracker._resource_tracker
    with contextlib.suppress(Exception):
        pid, fd = tracker._pid, tracker._fd
        tracker._pid = tracker._fd = None
        close_and_reap(pid, fd)


def stop_forkserver(server: Any) -> int | None:
    """Ask ``server`` (the stdlib's ForkServer) to stop by closing its "alive" pipe, and
    clear its fields under its own lock, so that ``ensure_running()`` starts a new one
    later. Returns its pid, for the caller to reap."""
    from multiprocessing import util

    with server._lock:
        pid, fd = server._forkserver_pid, server._forkserver_alive_fd
        address = server._forkserver_address
        server._forkserver_pid = server._forkserver_alive_fd = None
        server._forkserver_address = None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        if address and not util.is_abstract_socket_namespace(address):
            with contextlib.suppress(OSError):
                os.unlink(address)
    return pid if isinstance(pid, int) else None


def close_and_reap(pid: int | None, fd: int | None) -> None:
    """Close a helper's pipe (asking it to stop) and reap it; SIGKILL it past KILL_WAIT."""
    if fd is not None:
        os.close(fd)
    if pid is None:
        return
    deadline = time.monotonic() + KILL_WAIT
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
