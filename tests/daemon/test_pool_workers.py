"""The pool knows its workers from what they report (their pid as they start, the job
each takes) and from /proc: which worker died with which job, when the executor is
broken, how many workers run, and when the forkserver may stop. Real forkserver, real
worker processes, a real SIGKILL.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import pytest
from daemon_harness import children, cmdline, wait_until

from memoryd.daemon.pool import WorkerPool

LONG = 120.0
"""A job that outlasts the test unless its worker is killed."""


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    pool = WorkerPool(2, "json", "warning", idle_timeout=0.0)
    yield pool
    pool.close()


def forkservers() -> list[int]:
    return [pid for pid in children(os.getpid()) if "multiprocessing.forkserver" in cmdline(pid)]


def workers() -> set[int]:
    return {pid for server in forkservers() for pid in children(server)}


def started(pool: WorkerPool, fn: Any, *args: Any) -> tuple[int, Future[Any], int]:
    """Submit a job and wait until a worker has taken it; returns the job's id, its
    future and the pid of the worker that took it (the one new child of the forkserver)."""
    before = workers()
    job_id, future = pool.submit(fn, *args)
    wait_until(lambda: pool.taken(job_id), 60, "a worker to take the job")
    new = wait_until(lambda: workers() - before, 10, "the job's worker")
    assert len(new) == 1
    return job_id, future, new.pop()


def test_a_killed_worker_is_blamed_for_its_own_job_only_and_its_pool_is_rebuilt(
    pool: WorkerPool,
) -> None:
    guilty, guilty_future, victim = started(pool, time.sleep, LONG)
    innocent, innocent_future, survivor = started(pool, time.sleep, LONG)
    assert pool.workers() == 2
    assert not pool.broken

    os.kill(victim, signal.SIGKILL)
    for future in (guilty_future, innocent_future):
        with pytest.raises(BrokenProcessPool):
            future.result(timeout=60)

    assert pool.died_with(guilty) is True
    assert pool.died_with(innocent) is False
    assert pool.broken
    pool.rebuild("broken")
    # The broken executor's surviving worker ignores SIGTERM: the pool killed it.
    wait_until(lambda: not cmdline(survivor), 10, "the survivor to be gone")
    pool.forget(guilty)
    pool.forget(innocent)

    _, retried = pool.submit(len, "abc")
    assert retried.result(timeout=60) == 3
    assert not pool.broken


def shrunk(pool: WorkerPool) -> bool:
    """One loop step of the daemon's; then whether no worker and no forkserver runs."""
    pool.shrink(time.monotonic())
    return pool.workers() == 0 and not forkservers()


def test_idle_workers_and_then_the_forkserver_stop_and_the_next_job_starts_both_again(
    pool: WorkerPool,
) -> None:
    job_id, future, worker = started(pool, len, "ab")
    assert future.result(timeout=60) == 2
    pool.forget(job_id)
    (server,) = forkservers()

    # idle_timeout 0: every step retires an executor with more workers than jobs ran.
    wait_until(
        lambda: shrunk(pool),
        30,
        "the idle worker and the forkserver to stop",
    )
    assert worker not in workers()

    _, again = pool.submit(len, "abc")
    assert again.result(timeout=60) == 3
    assert forkservers() and forkservers() != [server]


def test_close_kills_a_running_job_and_leaves_no_process(pool: WorkerPool) -> None:
    _, future, worker = started(pool, time.sleep, LONG)
    pool.close()

    assert future.done()
    assert not cmdline(worker)
    assert forkservers() == []


TRACKER_PROBE = """
import json, os
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from memoryd.daemon.processes import process_start, shut_server, stop_tracker, trackers

if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(1, mp_context=context) as executor:
        assert executor.submit(abs, -1).result() == 1
    # A semaphore registers with the tracker: it must have run until here.
    context.Lock()
    shut_server()
    running = trackers()
    stop_tracker()
    print(json.dumps([running, trackers(), [process_start(pid) for pid in running]]))
"""


def test_the_resource_tracker_is_stopped_through_proc_within_seconds(tmp_path: Any) -> None:
    """The daemon's last step: its copy of the tracker's pipe points at /dev/null, the
    tracker sees the end of its input and exits (no private field of the standard
    library read or written)."""
    import json
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    script.write_text(TRACKER_PROBE)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    running, after, starts = json.loads(done.stdout.splitlines()[-1])
    assert len(running) == 1
    assert after == [] and starts == [None]
    assert done.stderr == ""


FIRST_STARTER_PROBE = """
import json, multiprocessing
from concurrent.futures import ProcessPoolExecutor
from memoryd.daemon.pool import WorkerPool
from memoryd.daemon.processes import forkservers, shut_server

def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode(errors="replace")

if __name__ == "__main__":
    pool = WorkerPool(1, "json", "warning", idle_timeout=60)
    pool.preload_for("openai")
    # What the sources' indexer does: its own executor on the forkserver context, before
    # any job of the pool.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(1, mp_context=context) as executor:
        assert executor.submit(abs, -2).result() == 2
    (server,) = forkservers()
    started_by_indexer = cmdline(server)
    _, future = pool.submit(len, "abcd")
    assert future.result(timeout=60) == 4
    print(json.dumps([started_by_indexer, forkservers() == [server]]))
    pool.close()
"""


def test_a_forkserver_started_by_the_indexer_preloads_what_the_pools_workers_need(
    tmp_path: Any,
) -> None:
    """One owner: the pool sets the process's forkserver preload when told its backend, so
    whoever starts the forkserver first (the sources' indexer parses ahead in an executor
    of its own) starts it with the pool's preload, and the pool's jobs fork from that one
    forkserver instead of going without their SDK."""
    import json
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    script.write_text(FIRST_STARTER_PROBE)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    command, same_server = json.loads(done.stdout.splitlines()[-1])
    assert "memoryd.daemon.worker" in command
    assert "memoryd.llm.openai_compat" in command
    assert same_server
