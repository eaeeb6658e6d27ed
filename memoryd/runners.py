"""The Python API's job runners: the daemon's jobs, started from an agent's own process."""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from memoryd.compaction.job.request import JobRequest, JobResult, summarizer_env
from memoryd.compaction.job.run import run_job
from memoryd.compaction.strategies import Counts, strategy_for
from memoryd.compaction.strategies.head import previous_summary_text
from memoryd.config.settings import Settings, load_settings, settings_for_workspace
from memoryd.conversation.lines import parse_line
from memoryd.conversation.reader import ConversationReader
from memoryd.files.regular import open_for_reading
from memoryd.workspace import Workspace


def _settings(workspace: Path, settings: Settings | None, strategy: str | None) -> Settings:
    base = settings if settings is not None else load_settings().settings
    effective = settings_for_workspace(base, workspace)
    return effective.model_copy(update={"strategy": strategy}) if strategy else effective


def _env() -> dict[str, str]:
    return summarizer_env(os.environ)


def _due(workspace: Path, settings: Settings) -> bool:
    """The daemon's due check, on the counts of the file as it is now."""
    reader = ConversationReader(Workspace(workspace).conversation, settings.max_line_bytes)
    reader.update()
    return strategy_for(settings).due(Counts.of_tally(reader.tally)).due


class MessageSummarizer:
    """Summarize a workspace in a background process when it crosses its trigger.

    ``check_and_summarize()`` returns at once: it starts a job in a one-worker process
    pool when the trigger holds and no job of this summarizer is running (the running
    flag; the workspace's job lock also keeps out the daemon and other processes).
    """

    def __init__(self, workspace: Path, settings: Settings | None = None) -> None:
        self.workspace = Path(workspace).absolute()
        self.settings = _settings(self.workspace, settings, None)
        self._guard = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._future: Future[JobResult] | None = None
        self._last_result: JobResult | None = None

    def is_running(self) -> bool:
        """True while a job started by this summarizer runs (False once its future is done)."""
        # From the future itself, not from a done-callback: callbacks run after result()
        # has already returned to a waiting caller.
        return self._future is not None and not self._future.done()

    @property
    def last_result(self) -> JobResult | None:
        """The result of the last job that finished without raising, if any."""
        future = self._future
        if (
            future is not None
            and future.done()
            and not future.cancelled()
            and future.exception() is None
        ):
            return future.result()
        return self._last_result

    def check_and_summarize(self) -> Future[JobResult] | None:
        """Start a job if one is due and none is running; returns its future, or None."""
        with self._guard:
            if self.is_running() or not _due(self.workspace, self.settings):
                return None
            self._last_result = self.last_result
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("forkserver")
                )
            self._future = self._pool.submit(
                run_job, JobRequest(self.workspace, self.settings, env=_env(), force=True)
            )
            return self._future

    def close(self) -> None:
        """Wait for a running job and stop the worker process."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class SummaryGenerator:
    """The rolling strategy for one workspace, run in the calling process.

    See docs/design.md#strategies.
    """

    def __init__(self, workspace: Path, settings: Settings | None = None) -> None:
        self.workspace = Path(workspace).absolute()
        self.settings = _settings(self.workspace, settings, "rolling")

    def should_summarize(self) -> bool:
        """More than 30 messages AND the oldest 20 over 15,000 tokens (by default)."""
        return _due(self.workspace, self.settings)

    def generate_summary(self) -> str | None:
        """Summarize the oldest messages now; the new summary text, or None on failure.

        A failure changes no file (the job reports it in HEARTBEAT.md and the events).
        """
        result = run_job(JobRequest(self.workspace, self.settings, env=_env(), force=True))
        if result.outcome not in ("completed", "ineffective"):
            return None
        return self.current_summary()

    def summarize_if_needed(self) -> str | None:
        """``generate_summary()`` when ``should_summarize()``, else None."""
        return self.generate_summary() if self.should_summarize() else None

    def current_summary(self) -> str | None:
        """The text of the rolling summary at the head of the conversation, if any."""
        try:
            fd = open_for_reading(Workspace(self.workspace).conversation)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as file:
            first = file.readline()
        if not first.endswith(b"\n"):
            return None
        return previous_summary_text(parse_line(first, 0, 0))
