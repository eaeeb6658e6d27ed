"""The pool hands jobs to its executor from a launcher thread, so that ``submit()`` never
waits for a forkserver that is starting (or for a worker's fork). Real forkserver, real
worker processes; the only thing held back is the moment the launcher may start the
forkserver, by an event the test controls.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from daemon_harness import children, cmdline, wait_until

from memoryd.daemon.pool import WorkerPool
from memoryd.errors import PoolUnavailable


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """While the event is unset the launcher waits where it would start the forkserver,
    as it does while a new forkserver imports memoryd and the SDK."""
    release = threading.Event()
    original = WorkerPool._ensure_server

    def slow_start(self: WorkerPool) -> None:
        release.wait(30)
        original(self)

    monkeypatch.setattr(WorkerPool, "_ensure_server", slow_start)
    yield release
    release.set()


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    pool = WorkerPool(2, "json", "warning", idle_timeout=60)
    yield pool
    pool.close()


def test_submit_returns_before_the_forkserver_is_up_and_the_jobs_then_run_in_workers(
    pool: WorkerPool, held: threading.Event
) -> None:
    first_id, first = pool.submit(os.getpid)
    second_id, second = pool.submit(len, "four")

    assert not first.done() and not second.done()
    assert pool.running == 2 and first_id != second_id

    held.set()
    assert first.result(timeout=30) != os.getpid()
    assert second.result(timeout=30) == 4


def test_a_job_whose_executor_was_replaced_before_it_was_handed_over_fails_as_innocent(
    pool: WorkerPool, held: threading.Event
) -> None:
    """The executor a job was queued for is shut down (a resize) before the launcher
    reaches it: the job fails with BrokenProcessPool, as one no worker had taken, so the
    daemon retries it at once instead of counting it against the workspace."""
    job_id, future = pool.submit(len, "abc")
    pool.rebuild("resized", 3)
    held.set()

    with pytest.raises(BrokenProcessPool):
        future.result(timeout=30)
    assert pool.died_with(job_id) is False
    pool.forget(job_id)

    _, retried = pool.submit(len, "abc")
    assert retried.result(timeout=30) == 3


def test_close_cancels_the_queued_jobs_and_leaves_no_process(
    pool: WorkerPool, held: threading.Event
) -> None:
    from multiprocessing import active_children

    _, handed = pool.submit(len, "ab")
    _, queued = pool.submit(len, "abc")
    closer = threading.Thread(target=pool.close)
    closer.start()
    wait_until(lambda: pool._closing, 10, "close() to begin")
    held.set()
    closer.join(30)

    assert not closer.is_alive()
    with pytest.raises(CancelledError):
        queued.result(timeout=0)
    assert handed.done()
    assert active_children() == []
    assert [
        pid for pid in children(os.getpid()) if "multiprocessing.forkserver" in cmdline(pid)
    ] == []


def test_a_forkserver_that_cannot_start_fails_the_job_with_its_reason_and_the_next_runs(
    pool: WorkerPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No forkserver (its socket folder on a full disk, say): the job fails as a job
    (PoolUnavailable, retried with back-off), not as an innocent one retried at once,
    which would spin; once the cause is gone the next job runs."""
    original = WorkerPool._ensure_server

    def full_disk(self: WorkerPool) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(WorkerPool, "_ensure_server", full_disk)
    job_id, future = pool.submit(len, "ab")
    with pytest.raises(PoolUnavailable, match="No space left on device"):
        future.result(timeout=30)
    pool.forget(job_id)

    monkeypatch.setattr(WorkerPool, "_ensure_server", original)
    _, retried = pool.submit(len, "abc")
    assert retried.result(timeout=30) == 3


def test_a_worker_that_cannot_be_forked_fails_the_job_and_the_job_never_runs_later(
    pool: WorkerPool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The executor queues a job before it forks the worker for it: when the fork fails
    the pool gives that executor up (its queued job cancelled), so the job cannot run
    later beside its retry; the retry gets a new executor."""
    from concurrent.futures import process

    original = process.ProcessPoolExecutor._spawn_process  # type: ignore[attr-defined]

    def no_fork(self: process.ProcessPoolExecutor) -> None:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(process.ProcessPoolExecutor, "_spawn_process", no_fork)
    first_marker, retry_marker = tmp_path / "first", tmp_path / "retry"
    job_id, future = pool.submit(os.mkdir, str(first_marker))
    with pytest.raises(PoolUnavailable, match="Resource temporarily unavailable"):
        future.result(timeout=30)
    pool.forget(job_id)

    monkeypatch.setattr(process.ProcessPoolExecutor, "_spawn_process", original)
    _, retried = pool.submit(os.mkdir, str(retry_marker))
    retried.result(timeout=30)
    assert retry_marker.is_dir()
    assert not first_marker.exists()


def test_pools_made_one_after_another_share_one_working_resource_tracker(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A pool's close() stops its workers and the forkserver but leaves the resource
    tracker (the daemon stops it at its exit: test_pool_workers.py): a pool
    made later in the same process (the Python API, an in-process daemon) registers its
    semaphores with that same running tracker."""
    from memoryd.daemon.processes import process_start, trackers

    seen: set[int] = set()
    for _ in range(3):
        pool = WorkerPool(1, "json", "warning", idle_timeout=60)
        try:
            _, future = pool.submit(len, "abc")
            assert future.result(timeout=60) == 3
            running = trackers()
            assert len(running) == 1
            seen.update(running)
        finally:
            pool.close()
        assert [process_start(pid) is not None for pid in running] == [True]
    assert len(seen) == 1
    # A tracker told of a semaphore it never saw registered prints a KeyError.
    assert "Traceback" not in capfd.readouterr().err
