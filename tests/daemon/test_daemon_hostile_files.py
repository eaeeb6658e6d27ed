"""No file, connection or ledger can hang, kill or starve the daemon: each reproduction
of the report as a real daemon process, with a healthy workspace beside the hostile one
that must still be summarized. A FIFO at HEARTBEAT.md blocked the loop (and SIGTERM); a
FIFO at state.json or at the ledger blocked the start; a ``[`` x 100,000 state.json or a
nested event raised RecursionError; ``"tokens": 1e400`` in the ledger raised
OverflowError; a thousand idle metrics connections took every descriptor."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from daemon_harness import Daemon, Processes, llm_env, read_events, read_heartbeat, wait_until
from fake_anthropic import FakeAnthropic, Reply
from writers import line_bytes

from memoryd.receipts.spend_cap import ledger_path

EXTRACTIVE = {
    "MEMORYD_SUMMARIZER__BACKEND": "extractive",
    "MEMORYD_COALESCE_MS": "20",
    "MEMORYD_TOKEN_LIMIT": "3000",
}
DEEP = b"[" * 100_000


def write_lines(workspace: Path, writer: str, count: int, start: int = 0) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    data = b"".join(line_bytes(writer, n) for n in range(start, start + count))
    with (workspace / "conversation.jsonl").open("ab") as file:
        file.write(data)


def summarized(daemon: Daemon, workspace: Path, timeout: float = 60) -> None:
    """``workspace`` is over its trigger: wait for its job to complete."""
    daemon.wait_log("job_finished", timeout, workspace=str(workspace), outcome="completed")


def stops_cleanly(daemon: Daemon) -> None:
    daemon.send(signal.SIGTERM)
    assert daemon.wait_exit(35) == 0
    assert b"Traceback" not in daemon.stderr, daemon.stderr[-2000:]
    assert "Traceback" not in daemon.log_text()


# ----- FIFOs --------------------------------------------------------------------------------


@pytest.mark.slow
def test_fifos_in_a_workspace_never_block_the_loop(tmp_path: Path, procs: Processes) -> None:
    """FIFOs at HEARTBEAT.md, state.json, events, receipts, checkpoint.json, a monitor
    and a store: READY, the healthy workspace is summarized, the hostile one is named in a
    few warnings, and SIGTERM stops the daemon (it went unheard while the loop waited)."""
    root = tmp_path / "root"
    hostile, healthy = root / "hostile", root / "healthy"
    write_lines(hostile, "h", 60)
    for name in (
        "HEARTBEAT.md",
        ".memoryd/state.json",
        ".memoryd/events.jsonl",
        ".memoryd/receipts.jsonl",
        ".memoryd/monitors/agent.json",
        "checkpoint.json",
        "memory/bookmarks.jsonl",
    ):
        (hostile / name).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(hostile / name)
    daemon = procs.daemon([root], tmp_path, EXTRACTIVE)
    daemon.wait_ready(60)
    write_lines(healthy, "g", 60)
    summarized(daemon, healthy)
    wait_until(lambda: daemon.logged("workspace_unwritable", workspace=str(hostile)), 30, "a word")
    assert len(daemon.logged("workspace_unwritable", workspace=str(hostile))) <= 5
    stops_cleanly(daemon)


@pytest.mark.slow
def test_a_fifo_at_the_spend_ledger_does_not_block_the_start(
    tmp_path: Path, procs: Processes
) -> None:
    state = tmp_path / "state"
    env = {**EXTRACTIVE, "XDG_STATE_HOME": str(state)}
    env["MEMORYD_SUMMARIZER__MAX_LLM_TOKENS_PER_DAY"] = "1000"
    root = tmp_path / "root"
    write_lines(root / "ws", "w", 3)
    ledger = ledger_path({"XDG_STATE_HOME": str(state)}, [root])
    ledger.parent.mkdir(parents=True)
    os.mkfifo(ledger)
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready(60)
    rebuilt = daemon.wait_log("spend_ledger_rebuilt")
    assert "not a regular file" in rebuilt["was"]
    write_lines(root / "healthy", "g", 60)
    summarized(daemon, root / "healthy")
    stops_cleanly(daemon)


# ----- deep JSON ----------------------------------------------------------------------------


@pytest.mark.slow
def test_deeply_nested_state_json_at_start_and_moved_in_later(
    tmp_path: Path, procs: Processes
) -> None:
    """At start it raised RecursionError before READY (under systemd: a crash loop);
    moved into a running daemon's root it killed the daemon."""
    root = tmp_path / "root"
    for name in ("early", "late"):
        write_lines(tmp_path / name, name[0], 3)
        (tmp_path / name / ".memoryd").mkdir()
        (tmp_path / name / ".memoryd" / "state.json").write_bytes(DEEP)
    root.mkdir()
    (tmp_path / "early").rename(root / "early")
    daemon = procs.daemon([root], tmp_path, EXTRACTIVE)
    daemon.wait_ready(60)
    (tmp_path / "late").rename(root / "late")
    daemon.wait_log("workspace_discovered", 30, workspace=str(root / "late"))
    write_lines(root / "healthy", "g", 60)
    summarized(daemon, root / "healthy")
    for name in ("early", "late"):  # recounted and rewritten: derived data
        state = root / name / ".memoryd" / "state.json"
        wait_until(lambda s=state: s.read_bytes().startswith(b"{"), 30, f"{name} state.json")  # type: ignore[misc]
    stops_cleanly(daemon)


@pytest.mark.slow
def test_a_nested_salvaged_lines_event_does_not_kill_the_metrics(
    tmp_path: Path, procs: Processes
) -> None:
    """The metrics count salvaged lines from events.jsonl after each job; a nested event
    written during the job raised RecursionError in the loop. It is skipped, and the
    valid event after it is counted."""
    root = tmp_path / "root"
    textfile = tmp_path / "metrics.prom"
    env = {**EXTRACTIVE, "MEMORYD_METRICS_TEXTFILE": str(textfile)}
    daemon = procs.daemon([root], tmp_path, env)
    root.mkdir(exist_ok=True)
    daemon.wait_ready(60)
    ws = root / "ws"
    write_lines(ws, "w", 60)
    daemon.wait_log("summarize_dispatched", 30, workspace=str(ws))
    nested = b'{"type":"salvaged_lines","lines":' + b"[" * 50_000 + b"]" * 50_000 + b"}\n"
    valid = b'{"ts":"t","type":"salvaged_lines","workspace":"w","lines":3}\n'
    with (ws / ".memoryd" / "events.jsonl").open("ab") as events:
        events.write(nested + valid)
    summarized(daemon, ws)

    def salvaged() -> bool:
        return "memoryd_salvaged_lines_total 3.0" in textfile.read_text()

    wait_until(salvaged, 30, "the valid salvaged_lines event counted")
    write_lines(root / "healthy", "g", 60)
    summarized(daemon, root / "healthy")
    stops_cleanly(daemon)


# ----- the spend ledger ---------------------------------------------------------------------


def capped_env(base_url: str, state: Path) -> dict[str, str]:
    env = llm_env(base_url, token_limit="3000", coalesce_ms="50")
    env["MEMORYD_SUMMARIZER__MAX_LLM_TOKENS_PER_DAY"] = "1000000"
    env["XDG_STATE_HOME"] = str(state)
    return env


@pytest.mark.slow
def test_a_ledger_with_1e400_is_rebuilt_from_the_receipts(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    """``"tokens": 1e400`` raised OverflowError at start; any unreadable ledger counted
    from zero. The day's total is rebuilt from the receipts, and the LLM is used."""
    fake_anthropic.set_default(Reply.echo())
    state, root = tmp_path / "state", tmp_path / "root"
    env = capped_env(fake_anthropic.base_url, state)
    first = procs.daemon([root], tmp_path, env)
    root.mkdir()
    first.wait_ready(60)
    write_lines(root / "paid", "p", 60)
    summarized(first, root / "paid")
    [ledger] = list((state / "memoryd").glob("spend-*.json"))
    spent = json.loads(ledger.read_text())["tokens"]
    assert spent > 0
    stops_cleanly(first)
    ledger.write_text(
        json.dumps({"day": "2026-11-23", "cost_usd": 0}).replace("}", ', "tokens": 1e400}')
    )

    second = procs.daemon([root], tmp_path, env)
    second.wait_ready(60)
    rebuilt = second.wait_log("spend_ledger_rebuilt")
    assert rebuilt["tokens"] == spent and "number out of range" in rebuilt["was"]
    wait_until(lambda: json.loads(ledger.read_text())["tokens"] == spent, 10, "saved")
    write_lines(root / "more", "m", 60)
    summarized(second, root / "more")
    assert [
        e["backend"] for e in read_events(root / "more") if e["type"] == "summarize_completed"
    ] == ["anthropic"]
    stops_cleanly(second)


@pytest.mark.slow
def test_a_ledger_that_cannot_be_trusted_nor_rebuilt_caps_the_day(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    """``Infinity`` in the ledger and a receipts file that is a FIFO: the day counts as
    capped. Jobs run extractive and say why (event, HEARTBEAT.md), no request reaches the
    LLM, and a restart is still capped."""
    fake_anthropic.set_default(Reply.echo())
    state, root = tmp_path / "state", tmp_path / "root"
    env = capped_env(fake_anthropic.base_url, state)
    ledger = ledger_path({"XDG_STATE_HOME": str(state)}, [root])
    ledger.parent.mkdir(parents=True)
    ledger.write_text('{"day": "2026-11-23", "cost_usd": Infinity, "tokens": 0}')
    (root / "odd" / ".memoryd").mkdir(parents=True)
    write_lines(root / "odd", "o", 2)
    os.mkfifo(root / "odd" / ".memoryd" / "receipts.jsonl")

    for attempt in ("second", "third"):
        daemon = procs.daemon([root], tmp_path, env)
        daemon.wait_ready(60)
        if attempt == "second":
            untrusted = daemon.wait_log("spend_ledger_untrusted")
            assert "Infinity" in untrusted["reason"] and "receipts.jsonl" in untrusted["rebuild"]
        ws = root / attempt
        write_lines(ws, attempt[0], 60)
        summarized(daemon, ws)
        [exhausted] = [e for e in read_events(ws) if e["type"] == "llm_budget_exhausted"]
        assert "spend ledger cannot be trusted" in str(exhausted["reason"])
        completed = [e for e in read_events(ws) if e["type"] == "summarize_completed"]
        assert [e["backend"] for e in completed] == ["extractive"]
        assert "spend ledger cannot be trusted" in read_heartbeat(ws)["last_result"]
        stops_cleanly(daemon)
    assert fake_anthropic.message_requests == []


# ----- the metrics endpoint -----------------------------------------------------------------


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def connected(clients: list[socket.socket], timeout: float) -> int:
    """How many of the non-blocking ``clients`` completed their connection in time."""
    done = 0
    with selectors.DefaultSelector() as selector:
        for client in clients:
            selector.register(client, selectors.EVENT_WRITE)
        deadline = time.monotonic() + timeout
        while done < len(clients) and time.monotonic() < deadline:
            for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                selector.unregister(key.fileobj)
                done += 1
    return done


@pytest.mark.slow
def test_a_thousand_idle_metrics_connections_do_not_starve_the_daemon(
    tmp_path: Path, procs: Processes
) -> None:
    """Under systemd's default of 1,024 descriptors, 1,016 idle sockets to the metrics
    port (each with the start of a request) held a thread and a descriptor each: no job
    ran, scrapes failed. Now the daemon keeps its descriptors: a job runs, an append
    works, a scrape is answered, all while the idle sockets stay open."""
    root = tmp_path / "root"
    root.mkdir()
    env = {**EXTRACTIVE, "MEMORYD_METRICS_LISTEN": "127.0.0.1:0"}
    daemon = procs.daemon([root], tmp_path, env)
    resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (1024, 1024))
    port = int(daemon.wait_log("metrics_listening", 60)["port"])
    daemon.wait_ready(60)
    idle: list[socket.socket] = []
    try:
        for _ in range(1016):
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", port))
            idle.append(client)
            time.sleep(0.003)  # a client's pace: each lands in the server's accept queue
        assert connected(idle, 90) == len(idle)
        for client in idle:  # the start of a request that never ends (slowloris)
            with contextlib.suppress(OSError):
                client.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        ws = root / "ws"
        write_lines(ws, "w", 60)
        summarized(daemon, ws, 90)
        appended = subprocess.run(
            [
                sys.executable,
                "-m",
                "memoryd",
                "append",
                str(ws),
                "--role",
                "user",
                "--content",
                "hi",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert appended.returncode == 0, appended.stderr
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as reply:
            assert b"memoryd_jobs_total" in reply.read()
        assert open_descriptors(daemon.pid) < 1024 - 64
    finally:
        for client in idle:
            client.close()
    stops_cleanly(daemon)
