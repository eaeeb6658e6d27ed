"""Prometheus metrics of the daemon, imported only when ``metrics_listen`` or
``metrics_textfile`` is set (prometheus_client costs memory nobody else should pay).

Counters and histograms are fed by the supervisor loop as jobs end; gauges that describe
the workspaces are computed at scrape time from a :class:`DaemonView` the daemon hands
over, so an idle daemon does no metrics work at all (docs/design.md#metrics).
Names follow the Prometheus conventions: base units, ``_total`` on counters,
``_seconds`` and ``_usd`` suffixes. No ``*_created`` series (a counter's start time is
``process_start_time_seconds``); the endpoint adds the standard ``process_*`` metrics.
"""

from __future__ import annotations

import contextlib
import platform
import socket
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from memoryd.compaction.strategies import STRATEGIES
from memoryd.daemon.metrics_server import BoundedServer, only_metrics
from memoryd.files.fsutil import atomic_write

LEVELS = ("normal", "warning", "critical")
JOB_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Job durations: the extractive backend takes milliseconds, an LLM job up to minutes."""
DISPATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Trigger-to-dispatch: coalescing (200 ms) and the loop's own step bound the usual case."""
TOKEN_KINDS = ("input", "output", "cache_read", "cache_creation")


@dataclass(frozen=True, slots=True)
class WorkspaceView:
    """One workspace as the gauges see it (``name`` is relative to its root)."""

    root: str
    name: str
    level: str
    usage_ratio: float
    tokens: int
    backing_off: bool = False
    over_budget: bool = False
    """Above its trigger, and the last job could not bring it below."""


@dataclass(frozen=True, slots=True)
class DaemonView:
    """What the daemon looks like right now; built by the daemon on each scrape."""

    roots: Sequence[str]
    workspaces: Sequence[WorkspaceView]
    jobs_in_flight: int
    jobs_queued: int
    pool_workers: int
    polled_roots: int
    budget_exhausted: bool = False
    spend_usd_today: float = 0.0
    spend_tokens_today: int = 0


@dataclass(frozen=True, slots=True)
class JobObservation:
    """One finished job, in the numbers the metrics count (from its receipt)."""

    strategy: str
    backend: str
    outcome: str
    reason: str
    duration_seconds: float
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cost_usd: float = 0.0
    succeeded_at: float | None = None
    """Wall-clock time of a successful job (None when it did not succeed)."""
    masked_messages: int = 0
    masked_tokens: int = 0


VIEW_GAUGES: tuple[tuple[str, str, Callable[[DaemonView], float]], ...] = (
    (
        "workspaces_backing_off",
        "Workspaces waiting out a failure back-off.",
        lambda view: sum(1 for w in view.workspaces if w.backing_off),
    ),
    (
        "workspaces_over_budget",
        "Workspaces above their trigger that the last job could not bring below it.",
        lambda view: sum(1 for w in view.workspaces if w.over_budget),
    ),
    ("jobs_in_flight", "Jobs running in the pool.", lambda view: view.jobs_in_flight),
    ("jobs_queued", "Jobs due, waiting for a worker.", lambda view: view.jobs_queued),
    ("pool_workers", "Worker processes alive.", lambda view: view.pool_workers),
    (
        "inotify_fallback_roots",
        "Roots polled because inotify ran out of watches.",
        lambda view: view.polled_roots,
    ),
    (
        "llm_budget_exhausted",
        "1 while a daily LLM spend cap is reached (jobs use the extractive backend).",
        lambda view: 1 if view.budget_exhausted else 0,
    ),
    (
        "llm_spend_today_usd",
        "LLM cost counted against today's (UTC) cap.",
        lambda view: view.spend_usd_today,
    ),
    (
        "llm_spend_today_tokens",
        "LLM tokens counted against today's (UTC) cap.",
        lambda view: view.spend_tokens_today,
    ),
)
"""The single-value gauges read from the daemon's view at scrape time: name (after
``memoryd_``), help, value."""


def build_version() -> str:
    """The installed memoryd version ("unknown" when run from a tree that is not installed)."""
    try:
        return metadata.version("memoryd")
    except metadata.PackageNotFoundError:
        return "unknown"


class _ViewCollector(Collector):
    """Gauges computed from the daemon's view at scrape time (no cost between scrapes)."""

    def __init__(self, view: Callable[[], DaemonView], per_workspace: bool) -> None:
        self.view = view
        self.per_workspace = per_workspace

    def collect(self) -> Iterator[Metric]:
        view = self.view()
        by_root = GaugeMetricFamily(
            "memoryd_workspaces", "Workspaces watched, by root.", labels=["root"]
        )
        counts = Tally(w.root for w in view.workspaces)
        for root in view.roots:
            by_root.add_metric([root], counts.get(root, 0))
        yield by_root
        by_level = GaugeMetricFamily(
            "memoryd_workspaces_by_level", "Workspaces at each usage level.", labels=["level"]
        )
        levels = Tally(w.level for w in view.workspaces)
        for level in LEVELS:
            by_level.add_metric([level], levels.get(level, 0))
        yield by_level
        for name, documentation, value in VIEW_GAUGES:
            yield GaugeMetricFamily(f"memoryd_{name}", documentation, value=value(view))
        if self.per_workspace:
            ratio = GaugeMetricFamily(
                "memoryd_workspace_usage_ratio",
                "Tokens over the token limit, per workspace.",
                labels=["root", "workspace"],
            )
            tokens = GaugeMetricFamily(
                "memoryd_workspace_tokens",
                "Estimated tokens of the conversation, per workspace.",
                labels=["root", "workspace"],
            )
            for workspace in view.workspaces:
                ratio.add_metric([workspace.root, workspace.name], workspace.usage_ratio)
                tokens.add_metric([workspace.root, workspace.name], workspace.tokens)
            yield ratio
            yield tokens


class Metrics:
    """The daemon's metrics in a private registry; fed by the loop, read by scrapes."""

    def __init__(self, view: Callable[[], DaemonView], per_workspace: bool = False) -> None:
        # process-wide; only the daemon imports this module
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        registry = self.registry
        self.served = CollectorRegistry(auto_describe=False)
        """What the endpoint serves: memoryd's metrics and the process's (``process_*``).
        The textfile leaves the latter out: node_exporter has its own ``process_*``."""
        self.served.register(registry)
        ProcessCollector(registry=self.served)
        Info("memoryd_build", "The running memoryd.", registry=registry).info(
            {"version": build_version(), "python": platform.python_version()}
        )

        def counter(name: str, documentation: str, *labels: str) -> Counter:
            return Counter(name, documentation, labels, namespace="memoryd", registry=registry)

        self.jobs = counter(
            "jobs",
            "Summarization jobs finished, by strategy, backend, outcome and reason.",
            *("strategy", "backend", "outcome", "reason"),
        )
        self.job_duration = Histogram(
            "memoryd_job_duration_seconds",
            "Wall time of summarization jobs.",
            ["strategy"],
            buckets=JOB_BUCKETS,
            registry=registry,
        )
        self.dispatch_latency = Histogram(
            "memoryd_trigger_to_dispatch_seconds",
            "From the file change that made a job due to its dispatch to the pool.",
            buckets=DISPATCH_BUCKETS,
            registry=registry,
        )
        self.llm_calls = counter("llm_calls", "Requests made to the LLM.")
        self.llm_tokens = counter(
            "llm_tokens",
            "Tokens billed by the LLM, by kind (input, output, cache_read, cache_creation).",
            "kind",
        )
        self.llm_cost = counter("llm_cost_usd", "Cost of the LLM calls in US dollars.")
        self.masked_messages = counter(
            "masked_messages",
            "Messages whose old tool outputs became placeholders (docs/design.md#masking).",
        )
        self.masked_tokens = counter("masked_tokens", "Tokens freed by masking old tool outputs.")
        self.salvaged = counter(
            "salvaged_lines",
            "Lines a non-locking writer put in a replaced file, carried into the new one.",
        )
        self.malformed = counter(
            "malformed_lines", "Lines that are not JSON objects, seen as they were appended."
        )
        self.failures = counter(
            "job_failures", "Jobs that failed or whose worker crashed.", "strategy"
        )
        self.backoffs = counter(
            "backoffs", "Times a workspace started backing off after consecutive failures."
        )
        self.pool_rebuilds = counter("pool_rebuilds", "Process pools rebuilt after a worker died.")
        self.store_compactions = counter("store_compactions", "Memory store compactions run.")
        self.budget_downgrades = counter(
            "llm_budget_downgraded_jobs",
            "Jobs sent to the extractive backend because a daily LLM cap was reached.",
        )
        self.last_success = Gauge(
            "memoryd_last_successful_job_timestamp_seconds",
            "Unix time of the last job that completed.",
            registry=registry,
        )
        for kind in TOKEN_KINDS:
            self.llm_tokens.labels(kind)
        for strategy in STRATEGIES:
            self.job_duration.labels(strategy)
            self.failures.labels(strategy)
        registry.register(_ViewCollector(view, per_workspace))
        self._server: BoundedServer | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    # ----- fed by the loop ----------------------------------------------------------------

    def job_finished(self, job: JobObservation) -> None:
        """Count one finished summarization job."""
        self.jobs.labels(job.strategy, job.backend, job.outcome, job.reason).inc()
        self.job_duration.labels(job.strategy).observe(job.duration_seconds)
        if job.outcome in ("failed", "crashed"):
            self.failures.labels(job.strategy).inc()
        self.llm_calls.inc(job.llm_calls)
        for kind in TOKEN_KINDS:
            self.llm_tokens.labels(kind).inc(getattr(job, f"{kind}_tokens"))
        self.llm_cost.inc(job.cost_usd)
        self.masked_messages.inc(job.masked_messages)
        self.masked_tokens.inc(job.masked_tokens)
        if job.succeeded_at is not None:
            self.last_success.set(job.succeeded_at)

    def dispatched(self, latency_seconds: float) -> None:
        """A job went to the pool ``latency_seconds`` after the change that made it due."""
        self.dispatch_latency.observe(max(0.0, latency_seconds))

    # ----- exposition ---------------------------------------------------------------------

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve ``/metrics`` from a thread; the address really bound (port 0 picks one).

        The thread sleeps in ``accept`` until a scrape comes: prometheus_client's own
        ``start_http_server`` wakes twice a second to check for shutdown, which an idle
        daemon should not (docs/design.md#metrics). Connections are bounded in number
        and time (:mod:`memoryd.daemon.metrics_server`).
        """
        self._server = BoundedServer((host, port))
        self._server.set_app(only_metrics(make_wsgi_app(self.served)))
        self._thread = threading.Thread(
            target=self._serve_until_closed, name="memoryd-metrics", daemon=True
        )
        self._thread.start()
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])

    def _serve_until_closed(self) -> None:
        server = self._server
        while server is not None and not self._closing:
            server.timeout = server.next_wake(time.monotonic())
            server.handle_request()
            server.reap(time.monotonic())

    def render(self) -> bytes:
        """The exposition text, as a scrape would get it."""
        return generate_latest(self.served)

    def write_textfile(self, path: Path) -> None:
        """Rewrite a node_exporter textfile atomically (readers never see half a file), with
        memoryd's metrics only."""
        text = generate_latest(self.registry)
        atomic_write(path, text, root=path.parent, durable=False)

    def close(self) -> None:
        """Stop serving (a scrape in progress is cut off)."""
        server, self._server = self._server, None
        if server is None:
            return
        self._closing = True
        host, port = server.server_address[:2]
        with contextlib.suppress(OSError):  # wake the accept() the thread sleeps in
            socket.create_connection((str(host), int(port)), timeout=1).close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        server.cut_all()
        server.server_close()
