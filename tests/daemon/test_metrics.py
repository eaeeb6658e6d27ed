"""The Prometheus metrics module: names, units, labels, and its two ways out (HTTP, textfile).

The end-to-end check (a real daemon scraped during real jobs) is in test_fleet_daemon.py.
"""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from memoryd.config.settings import load_settings
from memoryd.daemon.metrics import DaemonView, JobObservation, Metrics, WorkspaceView
from memoryd.daemon.telemetry import Telemetry, salvaged_since


def view(per_root: int = 2) -> DaemonView:
    workspaces = [
        WorkspaceView("/agents", f"team/a{i}", "warning" if i else "normal", 0.7 + i / 100, 7000)
        for i in range(per_root)
    ]
    workspaces.append(WorkspaceView("/more", "b", "critical", 0.9, 9000, backing_off=True))
    workspaces.append(WorkspaceView("/more", "c", "critical", 2.86, 9000, over_budget=True))
    return DaemonView(
        roots=["/agents", "/more", "/empty"],
        workspaces=workspaces,
        jobs_in_flight=1,
        jobs_queued=2,
        pool_workers=3,
        polled_roots=1,
        budget_exhausted=True,
        spend_usd_today=1.25,
        spend_tokens_today=4321,
    )


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_gauges_come_from_the_daemon_view_at_scrape_time() -> None:
    current = [view()]
    metrics = Metrics(lambda: current[0])
    got = samples(metrics.render().decode())
    assert got[("memoryd_workspaces", (("root", "/agents"),))] == 2
    assert got[("memoryd_workspaces", (("root", "/empty"),))] == 0
    assert got[("memoryd_workspaces_by_level", (("level", "warning"),))] == 1
    assert got[("memoryd_workspaces_by_level", (("level", "critical"),))] == 2
    assert got[("memoryd_workspaces_backing_off", ())] == 1
    assert got[("memoryd_workspaces_over_budget", ())] == 1
    assert got[("memoryd_jobs_in_flight", ())] == 1
    assert got[("memoryd_jobs_queued", ())] == 2
    assert got[("memoryd_pool_workers", ())] == 3
    assert got[("memoryd_inotify_fallback_roots", ())] == 1
    assert got[("memoryd_llm_budget_exhausted", ())] == 1
    assert got[("memoryd_llm_spend_today_usd", ())] == 1.25
    assert got[("memoryd_llm_spend_today_tokens", ())] == 4321
    current[0] = view(per_root=5)
    again = samples(metrics.render().decode())
    assert again[("memoryd_workspaces", (("root", "/agents"),))] == 5


def test_per_workspace_gauges_only_when_asked_for() -> None:
    assert not any(
        name.startswith("memoryd_workspace_")
        for name, _ in samples(Metrics(view).render().decode())
    )
    got = samples(Metrics(view, per_workspace=True).render().decode())
    key = (("root", "/agents"), ("workspace", "team/a1"))
    assert got[("memoryd_workspace_usage_ratio", key)] == 0.71
    assert got[("memoryd_workspace_tokens", key)] == 7000


def test_a_finished_job_is_counted_in_every_family_it_touches() -> None:
    metrics = Metrics(view)
    metrics.job_finished(
        JobObservation(
            strategy="narrative",
            backend="anthropic",
            outcome="completed",
            reason="idle",
            duration_seconds=1.5,
            llm_calls=2,
            input_tokens=1000,
            output_tokens=200,
            cache_read_tokens=30,
            cache_creation_tokens=40,
            cost_usd=0.002,
            succeeded_at=1_763_900_000.0,
            masked_messages=12,
            masked_tokens=30_000,
        )
    )
    metrics.job_finished(JobObservation("rolling", "extractive", "failed", "trigger", 0.2))
    metrics.dispatched(0.03)
    got = samples(metrics.render().decode())
    job = (
        ("backend", "anthropic"),
        ("outcome", "completed"),
        ("reason", "idle"),
        ("strategy", "narrative"),
    )
    assert got[("memoryd_jobs_total", job)] == 1
    assert got[("memoryd_job_duration_seconds_count", (("strategy", "narrative"),))] == 1
    assert got[("memoryd_job_duration_seconds_sum", (("strategy", "narrative"),))] == 1.5
    assert got[("memoryd_job_failures_total", (("strategy", "rolling"),))] == 1
    assert got[("memoryd_job_failures_total", (("strategy", "narrative"),))] == 0
    assert got[("memoryd_llm_calls_total", ())] == 2
    assert got[("memoryd_llm_tokens_total", (("kind", "input"),))] == 1000
    assert got[("memoryd_llm_tokens_total", (("kind", "output"),))] == 200
    assert got[("memoryd_llm_tokens_total", (("kind", "cache_read"),))] == 30
    assert got[("memoryd_llm_tokens_total", (("kind", "cache_creation"),))] == 40
    assert got[("memoryd_llm_cost_usd_total", ())] == 0.002
    assert got[("memoryd_masked_messages_total", ())] == 12
    assert got[("memoryd_masked_tokens_total", ())] == 30_000
    assert got[("memoryd_last_successful_job_timestamp_seconds", ())] == 1_763_900_000.0
    assert got[("memoryd_trigger_to_dispatch_seconds_count", ())] == 1
    build = [labels for name, labels in got if name == "memoryd_build_info"]
    assert build and dict(build[0])["version"]


def test_served_over_http_on_the_address_asked_for() -> None:
    metrics = Metrics(view)
    host, port = metrics.serve("127.0.0.1", 0)
    try:
        assert host == "127.0.0.1" and port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            body = reply.read().decode()
        assert samples(body)[("memoryd_pool_workers", ())] == 3
    finally:
        metrics.close()


def test_served_with_the_process_metrics_and_no_created_series() -> None:
    metrics = Metrics(view)
    metrics.job_finished(JobObservation("rolling", "extractive", "failed", "trigger", 0.2))
    _, port = metrics.serve("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            got = samples(reply.read().decode())
    finally:
        metrics.close()
    names = {name for name, _ in got}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= names
    assert {"process_start_time_seconds", "process_open_fds"} <= names
    assert "memoryd_jobs_total" in names
    assert not [name for name in names if name.endswith("_created")]


def test_textfile_is_replaced_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "memoryd.prom"
    target.write_text("old\n")
    metrics = Metrics(view)
    metrics.write_textfile(target)
    got = samples(target.read_text())
    assert got[("memoryd_jobs_in_flight", ())] == 1
    assert not [name for name, _ in got if name.startswith("process_")]  # node_exporter's own
    assert [p.name for p in tmp_path.iterdir()] == ["memoryd.prom"]


def test_closing_stops_serving_at_once_and_frees_the_port() -> None:
    """close() wakes the server thread (it sleeps in accept, no polling) and releases the port."""
    metrics = Metrics(view)
    _, port = metrics.serve("127.0.0.1", 0)
    thread = metrics._thread
    assert thread is not None and thread.is_alive()
    metrics.close()
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_served_on_ipv6_loopback() -> None:
    metrics = Metrics(view)
    try:
        host, port = metrics.serve("::1", 0)
        with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=10) as reply:
            assert b"memoryd_pool_workers" in reply.read()
        assert host == "::1"
    finally:
        metrics.close()


def test_salvaged_lines_are_read_from_the_events_appended_after_the_dispatch(
    tmp_path: Path,
) -> None:
    """The drain salvages after the job returned: its events are the only record."""
    events = tmp_path / "events.jsonl"
    events.write_text('{"type":"salvaged_lines","lines":7}\n')
    offset = events.stat().st_size
    with events.open("a") as file:
        file.write('{"type":"summarize_completed","llm_calls":1}\n')
        file.write('{"type":"salvaged_lines","lines":2}\n')
        file.write("not json\n")
        file.write('["salvaged_lines", 9]\n')
        file.write('{"type":"salvaged_lines","lines":3}\n')
    assert salvaged_since(events, offset) == 5
    assert salvaged_since(events, 0) == 12
    assert salvaged_since(tmp_path / "missing.jsonl", 0) == 0


def test_an_unwritable_textfile_is_reported_once_until_it_works_again(tmp_path: Path) -> None:
    """A missing folder fails every rewrite; the log says so once, and once when it heals."""
    folder = tmp_path / "textfile"
    env = {"HOME": str(tmp_path)}
    overrides = {"roots": [str(tmp_path)], "metrics_textfile": str(folder / "memoryd.prom")}
    settings = load_settings(overrides=overrides, env=env).settings
    telemetry = Telemetry(settings, env, settings.roots)
    with capture_logs() as logs:
        telemetry.start(view, 0.0)
        for step in range(1, 4):
            telemetry._textfile_dirty = True
            telemetry.tick(step * 2.0)
        folder.mkdir()
        telemetry._textfile_dirty = True
        telemetry.tick(10.0)
        telemetry.closed()
    events = [entry["event"] for entry in logs]
    assert events.count("metrics_textfile_unwritable") == 1
    assert events.count("metrics_textfile_written") == 1
    assert (folder / "memoryd.prom").exists()
