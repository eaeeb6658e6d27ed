"""The worker pool: a ``ProcessPoolExecutor`` (forkserver) that the daemon can rebuild,
resize and kill, and that says which job a dead worker was running.

Workers start on demand: the executor forks one from the forkserver when a job finds no
idle worker, up to ``workers``. When fewer jobs ran at once over ``worker_idle_timeout``
than the pool has workers, the pool retires its executor: idle workers exit (running
jobs finish first) and later jobs start fresh ones, so an idle daemon has no worker at
all. The forkserver too lives only while there is work: the first job starts it (with
the Anthropic SDK preloaded when the backend is anthropic) and it stops once the last
worker is gone (docs/design.md#pool).

Handing a job to the executor can block: it forks a worker when none is idle, and the
first job after an idle period waits for a new forkserver to import memoryd (and the
SDK). So the daemon's loop never calls the executor itself: ``submit()`` returns a future
at once and one launcher thread hands the jobs over in order.

A dead worker breaks the executor as a whole: every job it held fails with
``BrokenProcessPool``. Each worker reports its pid as it starts
(:func:`memoryd.daemon.worker.worker_init`) and the job it takes
(:func:`memoryd.daemon.worker.call`), so :meth:`WorkerPool.died_with` blames only the job
whose own worker died; the others are innocent and retried at once
(docs/design.md#daemon). The pool knows its workers only from these reports and /proc,
never from the executor's private fields.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import structlog

from memoryd.daemon.processes import (
    Forkserver,
    children,
    forkservers,
    kill_workers,
    preload,
    process_start,
    shut_server,
)
from memoryd.errors import PoolUnavailable

log = structlog.get_logger()

LAUNCH_WAIT = 5.0
"""Longest wait at close for the launcher to hand over the job it holds."""


@dataclass(slots=True)
class _Generation:
    """One executor, the workers it ever had, and which of them died on their own."""

    executor: ProcessPoolExecutor
    id: int
    workers: dict[int, int | None] = field(default_factory=dict)
    """Every worker that reported itself: pid and start time (None: gone before that)."""
    dead: frozenset[int] | None = None
    jobs: int = 0
    """Jobs submitted to this executor and not yet forgotten."""
    broken: bool = False
    """A job of it failed with ``BrokenProcessPool``, or handing one over did."""
    given_up: bool = False
    """Shut down by the launcher after a worker could not be started."""

    def running(self) -> list[int]:
        return [pid for pid, start in self.workers.items() if _runs(pid, start)]

    def lost_worker(self) -> bool:
        """Broken: a job said so, or one of its workers is gone although the executor
        was never told to stop (a worker exits on its own only when it dies)."""
        return self.broken or (not self.given_up and len(self.running()) < len(self.workers))


def _runs(pid: int, start: int | None) -> bool:
    return start is not None and process_start(pid) == start


@dataclass(slots=True)
class _Launch:
    """A job for the launcher thread to hand to ``generation``'s executor."""

    generation: _Generation
    job_id: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future[Any]


class WorkerPool:
    """``submit()`` jobs, ``shrink()`` at every loop step, ``rebuild()`` after a crash,
    ``close()`` at the end."""

    def __init__(
        self,
        workers: int,
        log_format: str,
        log_level: str,
        idle_timeout: float = 60.0,
    ) -> None:
        self.size = workers
        self.idle_timeout = idle_timeout
        self.log_format = log_format
        self.log_level = log_level
        self._context = multiprocessing.get_context("forkserver")
        self.sdk = False
        """Preload ``sdk_backend``'s SDK in the next forkserver: ~37 MB less per worker and
        no ~1 s import in each, which a burst of fresh workers pays at once (bench/workers.py)."""
        self.sdk_backend = "anthropic"
        # A plain pipe, no lock: each report is one write far below PIPE_BUF, so reports
        # from several workers never interleave (and no semaphore outlives the pool).
        self._started, self._report = self._context.Pipe(duplex=False)
        self._ids = itertools.count(1)
        self._current: _Generation | None = None
        self._generations: dict[int, _Generation] = {}
        """Every executor not yet forgotten, by the id its workers report."""
        self._server = Forkserver(self._context)
        self._jobs: dict[int, _Generation] = {}
        self._pids: dict[int, int] = {}
        self._retired: list[_Generation] = []
        self._window_start: float | None = None
        self._window_peak = 0
        self._launches: queue.SimpleQueue[_Launch | None] = queue.SimpleQueue()
        self._launcher: threading.Thread | None = None
        self._closing = False

    def preload_for(self, backend: str) -> None:
        """Jobs summarize through ``backend``: the forkserver preloads its SDK (none for
        the offline one). Set as the process's forkserver preload at once, so that a
        forkserver started by anyone else in the daemon (the sources' indexer parses
        ahead in a worker of its own) preloads what the pool's workers need too: the pool
        decides what the one forkserver of the process holds."""
        self.sdk, self.sdk_backend = backend != "extractive", backend
        self._context.set_forkserver_preload(preload(self.sdk, backend))

    def _ensure_server(self) -> None:
        self._server.ensure(self.sdk, self.sdk_backend)

    @property
    def running(self) -> int:
        """Jobs submitted and not yet forgotten, over every executor."""
        return len(self._jobs)

    def workers(self) -> int:
        """Worker processes alive now, retired executors' included.

        Read-only, for the metrics thread: the workers reported up to the loop's last
        step (it reads the reports at every step).
        """
        return sum(
            _runs(pid, start)
            for generation in list(self._generations.values())
            for pid, start in list(generation.workers.items())
        )

    def shrink(self, now: float) -> None:
        """Retire the executor when it has more workers than jobs ran at once over the
        last ``idle_timeout`` (called from every loop step)."""
        if self._window_start is None:
            self._window_start = now
        self._window_peak = max(self._window_peak, self.running)
        if now - self._window_start >= self.idle_timeout:
            current = self._current
            if current is not None:
                self._drain_started()
                started = len(current.running())
                if started > self._window_peak:
                    self._retire(current, started)
            self._window_start, self._window_peak = now, self.running
        self._reap()
        if self._current is None and not self._retired and not self._jobs:
            self._server.stop()
        self._server.reap()

    def _retire(self, generation: _Generation, started: int) -> None:
        # Its idle workers exit once its running jobs are done (the executor's shutdown
        # waits for them); new jobs go to a new executor that forks workers as needed.
        self._current = None
        generation.executor.shutdown(wait=False)
        self._retired.append(generation)
        log.info("workers_retired", workers=started, running_jobs=generation.jobs)

    def _reap(self) -> None:
        self._drain_started()
        for generation in list(self._retired):
            if generation.broken:
                # Again at every step: a worker that reported itself only after the
                # executor broke is killed too.
                kill_workers(generation.workers)
            if generation.jobs == 0 and not generation.running():
                self._retired.remove(generation)
                self._generations.pop(generation.id, None)

    def _new_generation(self) -> _Generation:
        from memoryd.daemon.worker import worker_init

        generation_id = next(self._ids)
        executor = ProcessPoolExecutor(
            max_workers=self.size,
            mp_context=self._context,
            initializer=worker_init,
            initargs=(self.log_format, self.log_level, os.getpid(), self._report, generation_id),
        )
        generation = self._generations[generation_id] = _Generation(executor, generation_id)
        return generation

    @property
    def broken(self) -> bool:
        current = self._current
        if current is None:
            return False
        self._drain_started()
        return current.lost_worker()

    def submit(self, fn: Callable[..., Any], *args: Any) -> tuple[int, Future[Any]]:
        """Queue ``fn(*args)`` for a worker; returns the job's id and its future at once.

        The launcher thread hands the job to the executor. If that fails (the executor
        broke meanwhile), the future fails with ``BrokenProcessPool`` and the job is one
        that no worker had taken: innocent (:meth:`died_with`).
        """
        current = self._current
        if current is not None and current.given_up:
            # Given up by the launcher after a failed start: reaped like a retired one.
            self._retired.append(current)
            self._current = current = None
        if current is None:
            self._current = current = self._new_generation()
        generation = current
        job_id = next(self._ids)
        future: Future[Any] = Future()
        generation.jobs += 1
        self._jobs[job_id] = generation
        self._window_peak = max(self._window_peak, self.running)
        if self._launcher is None:
            self._launcher = threading.Thread(
                target=self._launch_all, name="memoryd-launcher", daemon=True
            )
            self._launcher.start()
        self._launches.put(_Launch(generation, job_id, fn, args, future))
        return job_id, future

    def _launch_all(self) -> None:
        while (launch := self._launches.get()) is not None:
            if self._closing:
                launch.future.cancel()
                continue
            self._launch(launch)

    def _launch(self, launch: _Launch) -> None:
        from memoryd.daemon.worker import call

        executor = launch.generation.executor
        # Running from here on, as the executor's own future would be once queued: what
        # the metrics count as in flight.
        if not launch.future.set_running_or_notify_cancel():
            return
        try:
            self._ensure_server()
            inner = executor.submit(call, launch.job_id, launch.fn, *launch.args)
        except (BrokenProcessPool, RuntimeError) as exc:
            # The executor broke, or was replaced and shut down, before the job reached
            # it: no worker took the job (RuntimeError is "cannot schedule new futures
            # after shutdown").
            if isinstance(exc, BrokenProcessPool):
                launch.generation.broken = True
            else:
                exc = BrokenProcessPool("the job's executor was shut down before it started")
            launch.future.set_exception(exc)
        except Exception as exc:  # no forkserver or no worker could be started
            # The executor may hold the job queued: give it up, so that the job cannot
            # run later beside its retry (submit() starts a new executor).
            launch.generation.given_up = True
            executor.shutdown(wait=False, cancel_futures=True)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            launch.future.set_exception(
                PoolUnavailable(f"cannot start a worker process: {reason or type(exc).__name__}")
            )
        else:
            inner.add_done_callback(lambda done: _settle(launch.generation, launch.future, done))

    def taken(self, job_id: int) -> bool:
        """Whether a worker has taken job ``job_id`` (each says so as it starts a job)."""
        self._drain_started()
        return job_id in self._pids

    def forget(self, job_id: int) -> None:
        """The daemon is done with job ``job_id``."""
        generation = self._jobs.pop(job_id, None)
        if generation is not None:
            generation.jobs -= 1
        self._pids.pop(job_id, None)

    def died_with(self, job_id: int) -> bool:
        """After ``BrokenProcessPool``: did job ``job_id``'s own worker die?

        False for a job whose worker is alive, or that no worker had taken yet.
        """
        generation = self._jobs.get(job_id)
        if generation is None:
            return True
        self._fix_dead(generation)
        self._drain_started()
        pid = self._pids.get(job_id)
        return pid is not None and generation.dead is not None and pid in generation.dead

    def _fix_dead(self, generation: _Generation) -> None:
        # Fixed at the first question, before rebuild() kills the innocent workers. The
        # executor reports a worker dead once its forkserver has reaped it, so /proc
        # already says so.
        if generation.dead is None:
            self._drain_started()
            running = set(generation.running())
            generation.dead = frozenset(pid for pid in generation.workers if pid not in running)

    def _drain_started(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            while self._started.poll():
                kind, number, pid = self._started.recv()
                if kind == "job":
                    if number in self._jobs:
                        self._pids[number] = pid
                elif (generation := self._generations.get(number)) is not None:
                    # Its start time, read now: a worker already gone reads as dead.
                    generation.workers[pid] = process_start(pid)

    def rebuild(self, why: str, workers: int | None = None) -> None:
        """A new executor (after a crash, or with a new size); the old one is discarded.

        ``why`` is ``broken`` (a worker died: warning) or ``resized`` (the configuration
        changed ``workers``: info).
        """
        old = self._current
        if old is not None:
            self._fix_dead(old)
        if workers is not None:
            self.size = workers
        self._current = None
        if old is not None:
            if old.lost_worker():
                # A broken pool fails every job it held, and its SIGTERM does not stop our
                # workers (they ignore it): unkilled, they would run on and commit jobs the
                # daemon has already reported failed, then hold the workspace against the
                # retry. A worker that has not reported itself yet still takes the
                # executor's SIGTERM, or is killed by a later loop step (_reap).
                kill_workers(old.workers)
            old.executor.shutdown(wait=False, cancel_futures=True)
            # Reaped like a retired executor: the forkserver stops only after its workers.
            self._retired.append(old)
        if why == "broken":
            log.warning("pool_rebuilt", workers=self.size)
        else:
            log.info("pool_resized", workers=self.size)

    def close(self) -> None:
        """Kill the workers (a stop abandons their jobs; the commit protocol makes that
        safe), then stop the forkserver and the resource tracker, so that nothing is
        left for systemd to kill."""
        self._stop_launcher()
        self._drain_started()
        # Every worker that reported itself, whether or not its executor still counts it
        # (one whose forkserver was killed by a signal to the whole process group lives
        # on and keeps the resource tracker's pipe open), and every child of the
        # forkserver (a worker forked a moment ago that has not reported itself yet).
        workers: dict[int, int | None] = {}
        for generation in self._generations.values():
            workers.update(generation.workers)
        for server in forkservers():
            for pid in children(server):
                workers.setdefault(pid, process_start(pid))
        kill_workers(workers)
        for generation in self._generations.values():
            generation.executor.shutdown(wait=True, cancel_futures=True)
        self._current = None
        self._retired.clear()
        self._generations.clear()
        self._jobs.clear()
        self._server.close()
        shut_server()

    def _stop_launcher(self) -> None:
        # Jobs still queued are cancelled; the one being handed over may wait for a
        # forkserver that is starting, so the wait is bounded (stopping the forkserver
        # below ends that wait in any case).
        self._closing = True
        if self._launcher is not None:
            self._launches.put(None)
            self._launcher.join(LAUNCH_WAIT)
            self._launcher = None


def _settle(generation: _Generation, future: Future[Any], done: Future[Any]) -> None:
    """Give ``future`` the outcome of ``done`` (the executor's future for the same job)."""
    if done.cancelled():
        future.set_exception(CancelledError())
    elif (exc := done.exception()) is not None:
        if isinstance(exc, BrokenProcessPool):
            generation.broken = True  # before the daemon hears of the job's end
        future.set_exception(exc)
    else:
        future.set_result(done.result())
