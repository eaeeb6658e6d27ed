"""Fleet operation through a real daemon: /metrics scraped during real jobs, the Grafana
dashboard's queries against that scrape, the spend cap across a restart, and compaction
while an agent is idle. The daemon is ``python -m memoryd run`` as a subprocess."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    Processes,
    clean_env,
    llm_env,
    read_events,
    read_heartbeat,
    wait_until,
)
from fake_anthropic import FakeAnthropic, Reply
from prometheus_client.parser import text_string_to_metric_families
from writers import line_bytes

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "config" / "grafana-dashboard.json"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def write_lines(workspace: Path, writer: str, count: int, start: int = 0) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    data = b"".join(line_bytes(writer, n) for n in range(start, start + count))
    with (workspace / "conversation.jsonl").open("ab") as file:
        file.write(data)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over the series whose labels include ``labels``."""
    return sum(
        value
        for (sample, series), value in samples.items()
        if sample == name and all((k, v) in series for k, v in labels.items())
    )


def of_type(workspace: Path, type_: str) -> list[dict[str, object]]:
    return [e for e in read_events(workspace) if e["type"] == type_]


def event_time(event: dict[str, object]) -> float:
    moment = datetime.strptime(str(event["ts"]), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return moment.timestamp()


def dashboard_metric_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    exprs.append(value)
                elif key == "query" and isinstance(value, dict):
                    exprs.append(str(value.get("query", "")))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard)
    assert len(exprs) >= 20
    return {name for expr in exprs for name in re.findall(r"\bmemoryd_[a-z_]+\b", expr)}


@pytest.mark.slow
def test_metrics_scraped_during_real_jobs_match_the_events(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    """Scraped while a (slow) LLM job runs: one job in flight, workspaces by root and
    level, per-workspace gauges by relative name; after the jobs, jobs_total, LLM calls and
    the last-success time agree with events.jsonl, and the node_exporter textfile holds
    the same counts. Every metric the Grafana dashboard queries is in the scrape."""
    fake_anthropic.set_default(Reply.echo())
    fake_anthropic.latency = 2.0
    root = tmp_path / "root"
    full, calm = root / "team" / "full", root / "calm"
    write_lines(calm, "c", 3)
    textfile = tmp_path / "textfile" / "memoryd.prom"
    textfile.parent.mkdir()
    env = llm_env(
        fake_anthropic.base_url,
        token_limit="3000",
        coalesce_ms="50",
        metrics_listen="127.0.0.1:0",
        metrics_per_workspace="true",
        metrics_textfile=str(textfile),
    )
    daemon = procs.daemon([root], tmp_path, env)
    port = int(daemon.wait_log("metrics_listening")["port"])
    daemon.wait_ready()

    idle = parse(scrape(port))
    assert total(idle, "memoryd_workspaces", root=str(root)) == 1
    assert total(idle, "memoryd_jobs_in_flight") == 0
    assert total(idle, "memoryd_pool_workers") == 0  # workers start with a job
    assert total(idle, "memoryd_build_info") == 1

    write_lines(full, "w", 60)
    daemon.wait_log("summarize_dispatched", workspace=str(full))
    during = parse(
        wait_until(
            lambda: (
                (text := scrape(port))
                and total(parse(text), "memoryd_jobs_in_flight") == 1
                and total(parse(text), "memoryd_pool_workers") == 1
                and text
            ),
            20,
            "a scrape with the job in flight in its worker (forked once the forkserver is up)",
        )
    )
    assert total(during, "memoryd_workspaces", root=str(root)) == 2
    assert total(during, "memoryd_workspaces_by_level") == 2
    assert total(during, "memoryd_workspaces_by_level", level="critical") == 1
    assert total(during, "memoryd_workspace_tokens", workspace="team/full") > 0.8 * 3000
    assert total(during, "memoryd_workspace_usage_ratio", workspace="calm") < 0.1
    assert total(during, "memoryd_trigger_to_dispatch_seconds_count") >= 1

    daemon.wait_log("job_finished", workspace=str(full))
    wait_until(lambda: read_heartbeat(full).get("status") == "completed", 20, "completed")
    after = parse(
        wait_until(
            lambda: (
                (text := scrape(port))
                and total(parse(text), "memoryd_jobs_in_flight") == 0
                and total(parse(text), "memoryd_workspaces_by_level", level="critical") == 0
                and text
            ),
            20,
            "a scrape after the job, its workspace back to normal",
        )
    )
    completed = of_type(full, "summarize_completed")
    assert completed
    assert total(after, "memoryd_jobs_total", outcome="completed", reason="trigger") + total(
        after, "memoryd_jobs_total", outcome="ineffective"
    ) == len(completed)
    assert total(after, "memoryd_jobs_total", backend="anthropic") == len(completed)
    assert total(after, "memoryd_llm_calls_total") == sum(
        int(str(e["llm_calls"])) for e in completed
    )
    assert total(after, "memoryd_llm_calls_total") == len(fake_anthropic.message_requests)
    receipts = read_receipts(full)
    assert [r["trigger"] for r in receipts] == ["trigger"] * len(receipts)
    for kind in ("input", "output", "cache_read", "cache_creation"):
        assert total(after, "memoryd_llm_tokens_total", kind=kind) == sum(
            r["llm"][f"{kind}_tokens"] for r in receipts
        )
    assert total(after, "memoryd_llm_tokens_total") > 0
    assert total(after, "memoryd_llm_cost_usd_total") == pytest.approx(
        sum(r["cost_usd"] for r in receipts)
    )
    assert total(after, "memoryd_llm_cost_usd_total") > 0
    assert total(after, "memoryd_job_duration_seconds_count", strategy="narrative") == len(
        completed
    )
    assert abs(total(after, "memoryd_last_successful_job_timestamp_seconds") - time.time()) < 60

    scraped_names = {name for name, _ in after}
    missing = dashboard_metric_names() - scraped_names
    assert not missing, f"the dashboard queries metrics that do not exist: {sorted(missing)}"

    wait_until(
        lambda: (
            textfile.exists()
            and total(parse(textfile.read_text()), "memoryd_jobs_total") == len(completed)
        ),
        10,
        "the textfile to count the job",
    )
    assert [p.name for p in textfile.parent.iterdir()] == ["memoryd.prom"]


def test_a_metrics_address_on_the_network_is_refused_unless_allowed(tmp_path: Path) -> None:
    """metrics_listen on 0.0.0.0 without metrics_allow_remote: exit 2, one line, no start."""
    root = tmp_path / "root"
    root.mkdir()
    env = clean_env(tmp_path, {"MEMORYD_METRICS_LISTEN": "0.0.0.0:9477"})
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "run", "--root", str(root)],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "metrics_allow_remote" in lines[0], result.stderr
    assert b"daemon_ready" not in result.stdout


def test_a_metrics_port_in_use_is_one_line_and_the_daemon_does_not_start(
    tmp_path: Path,
) -> None:
    """Another process holds the port: exit 2 with one line naming it, no traceback."""
    root = tmp_path / "root"
    root.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = clean_env(tmp_path, {"MEMORYD_METRICS_LISTEN": f"127.0.0.1:{port}"})
        result = subprocess.run(
            [sys.executable, "-m", "memoryd", "run", "--root", str(root)],
            env=env,
            capture_output=True,
            timeout=60,
        )
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "cannot listen" in lines[0]
    assert b"Traceback" not in result.stderr and b"daemon_ready" not in result.stdout


PROBE = """
import sys
from pathlib import Path
from memoryd.cli import main
from memoryd.config.settings import load_settings
from memoryd.daemon.supervisor import Supervisor

ws, root = Path(sys.argv[1]), Path(sys.argv[2])
assert main(["append", str(ws), "--role", "user", "--content", "hello"]) == 0
assert main(["heartbeat", str(ws), "checkin"]) == 0
assert main(["status", str(ws)]) == 0
env = {"HOME": sys.argv[3]}
settings = load_settings(overrides={"roots": [str(root)], "workers": 1}, env=env)
supervisor = Supervisor(settings, env=env)
supervisor.start()
supervisor.loop(wait=0.1)
supervisor.close()
print("IMPORTED" if "prometheus_client" in sys.modules else "NOT IMPORTED")
"""


def test_prometheus_client_is_not_imported_unless_metrics_are_enabled(tmp_path: Path) -> None:
    """append, heartbeat, status and a daemon without metrics never import prometheus_client."""
    root = tmp_path / "root"
    write_lines(root / "ws", "a", 2)
    env = clean_env(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(root / "ws"), str(root), str(tmp_path)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode().strip().splitlines()[-1] == "NOT IMPORTED"


@pytest.mark.slow
def test_an_idle_workspace_above_idle_compact_at_is_compacted_once_with_reason_idle(
    tmp_path: Path, procs: Processes
) -> None:
    """Below the 80% trigger but above idle_compact_at: no job while the agent keeps
    appending; once it has been quiet for idle_compact_after, one compaction whose events
    and log say reason idle; no second one while it stays quiet."""
    root = tmp_path / "root"
    ws = root / "agent"
    write_lines(ws, "w", 4)
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "MEMORYD_TOKEN_LIMIT": "3000",
        "MEMORYD_COALESCE_MS": "20",
        "MEMORYD_IDLE_COMPACT_AFTER": "1.5",
        "MEMORYD_IDLE_COMPACT_AT": "0.5",
        "MEMORYD_DRAIN_SECONDS": "0",
    }
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    start = time.monotonic()
    written = 4
    # Keep appending every 0.3 s (busier than the 1.5 s idle window) until usage is
    # between idle_compact_at and the trigger, then a little more.
    while True:
        write_lines(ws, "w", 1, start=written)
        written += 1
        time.sleep(0.3)
        state = json.loads((ws / ".memoryd" / "state.json").read_text())
        if state["usage_ratio"] > 0.6 or time.monotonic() - start > 30:
            break
    assert 0.5 < state["usage_ratio"] < 0.8, state
    assert not of_type(ws, "summarize_started"), "compacted while the agent was active"
    last_append = (ws / "conversation.jsonl").stat().st_mtime

    daemon.wait_log("summarize_dispatched", workspace=str(ws), reason="idle", timeout=20)
    wait_until(lambda: of_type(ws, "summarize_completed"), 20, "the idle compaction")
    started, completed = of_type(ws, "summarize_started"), of_type(ws, "summarize_completed")
    assert [e["reason"] for e in started] == ["idle"]
    assert [e["reason"] for e in completed] == ["idle"]
    receipts = read_receipts(ws)
    assert [r["trigger"] for r in receipts] == ["idle"]
    assert event_time(started[0]) - last_append >= 1.5 - 0.05  # ms stamps, mtime granularity
    time.sleep(2.5)  # more than idle_compact_after again: still one compaction
    assert len(of_type(ws, "summarize_started")) == 1


def read_receipts(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / ".memoryd" / "receipts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def over_trigger_workspace(workspace: Path, writer: str) -> None:
    write_lines(workspace, writer, 60)


@pytest.mark.slow
def test_the_daily_token_cap_switches_to_extractive_and_survives_a_sigkill_restart(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    """A 1-token daily cap: the first job uses the LLM and its receipt's tokens go to the
    ledger; the next job runs extractive with an llm_budget_exhausted event, a note in
    HEARTBEAT.md and the metric at 1; after SIGKILL a new daemon still runs extractive
    (no request reaches the LLM) because the total was kept in $XDG_STATE_HOME."""
    fake_anthropic.set_default(Reply.echo())
    root = tmp_path / "root"
    root.mkdir()
    state_home = tmp_path / "state"
    env = llm_env(
        fake_anthropic.base_url,
        token_limit="3000",
        coalesce_ms="50",
        metrics_listen="127.0.0.1:0",
    )
    env["MEMORYD_SUMMARIZER__MAX_LLM_TOKENS_PER_DAY"] = "1"
    env["XDG_STATE_HOME"] = str(state_home)

    first = procs.daemon([root], tmp_path, env)
    port = int(first.wait_log("metrics_listening")["port"])
    first.wait_ready()
    paid = root / "paid"
    over_trigger_workspace(paid, "p")
    first.wait_log("job_finished", workspace=str(paid))
    [receipt] = [
        json.loads(x) for x in (paid / ".memoryd" / "receipts.jsonl").read_text().split("\n") if x
    ]
    assert receipt["backend"] == "anthropic"
    llm_tokens = sum(v for k, v in receipt["llm"].items() if k.endswith("_tokens"))
    assert llm_tokens > 1
    [ledger] = list((state_home / "memoryd").glob("spend-*.json"))
    saved = json.loads(ledger.read_text())
    assert saved["tokens"] == llm_tokens
    requests = len(fake_anthropic.message_requests)

    capped = root / "capped"
    over_trigger_workspace(capped, "c")
    first.wait_log("job_finished", workspace=str(capped))
    assert first.logged("llm_budget_exhausted")
    [exhausted] = of_type(capped, "llm_budget_exhausted")
    assert "daily cap" in str(exhausted["reason"]) and str(exhausted["until"]).endswith(
        "T00:00:00.000Z"
    )
    [completed] = of_type(capped, "summarize_completed")
    assert completed["backend"] == "extractive"
    wait_until(lambda: read_heartbeat(capped).get("status") == "completed", 10, "completed")
    assert "extractive backend: LLM tokens" in read_heartbeat(capped)["last_result"]
    assert len(fake_anthropic.message_requests) == requests
    samples = parse(scrape(port))
    assert total(samples, "memoryd_llm_budget_exhausted") == 1
    assert total(samples, "memoryd_llm_budget_downgraded_jobs_total") == 1
    assert total(samples, "memoryd_llm_spend_today_tokens") == llm_tokens

    first.kill_all()
    second = procs.daemon([root], tmp_path, env)
    second.wait_ready()
    later = root / "later"
    over_trigger_workspace(later, "l")
    second.wait_log("job_finished", workspace=str(later))
    assert [e["backend"] for e in of_type(later, "summarize_completed")] == ["extractive"]
    assert of_type(later, "llm_budget_exhausted")
    assert len(fake_anthropic.message_requests) == requests
    assert json.loads(ledger.read_text())["tokens"] == llm_tokens


@pytest.mark.slow
def test_lines_salvaged_after_a_commit_are_counted_once_the_drain_is_over(
    tmp_path: Path, procs: Processes
) -> None:
    """A writer whose descriptor predates the rewrite appends during the drain window: the
    line is carried into the new file (event salvaged_lines) and the metric counts it."""
    root = tmp_path / "root"
    ws = root / "agent"
    write_lines(ws, "w", 10)
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "MEMORYD_TOKEN_LIMIT": "3000",
        "MEMORYD_DRAIN_SECONDS": "3",
        "MEMORYD_METRICS_LISTEN": "127.0.0.1:0",
    }
    daemon = procs.daemon([root], tmp_path, env)
    port = int(daemon.wait_log("metrics_listening")["port"])
    daemon.wait_ready()
    late = os.open(ws / "conversation.jsonl", os.O_WRONLY | os.O_APPEND)
    try:
        write_lines(ws, "w", 50, start=10)
        wait_until(lambda: of_type(ws, "summarize_completed"), 20, "the commit")
        os.write(late, line_bytes("late", 0))
    finally:
        os.close(late)
    wait_until(lambda: of_type(ws, "salvaged_lines"), 10, "the salvaged line")
    salvaged = sum(int(str(e["lines"])) for e in of_type(ws, "salvaged_lines"))
    assert salvaged == 1
    wait_until(
        lambda: total(parse(scrape(port)), "memoryd_salvaged_lines_total") == salvaged,
        15,
        "the metric to count it",
    )
    assert b'"late-0"' in (ws / "conversation.jsonl").read_bytes()
