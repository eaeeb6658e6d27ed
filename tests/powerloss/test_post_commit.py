"""A job whose commit is durable has succeeded: a file memoryd writes only after it
(state.json, checkpoint.json) that cannot be written is logged and never turns the job into
a failure, neither for `memoryd summarize` nor for the daemon. (HEARTBEAT.md and
events.jsonl are written before the commit too, so a job cannot start without them.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import WorkspaceFactory, generated_messages
from daemon_harness import Processes, clean_env, llm_env, wait_until
from daemon_workspaces import append_lines, write_lines
from fake_anthropic import FakeAnthropic

from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]


def block(folder: Path, name: str) -> None:
    """Put a non-empty folder where memoryd writes the file ``name`` (it can never be written)."""
    (folder / name / "in-the-way").mkdir(parents=True)


def head(folder: Path) -> dict[str, object]:
    with (folder / "conversation.jsonl").open("rb") as file:
        message: dict[str, object] = json.loads(file.readline())
    return message


@pytest.mark.parametrize(
    ("blocked", "strategy"),
    [
        (".memoryd/state.json", "narrative"),
        ("checkpoint.json", "checkpoint"),
    ],
)
def test_summarize_reports_a_committed_job_completed_when_a_later_write_fails(
    workspace: WorkspaceFactory, tmp_path: Path, blocked: str, strategy: str
) -> None:
    folder = workspace(messages=generated_messages(40, 300))
    block(folder, blocked)
    env = clean_env(
        tmp_path / "home",
        {"MEMORYD_SUMMARIZER__BACKEND": "extractive", "MEMORYD_STRATEGY": strategy},
    )
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "summarize", "--force", str(folder)],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=120,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert head(folder).get("isSummary") is True  # the rewrite is committed
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.outcome == "completed"
    warnings = [line for line in stderr.splitlines() if "post_commit_write_failed" in line]
    assert len(warnings) == 1 and Path(blocked).name in warnings[0]
    kinds = [
        json.loads(line)["type"]
        for line in (folder / ".memoryd" / "events.jsonl").read_text().splitlines()
    ]
    assert "summarize_completed" in kinds and "summarize_failed" not in kinds


def test_the_daemon_counts_no_failure_for_a_job_that_committed(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    root = tmp_path / "root"
    folder = root / "ws"
    write_lines(folder, "seed", 5)
    block(folder, ".memoryd/state.json")
    env = llm_env(fake_anthropic.base_url, token_limit="3000", coalesce_ms="50")
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    for round_ in range(2):
        start = 5 + 40 * round_
        append_lines(folder, "w", start, 40)
        daemon.wait_log("job_finished", workspace=str(folder), count=round_ + 1, timeout=60)
        outcomes = [line["outcome"] for line in daemon.logged("job_finished")]
        assert outcomes == ["completed"] * (round_ + 1)
        wait_until(lambda: head(folder).get("isSummary") is True, 10, "summary committed")
    assert not daemon.logged("job_failed")
    receipts = read_receipts(Workspace(folder))
    assert [receipt.outcome for receipt in receipts] == ["completed", "completed"]
