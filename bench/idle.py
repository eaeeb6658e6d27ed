"""Compactions that land in the middle of an agent's turn, with and without idle compaction.

A compressed day of bursty agents, run twice through the real daemon (``memoryd run``,
offline extractive backend) on the same seeded schedule: once with the defaults, once
with ``idle_compact_after`` set. Each agent (a thread) works in turns: a burst of 3 to 8
messages 50 to 200 ms apart (under the writers' lock, like ``memoryd append``), then a
pause, short (0.3 to 1.2 s: the agent thinking, the user reading) or, one time in four,
long (3 to 6 s: the user away). A turn is *active* from its first append to its last.
A compaction is counted *mid-turn* when the interval between its ``summarize_started``
and ``summarize_completed`` events overlaps one of its agent's active turns, the moment
an agent would see its conversation rewritten under it.

The budget is small (token_limit 8,000) so that every agent crosses the 80% trigger
several times in the run; the idle settings are scaled to the compressed day
(``idle_compact_after`` 2 s against pauses of up to 6 s; ``idle_compact_at`` 0.6).

    python bench/idle.py [--agents 6] [--seconds 90] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _common as common

from memoryd.conversation.lines import append_message

TOKEN_LIMIT = 8_000
IDLE_AFTER = 2.0
IDLE_AT = 0.6


@dataclass
class Agent:
    """One agent's seeded schedule and the turns it actually ran (wall-clock intervals)."""

    name: str
    rng: random.Random
    turns: list[tuple[float, float]] = field(default_factory=list)
    messages: int = 0

    def run(self, workspace: Path, until: float) -> None:
        while time.monotonic() < until:
            burst = self.rng.randint(3, 8)
            started = time.time()
            for index in range(burst):
                role = "user" if index == 0 else "assistant"
                text = common.message_line(self.messages, self.rng.randint(200, 900)).decode()
                content = json.loads(text)["content"]
                append_message(workspace, role, content)
                self.messages += 1
                if index < burst - 1:
                    time.sleep(self.rng.uniform(0.05, 0.2))
            self.turns.append((started, time.time()))
            long_pause = self.rng.random() < 0.25
            time.sleep(self.rng.uniform(3.0, 6.0) if long_pause else self.rng.uniform(0.3, 1.2))


def event_time(event: dict[str, Any]) -> float:
    moment = datetime.strptime(str(event["ts"]), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return moment.timestamp()


def compactions(workspace: Path) -> list[tuple[float, float, str]]:
    """(started, completed, reason) of every compaction in the workspace's events."""
    path = workspace / ".memoryd" / "events.jsonl"
    if not path.exists():
        return []
    events = [
        json.loads(x)
        for x in (workspace / ".memoryd" / "events.jsonl").read_text().split("\n")
        if x
    ]
    found: list[tuple[float, float, str]] = []
    started: dict[str, Any] | None = None
    for event in events:
        if event["type"] == "summarize_started":
            started = event
        elif event["type"] in ("summarize_completed", "summarize_failed") and started:
            found.append((event_time(started), event_time(event), str(started.get("reason"))))
            started = None
    return found


def overlaps(job: tuple[float, float, str], turns: list[tuple[float, float]]) -> bool:
    return any(job[0] <= end and start <= job[1] for start, end in turns)


def run_mode(label: str, idle: bool, agents: int, seconds: float, seed: int) -> dict[str, Any]:
    with common.scratch(f"idle-{label}") as root:
        env = {
            "MEMORYD_SUMMARIZER__BACKEND": "extractive",
            "MEMORYD_TOKEN_LIMIT": str(TOKEN_LIMIT),
            "MEMORYD_DRAIN_SECONDS": "0.1",
            "MEMORYD_LOG_LEVEL": "warning",
        }
        if idle:
            env["MEMORYD_IDLE_COMPACT_AFTER"] = str(IDLE_AFTER)
            env["MEMORYD_IDLE_COMPACT_AT"] = str(IDLE_AT)
        crew = [Agent(f"agent-{i}", random.Random(seed * 1000 + i)) for i in range(agents)]
        for agent in crew:
            (root / agent.name).mkdir()
            append_message(root / agent.name, "user", "hello")
        with common.Daemon(root, env, notify=True) as daemon:
            daemon.wait_notify_ready(60)
            until = time.monotonic() + seconds
            threads = [threading.Thread(target=a.run, args=(root / a.name, until)) for a in crew]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            time.sleep(IDLE_AFTER + 2)  # let the last jobs end
        rows = []
        for agent in crew:
            jobs = compactions(root / agent.name)
            mid = sum(1 for job in jobs if overlaps(job, agent.turns))
            idle_jobs = sum(1 for job in jobs if job[2] == "idle")
            rows.append((agent.name, len(agent.turns), agent.messages, len(jobs), idle_jobs, mid))
    total_jobs = sum(r[3] for r in rows)
    total_mid = sum(r[5] for r in rows)
    total_turns = sum(r[1] for r in rows)
    print(f"\n{label}: idle_compact_after={f'{IDLE_AFTER:g} s' if idle else 'off'}")
    print(common.table(("agent", "turns", "messages", "compactions", "idle", "mid-turn"), rows))
    return {
        "label": label,
        "idle_compact_after": IDLE_AFTER if idle else 0,
        "turns": total_turns,
        "compactions": total_jobs,
        "idle_compactions": sum(r[4] for r in rows),
        "mid_turn": total_mid,
        "mid_turn_share": round(total_mid / total_jobs, 3) if total_jobs else 0.0,
        "turns_hit_share": round(total_mid / total_turns, 4) if total_turns else 0.0,
        "agents": [
            dict(
                zip(
                    ("agent", "turns", "messages", "compactions", "idle", "mid_turn"),
                    r,
                    strict=True,
                )
            )
            for r in rows
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    common.install_exit_handlers()
    results = [
        run_mode("without", False, args.agents, args.seconds, args.seed),
        run_mode("with", True, args.agents, args.seconds, args.seed),
    ]
    print()
    print(
        common.table(
            ("mode", "turns", "compactions", "idle", "mid-turn", "share mid-turn"),
            [
                (
                    r["label"],
                    r["turns"],
                    r["compactions"],
                    r["idle_compactions"],
                    r["mid_turn"],
                    f"{r['mid_turn_share']:.0%}",
                )
                for r in results
            ],
        )
    )
    path = common.save("idle", {"token_limit": TOKEN_LIMIT, "runs": results})
    print(f"\nraw figures: {path}")


if __name__ == "__main__":
    main()
