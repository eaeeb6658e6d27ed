"""Pins through the real daemon: a flagged message and the first one (keep_first) stay
right after the summary, byte for byte, through successive compactions, and each job
leaves a receipt that names its pins."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_harness import Processes, llm_env, read_events, wait_until
from fake_anthropic import FakeAnthropic, Reply
from writers import line_bytes

from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace


def lines_of(workspace: Path) -> list[bytes]:
    return (workspace / "conversation.jsonl").read_bytes().splitlines(keepends=True)


def completed_jobs(workspace: Path, count: int) -> Callable[[], bool]:
    def check() -> bool:
        done = [e for e in read_events(workspace) if e["type"] == "summarize_completed"]
        return len(done) >= count

    return check


@pytest.mark.slow
def test_pins_survive_successive_compactions_by_the_daemon(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.set_default(Reply.echo())
    root = tmp_path / "root"
    ws = root / "ws"
    ws.mkdir(parents=True)
    pinned = json.loads(line_bytes("w", 5))
    pinned["pinned"] = True
    lines = [line_bytes("w", n) for n in range(40)]
    lines[5] = json.dumps(pinned).encode() + b"\n"
    (ws / "conversation.jsonl").write_bytes(b"".join(lines))
    task, flagged = lines[0], lines[5]
    limit = 3000
    env = llm_env(fake_anthropic.base_url, token_limit=str(limit), keep_first="1")
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()

    for round_number in range(1, 4):
        wait_until(completed_jobs(ws, round_number), 30, f"compaction {round_number}")
        wait_until(lambda: lines_of(ws)[1:3] == [task, flagged], 10, "pins after the head")
        assert json.loads(lines_of(ws)[0])["isSummary"] is True
        assert lines_of(ws).count(flagged) == 1 and lines_of(ws).count(task) == 1
        with (ws / "conversation.jsonl").open("ab") as out:
            out.write(
                b"".join(
                    line_bytes("w", n) for n in range(40 * round_number, 40 * (round_number + 1))
                )
            )

    receipts = read_receipts(Workspace(ws))
    assert len(receipts) >= 3
    assert all(r.pins_kept == 2 for r in receipts if r.outcome == "completed")
    archive = ws / ".memoryd" / "archive"
    archived = b"".join(p.read_bytes() for p in archive.iterdir() if p.suffix == ".jsonl")
    assert task not in archived and flagged not in archived


@pytest.mark.slow
def test_a_conversation_where_every_message_is_pinned_is_ineffective_not_nothing_to_do(
    tmp_path: Path, procs: Processes
) -> None:
    """Every message pinned and usage over the trigger: the daemon's job ends
    ``ineffective`` with ``summarize_ineffective`` naming the pinned tokens (as the README
    promises), HEARTBEAT.md says failed, the file is unchanged."""
    root = tmp_path / "root"
    ws = root / "ws"
    ws.mkdir(parents=True)
    pinned = [json.loads(line_bytes("w", n)) | {"pinned": True} for n in range(40)]
    data = b"".join(json.dumps(message).encode() + b"\n" for message in pinned)
    (ws / "conversation.jsonl").write_bytes(data)
    env = {"MEMORYD_SUMMARIZER__BACKEND": "extractive", "MEMORYD_TOKEN_LIMIT": "3000"}
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    finished = daemon.wait_log("job_finished", 30, workspace=str(ws))
    assert finished["outcome"] == "ineffective"
    [event] = [e for e in read_events(ws) if e["type"] == "summarize_ineffective"]
    assert str(event["cause"]).startswith("pinned messages hold ")
    assert int(str(event["pinned_tokens"])) > 2400
    assert "status: failed" in (ws / "HEARTBEAT.md").read_text()
    assert (ws / "conversation.jsonl").read_bytes() == data
    [receipt] = read_receipts(Workspace(ws))
    assert receipt.outcome == "ineffective" and receipt.pins_kept == 40
