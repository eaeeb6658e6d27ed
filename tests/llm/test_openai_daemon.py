"""The daemon end to end on a local model: ``memoryd run`` as a real process, ``auto``
choosing a configured OpenAI-compatible server, a llama.cpp-like fake whose context
nobody configured, and the context learned on the first job kept for the next."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import encode_lines, generated_messages
from daemon_harness import Processes, read_heartbeat, wait_until
from fake_openai import FakeOpenAI, Reply

OPENAI_KEY = "sk-local-SECRET-7777"
N_CTX = 8192


@pytest.fixture
def llama() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(flavour="llamacpp", n_ctx=N_CTX, model="qwen", default=Reply.echo()) as server:
        yield server


def _receipts(ws: Path) -> list[dict[str, object]]:
    path = ws / ".memoryd" / "receipts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _completed(ws: Path) -> bool:
    return any(r["outcome"] == "completed" for r in _receipts(ws))


@pytest.mark.slow
def test_the_daemon_summarizes_through_a_local_server_and_keeps_the_context_it_learned(
    tmp_path: Path, procs: Processes, llama: FakeOpenAI
) -> None:
    """With no Anthropic key and openai.base_url set, ``auto`` picks openai and the log
    says so. The first job's first request overflows the 8k server; the job learns n_ctx,
    re-chunks and completes, and the daemon logs the context. A second workspace's job
    (later, perhaps on another worker) sends only requests that fit. Receipts name the
    backend, the model and the server's token counts at no cost, the job metrics carry
    the backend; the key appears in no file and no log."""
    root = tmp_path / "root"
    first, second = root / "first", root / "second"
    for ws in (first, second):
        ws.mkdir(parents=True)
    (first / "conversation.jsonl").write_bytes(encode_lines(generated_messages(60, 1500)))
    env = {
        "MEMORYD_OPENAI__BASE_URL": llama.base_url,
        "MEMORYD_OPENAI__MODEL": "qwen",
        "MEMORYD_OPENAI__TIMEOUT": "20",
        "MEMORYD_TOKEN_LIMIT": "20000",
        "MEMORYD_COALESCE_MS": "50",
        "MEMORYD_METRICS_TEXTFILE": str(tmp_path / "memoryd.prom"),
        "OPENAI_API_KEY": OPENAI_KEY,
    }
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    [starting] = daemon.logged("daemon_starting")
    assert (starting["summarizer"], starting["summarizer_reason"]) == (
        "openai",
        "auto: no Anthropic API key, openai.base_url is set",
    )

    wait_until(lambda: _completed(first), 60, "the first job to complete")
    learned = daemon.wait_log("context_limit_learned")
    assert learned["context_tokens"] == N_CTX
    assert learned["server"] == f"{llama.base_url} qwen"
    started = daemon.wait_log("forkserver_started")
    assert (started["sdk"], started["backend"]) == (True, "openai")  # preloaded for workers
    assert "jiter" not in Path(f"/proc/{daemon.pid}/maps").read_text()  # not in the daemon
    refused_first = [r for r in llama.requests if llama.prompt_tokens(r.body) > N_CTX]
    assert len(refused_first) == 1
    asked = len(llama.requests)

    (second / "conversation.jsonl").write_bytes(encode_lines(generated_messages(60, 1500)))
    wait_until(lambda: _completed(second), 60, "the second job to complete")
    later = llama.requests[asked:]
    assert later and all(llama.prompt_tokens(r.body) + 1024 <= N_CTX for r in later)

    for ws in (first, second):
        [receipt] = [r for r in _receipts(ws) if r["outcome"] == "completed"]
        assert (receipt["backend"], receipt["model"], receipt["cost_usd"]) == (
            "openai",
            "qwen",
            0.0,
        )
        llm = receipt["llm"]
        assert isinstance(llm, dict) and llm["input_tokens"] > 0 and llm["output_tokens"] > 0
        wait_until(lambda: read_heartbeat(ws)["status"] == "completed", 10, "HEARTBEAT.md")  # noqa: B023
        head = json.loads((ws / "conversation.jsonl").read_bytes().splitlines()[0])
        assert head["isSummary"] is True
        for path in ws.rglob("*"):
            if path.is_file():
                assert OPENAI_KEY.encode() not in path.read_bytes(), path
    assert all(r.headers["authorization"] == f"Bearer {OPENAI_KEY}" for r in llama.requests)

    def jobs_metric() -> bool:
        textfile = tmp_path / "memoryd.prom"
        lines = textfile.read_text().splitlines() if textfile.exists() else []
        return (
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in lines
                if line.startswith("memoryd_jobs_total{")
                and 'backend="openai"' in line
                and 'outcome="completed"' in line
            )
            >= 2
        )

    wait_until(jobs_metric, 15, "the job metrics labelled with the openai backend")
    daemon.stop()
    assert OPENAI_KEY not in daemon.log_text() + daemon.stderr.decode()


@pytest.mark.slow
def test_jobs_on_a_local_server_stay_within_its_own_max_concurrent_requests(
    tmp_path: Path, procs: Processes
) -> None:
    """Three workspaces past the trigger, three workers, ``openai.max_concurrent_requests
    = 1`` (and the anthropic section's own cap left at 16): the jobs run one at a time."""
    root = tmp_path / "root"
    for name in ("a", "b", "c"):
        (root / name).mkdir(parents=True)
        (root / name / "conversation.jsonl").write_bytes(encode_lines(generated_messages(40, 800)))
    with FakeOpenAI(model="qwen", latency=0.5, default=Reply.echo()) as server:
        env = {
            "MEMORYD_SUMMARIZER__BACKEND": "openai",
            "MEMORYD_OPENAI__BASE_URL": server.base_url,
            "MEMORYD_OPENAI__MODEL": "qwen",
            "MEMORYD_OPENAI__MAX_CONCURRENT_REQUESTS": "1",
            "MEMORYD_WORKERS": "3",
            "MEMORYD_TOKEN_LIMIT": "8000",
        }
        daemon = procs.daemon([root], tmp_path, env)
        daemon.wait_ready()
        daemon.wait_log("job_finished", timeout=60, count=3)
    in_flight, most = 0, 0
    for line in daemon.history:
        event = line.record.get("event")
        in_flight += {"summarize_dispatched": 1, "job_finished": -1}.get(str(event), 0)
        most = max(most, in_flight)
    assert most == 1
    assert [r["outcome"] for r in daemon.logged("job_finished")] == ["completed"] * 3
