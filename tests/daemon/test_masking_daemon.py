"""The daemon masks a growing tool loop: it stays under its budget with no LLM call while
masking suffices (docs/design.md#masking)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from agent_transcripts import generate
from daemon_harness import Processes, llm_env, read_heartbeat, read_state, wait_until
from fake_anthropic import FakeAnthropic

from memoryd.conversation.lines import append_message
from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace


def caught_up(folder: Path, count: int) -> bool:
    """state.json counts ``count`` messages and no job is running."""
    state = read_state(folder) or {}
    return state.get("messages") == count and state.get("summarizing") is False


def test_a_growing_tool_loop_stays_under_budget_with_no_llm_call(
    tmp_path: Path, procs: Processes, llm: FakeAnthropic
) -> None:
    """An autonomous loop grows to 1.5 times its budget, one message at a time; the daemon
    (anthropic backend, a strict fake API) masks old tool outputs each time usage crosses
    the trigger: the API never sees a request, usage ends below the trigger, every job is
    a masking, and every original is in the live file or the archive."""
    transcript = generate("autonomous", 11, 200)
    limit = int(transcript.tokens / 1.5)
    root = tmp_path / "root"
    folder = root / "agent"
    folder.mkdir(parents=True)
    task = transcript.messages[0]
    append_message(folder, "user", task["content"])
    env = llm_env(llm.base_url, token_limit=str(limit), coalesce_ms="10")
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    peak = 0.0
    for count, message in enumerate(transcript.messages[1:], start=2):
        append_message(folder, str(message["role"]), message["content"])
        seen = functools.partial(caught_up, folder, count)
        wait_until(seen, 30, f"the daemon saw message {count}")
        peak = max(peak, (read_state(folder) or {}).get("usage_ratio", 0.0))
    state = read_state(folder)
    assert state is not None
    assert state["usage_ratio"] <= 0.8
    assert peak < 1.0
    assert llm.message_requests == []
    receipts = read_receipts(Workspace(folder))
    assert len(receipts) >= 2
    assert all(r.masked is not None and r.llm.calls == 0 for r in receipts)
    assert all(not r.masked.summary_followed for r in receipts if r.masked)
    assert read_heartbeat(folder)["last_result"].startswith("masked ")
    live = (folder / "conversation.jsonl").read_bytes().splitlines()
    archived = [
        line
        for path in sorted((folder / ".memoryd" / "archive").glob("*.jsonl"))
        for line in path.read_bytes().splitlines()
    ]
    originals = [json.loads(x) for x in [*live, *archived] if b'"isMasked"' not in x]
    assert sorted(m["id"] for m in originals) == sorted(json.loads(x)["id"] for x in live)
    assert not any(json.loads(x).get("isSummary") for x in live)
