"""The daemon's fleet hooks: Prometheus metrics (when enabled) and the LLM spend cap.

:class:`Telemetry` hears the supervisor's loop through :class:`DaemonHooks` (a dispatch,
the end of a job, a malformed line, a pool rebuild); with metrics off every hook returns
at once and prometheus_client is never imported (docs/design.md#metrics). The spend cap
is asked at each dispatch which backend the job gets (docs/design.md#spend-cap).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from memoryd import strict_json
from memoryd.compaction.job.request import JobResult
from memoryd.config.listen import parse_listen
from memoryd.config.settings import Settings
from memoryd.daemon.hooks import DaemonHooks
from memoryd.daemon.tracked import Job, Tracked, over_budget
from memoryd.errors import ConfigError, MemorydError
from memoryd.files.regular import read_file_from
from memoryd.receipts.records import Receipt
from memoryd.receipts.spend_cap import (
    Downgrade,
    SpendCap,
    SpendLedger,
    cap_reason,
    ledger_path,
    rebuild_spend,
    utc_day,
)
from memoryd.summary.backends import choose_backend
from memoryd.tokens import LLMUsage

if TYPE_CHECKING:
    from memoryd.daemon.metrics import DaemonView, Metrics
    from memoryd.daemon.scheduler import Scheduler

log = structlog.get_logger()

TEXTFILE_MIN_INTERVAL = 1.0
"""Seconds between two textfile rewrites while jobs end in a burst."""
TEXTFILE_REFRESH = 60.0
"""Seconds between rewrites while nothing happens (node_exporter flags stale files)."""
SALVAGE_MARGIN = 1.0
"""Seconds after a job's drain window before its salvaged_lines events are counted."""


def salvaged_since(events_file: Path, offset: int) -> int:
    """Lines that ``salvaged_lines`` events appended after ``offset`` carried over.

    The drain that salvages runs in the worker after the job has returned, so the count
    cannot come back with the job's result: it is read from the workspace's events (a
    file that is not a regular one, or not strict JSON, counts nothing).
    """
    try:
        tail = read_file_from(events_file, offset)
    except (OSError, MemorydError):
        return 0
    count = 0
    for line in tail.splitlines():
        if b'"salvaged_lines"' not in line:
            continue
        try:
            record = strict_json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("type") != "salvaged_lines":
            continue
        lines = record.get("lines")
        if isinstance(lines, int):
            count += lines
    return count


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class Telemetry(DaemonHooks):
    """Metrics and the spend cap of one daemon."""

    def __init__(self, settings: Settings, env: Mapping[str, str], roots: Sequence[Path]) -> None:
        self.settings = settings
        self.env = env
        self.metrics: Metrics | None = None
        self.textfile: Path | None = None
        self.roots = list(roots)
        self.cap = SpendCap(SpendLedger(ledger_path(env, roots)))
        self._textfile_due = 0.0
        self._textfile_dirty = False
        self._textfile_error: str | None = None
        self._salvage: dict[Path, tuple[int, float]] = {}
        """Events file -> (its size when the job was dispatched, when to count)."""

    # ----- life cycle ---------------------------------------------------------------------

    def start(self, view: Callable[[], DaemonView], now: float) -> None:
        """Serve and/or write the metrics when the settings ask for them.

        Raises ConfigError when the listen address cannot be bound (in use, say).
        """
        settings = self.settings
        if not settings.metrics_listen and not settings.metrics_textfile:
            return
        from memoryd.daemon.metrics import Metrics  # prometheus_client only when metrics are on

        self.metrics = Metrics(view, per_workspace=settings.metrics_per_workspace)
        if settings.metrics_listen:
            host, port = parse_listen(settings.metrics_listen)
            try:
                bound_host, bound_port = self.metrics.serve(host, port)
            except OSError as exc:
                raise ConfigError(
                    f"config: metrics_listen = {settings.metrics_listen!r}: cannot listen: "
                    f"{exc.strerror or exc}"
                ) from None
            log.info("metrics_listening", address=bound_host, port=bound_port, path="/metrics")
        if settings.metrics_textfile:
            self.textfile = Path(settings.metrics_textfile).expanduser()
            self._write_textfile(now)

    def settle_ledger(self, now_wall: float) -> None:
        """A ledger that could not be used at start (or is missing while a cap is set):
        rebuild the day's total from the receipts under the roots, or keep the cap reached
        for the day (the cap fails closed; docs/design.md#spend-cap)."""
        ledger, summarizer = self.cap.ledger, self.settings.summarizer
        capped = summarizer.max_cost_per_day_usd > 0 or summarizer.max_llm_tokens_per_day > 0
        if ledger.needs_rebuild is None and not (ledger.missing and capped):
            return
        rebuilt = rebuild_spend(self.roots, self.settings.max_depth, utc_day(now_wall))
        ledger.settle(rebuilt, now_wall)

    def close(self) -> None:
        """Stop serving; write the textfile one last time."""
        if self.metrics is None:
            return
        self._write_textfile(time.monotonic())
        self.metrics.close()

    def reload(self, settings: Settings) -> None:
        """New caps and a new textfile path apply at once; the endpoint needs a restart."""
        old = self.settings
        moved = (
            settings.metrics_listen != old.metrics_listen
            or settings.metrics_per_workspace != old.metrics_per_workspace
            or (self.metrics is None and bool(settings.metrics_textfile))
        )
        if moved:
            log.warning("metrics_reload_needs_restart", kept="the metrics set up at start")
        self.settings = settings
        if self.metrics is not None:
            self.textfile = (
                Path(settings.metrics_textfile).expanduser() if settings.metrics_textfile else None
            )

    def tick(self, now: float) -> None:
        """Count salvaged lines of jobs whose drain is over; rewrite the textfile."""
        if self._salvage:
            for events_file, (offset, due) in list(self._salvage.items()):
                if due <= now:
                    del self._salvage[events_file]
                    self._count_salvaged(events_file, offset)
        if self.textfile is None:
            return
        if now >= self._textfile_due + TEXTFILE_REFRESH - TEXTFILE_MIN_INTERVAL or (
            self._textfile_dirty and now >= self._textfile_due
        ):
            self._write_textfile(now)

    def _write_textfile(self, now: float) -> None:
        if self.metrics is None or self.textfile is None:
            return
        try:
            self.metrics.write_textfile(self.textfile)
        except OSError as exc:
            error = exc.strerror or str(exc)
            if error != self._textfile_error:  # once per cause, not at every rewrite
                log.warning("metrics_textfile_unwritable", path=str(self.textfile), error=error)
            self._textfile_error = error
        else:
            if self._textfile_error is not None:
                log.info("metrics_textfile_written", path=str(self.textfile))
            self._textfile_error = None
        self._textfile_dirty = False
        self._textfile_due = now + TEXTFILE_MIN_INTERVAL

    # ----- the spend cap -----------------------------------------------------------------

    def backend_for(self, settings: Settings, now_wall: float) -> tuple[Settings, Downgrade | None]:
        """The settings a job runs with: the extractive backend while a daily cap is reached."""
        summarizer = self.settings.summarizer
        caps = (summarizer.max_cost_per_day_usd, summarizer.max_llm_tokens_per_day)
        if not any(caps) or choose_backend(settings, self.env)[0] == "extractive":
            return settings, None
        downgrade = self.cap.check(*caps, now_wall)
        if downgrade is None:
            return settings, None
        if self.metrics is not None:
            self.metrics.budget_downgrades.inc()
            self._textfile_dirty = True
        extractive = settings.summarizer.model_copy(update={"backend": "extractive"})
        return settings.model_copy(update={"summarizer": extractive}), downgrade

    def budget_numbers(self, now_wall: float) -> tuple[bool, float, int]:
        """(cap reached, cost today, tokens today) for the metrics view."""
        spend = self.cap.ledger.today(now_wall)
        summarizer = self.settings.summarizer
        reason = cap_reason(
            spend, spend.day, summarizer.max_cost_per_day_usd, summarizer.max_llm_tokens_per_day
        )
        return reason is not None, spend.cost_usd, spend.tokens

    # ----- hooks ----------------------------------------------------------------------

    def started(self, now: float) -> None:
        self.settle_ledger(time.time())

    def counted(self, tracked: Tracked, new_lines: int, malformed: int, now: float) -> None:
        if self.metrics is not None and malformed:
            self.metrics.malformed.inc(malformed)
            self._textfile_dirty = True

    def dispatched(self, tracked: Tracked, kind: str, reason: str, now: float) -> None:
        if self.metrics is None:
            return
        if kind == "stores":
            self.metrics.store_compactions.inc()
            self._textfile_dirty = True
            return
        if tracked.dispatch_latency is not None:
            self.metrics.dispatched(tracked.dispatch_latency)
        events_file = tracked.workspace.events
        pending = self._salvage.pop(events_file, None)
        if pending is not None:
            self._count_salvaged(events_file, pending[0])
        self._salvage[events_file] = (_size(events_file), math.inf)

    def finished(self, tracked: Tracked, result: JobResult, now: float) -> None:
        usage, cost = job_usage(result)
        wall = time.time()
        if (cost or 0.0) > 0 or usage.total_tokens > 0:
            self.cap.record(usage, cost, wall)
        if self.metrics is None:
            return
        from memoryd.daemon.metrics import JobObservation

        succeeded = result.outcome in ("completed", "ineffective")
        self.metrics.job_finished(
            JobObservation(
                strategy=result.strategy,
                backend=result.backend or "none",
                outcome=result.outcome,
                reason=tracked.job_reason,
                duration_seconds=result.duration_s,
                llm_calls=usage.calls,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_creation_tokens=usage.cache_creation_tokens,
                cost_usd=cost or 0.0,
                succeeded_at=wall if succeeded else None,
                masked_messages=result.masked_messages,
                masked_tokens=result.masked_tokens,
            )
        )
        if result.outcome == "failed" and self._backing_off(tracked.failures, tracked):
            self.metrics.backoffs.inc()
        pending = self._salvage.get(tracked.workspace.events)
        if pending is not None:
            due = now + tracked.settings.drain_seconds + SALVAGE_MARGIN
            self._salvage[tracked.workspace.events] = (pending[0], due)
        self._textfile_dirty = True

    def lost(self, tracked: Tracked | None, reason: str, its_fault: bool, now: float) -> None:
        if self.metrics is None or tracked is None:
            return
        if tracked.job is None or tracked.job.kind != "summarize":
            return
        from memoryd.daemon.metrics import JobObservation

        self.metrics.job_finished(
            JobObservation(
                strategy=tracked.settings.strategy,
                backend="none",
                outcome="crashed" if its_fault else "retried",
                reason=tracked.job_reason,
                duration_seconds=0.0,
            )
        )
        # Called before the failure is counted on ``tracked``.
        if its_fault and self._backing_off(tracked.failures + 1, tracked):
            self.metrics.backoffs.inc()
        self._textfile_dirty = True

    @staticmethod
    def _backing_off(failures: int, tracked: Tracked) -> bool:
        return failures >= tracked.settings.max_consecutive_failures

    def pool_rebuilt(self) -> None:
        if self.metrics is not None:
            self.metrics.pool_rebuilds.inc()
            self._textfile_dirty = True

    def reloaded(self, settings: Settings) -> None:
        self.reload(settings)

    def closed(self) -> None:
        self.close()

    def _count_salvaged(self, events_file: Path, offset: int) -> None:
        if self.metrics is not None:
            lines = salvaged_since(events_file, offset)
            if lines:
                self.metrics.salvaged.inc(lines)
                self._textfile_dirty = True


def job_usage(result: JobResult) -> tuple[LLMUsage, float | None]:
    """A job's LLM usage and cost, from its receipt (nothing when it has none)."""
    receipt = getattr(result, "receipt", None)
    if isinstance(receipt, Receipt):
        return receipt.llm, receipt.cost_usd
    return LLMUsage(calls=result.llm_calls), None


def daemon_view(
    scheduler: Scheduler,
    jobs: Mapping[Path, Job],
    settings: Settings,
    polled_roots: int,
    telemetry: Telemetry,
    backlog: int = 0,
    workers: int | None = None,
) -> DaemonView:
    """The daemon as the metrics see it; runs in the scrape thread and only reads.

    The loop may change the registry while it is copied: a copy that races is retried.
    """
    from memoryd.daemon.metrics import DaemonView, WorkspaceView

    tracked: list[Tracked] = []
    futures: list[Future[Any]] = []
    for _ in range(5):
        with contextlib.suppress(RuntimeError):
            tracked = list(scheduler)
            futures = [job.future for job in list(jobs.values())]
            break
    now = time.monotonic()
    workspaces = [
        WorkspaceView(
            root=str(t.root),
            name=_relative(t.workspace.path, t.root),
            level=t.level or "normal",
            usage_ratio=round(t.tokens / t.settings.token_limit, 4),
            tokens=t.tokens,
            backing_off=t.failures >= t.settings.max_consecutive_failures and t.retry_at > now,
            over_budget=over_budget(t),
        )
        for t in tracked
    ]
    exhausted, cost, tokens = telemetry.budget_numbers(time.time())
    return DaemonView(
        roots=[str(root) for root in settings.roots],
        workspaces=workspaces,
        jobs_in_flight=sum(1 for f in futures if f.running()),
        jobs_queued=backlog + sum(1 for f in futures if not f.running() and not f.done()),
        pool_workers=settings.workers if workers is None else workers,
        polled_roots=polled_roots,
        budget_exhausted=exhausted,
        spend_usd_today=cost,
        spend_tokens_today=tokens,
    )


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
