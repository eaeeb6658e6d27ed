"""Agent loops: does memoryd handle what real agents write?

Transcripts from ``tests/fakes/agent_transcripts.py`` in its three shapes (an autonomous tool
loop with one task message, an interactive session with follow-ups and hook messages, a
text-mode agent that fences its commands), 50 to 400 messages each, are written to real
workspaces, with ``token_limit`` set so that usage is 95%. For each strategy (narrative,
rolling, checkpoint; extractive backend, otherwise default settings) one job runs on each
as the daemon would: ``run_job`` without ``force``, so the strategy's own due check
decides. Each transcript runs twice: as written, and with its last tool call still
running (the last assistant message's ``tool_use`` has no result yet; the agent appends
the result after the job, as it would when the tool finishes).

Measured per strategy and shape:

- **below trigger**: jobs that leave usage at or below the strategy's trigger
  (``summarize_at`` for rolling, which has no usage trigger of its own today);
- **API valid**: the API view after the job (``memoryd.messages_for_api``, with the result
  of a running tool appended) breaks no request rule of the strict fake Messages API
  (``tests/fakes/api_rules.py``);
- **orphaned**: running variants whose trailing ``tool_use`` went to the archive (a
  text-mode agent's pending command is text, not a tool call: the checkpoint strategy
  folds it like any message, and its output follows the checkpoint);
- **task kept**: the task's line still in the live file byte for byte;
- **facts kept**: of the probe facts in messages that were summarized, the share whose
  text is still in the live file (summary and kept part), as a whole (``line 14`` is not
  in ``line 140``);
- **recall@5**: of those no longer there, the share ``memoryd.search.archive.recall`` finds (a
  message holding the fact among its first 5 hits; at most ``--max-recall`` asked a job);
- **job / yardstick**: the median, over the jobs, of a job's wall time over the time to
  read and json-parse the same file just before it (the fastest of three); the same in
  CPU time, which the disk and other processes move less;
- **lost**: original lines in neither the live file nor the archive (must be 0).

Targets: below trigger 100%; API valid 100%; orphaned 0; task kept 100%; facts kept
>= 0.6; recall@5 >= 0.98; job time within 1.2x of the figures recorded in bench/README.md.

    python bench/agent_loops.py [--transcripts 20] [--max-recall 50] [--quick] [--json] [--dir D]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import _common as common
from agent_transcripts import (
    SHAPES,
    Fact,
    Transcript,
    encode,
    generate,
    message_text,
    occurs,
    write_workspace,
)
from api_rules import request_problem

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.compaction.strategies import strategy_for
from memoryd.config.settings import Settings, load_settings
from memoryd.conversation.api_view import messages_for_api
from memoryd.conversation.lines import split_lines
from memoryd.daemon.logs import configure_logging
from memoryd.files.fsutil import flocked
from memoryd.levels import over_trigger
from memoryd.search.archive import recall
from memoryd.workspace import Workspace

STRATEGIES = ("narrative", "rolling", "checkpoint")
USAGE = 0.95
"""Where each transcript sits on its budget when the job runs."""
MAX_LINE_BYTES = 8 << 20


@dataclass(frozen=True)
class Case:
    """One transcript: its shape, seed and size."""

    shape: str
    seed: int
    messages: int
    tokens: int


@dataclass
class JobFigures:
    """What one job did to one workspace."""

    strategy: str
    shape: str
    seed: int
    running: bool
    messages: int
    tokens: int
    outcome: str
    reason: str
    below_trigger: bool
    api_problem: str | None
    orphaned: bool
    task_kept: bool
    facts_summarized: int
    facts_kept: int
    recall_asked: int
    recall_found: int
    lost_lines: int
    job_s: float
    yardstick_s: float
    job_cpu_s: float
    yardstick_cpu_s: float


def cases(count: int, quick: bool) -> list[Case]:
    """``count`` transcripts of each shape, 50-400 messages of 150-600 tokens each (quick:
    50-80 messages of 150-300 tokens)."""
    found = []
    for shape in SHAPES:
        for seed in range(count):
            rng = random.Random(f"size:{shape}:{seed}")
            messages = rng.randint(50, 80) if quick else rng.randint(50, 400)
            per_message = rng.randint(150, 300) if quick else rng.randint(150, 600)
            found.append(Case(shape, seed, messages, messages * per_message))
    return found


def settings_for(strategy: str, token_limit: int, config_home: Path) -> Settings:
    """Default settings (no machine config file) but the strategy, budget and backend."""
    overrides = {
        "strategy": strategy,
        "token_limit": token_limit,
        "summarizer.backend": "extractive",
        "drain_seconds": 0,
    }
    return load_settings(overrides=overrides, env={"XDG_CONFIG_HOME": str(config_home)}).settings


def view_problem(folder: Path) -> str | None:
    """What makes the workspace's API view an invalid Messages-API request (the strict
    fake server's rules), or None."""
    body = {"model": "claude-haiku-4-5", "max_tokens": 1024, "messages": messages_for_api(folder)}
    return request_problem(body)


def _has_tool_use(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" for b in content
    )


def yardstick(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds to read ``path`` and json-parse each line (fastest of three)."""
    wall, cpu = [], []
    for _ in range(3):
        started, cpu_started = time.perf_counter(), time.process_time()
        for line in path.read_bytes().splitlines():
            json.loads(line)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return min(wall), min(cpu)


def _finish_background_work() -> None:
    """Wait for the archive index updates that jobs leave running."""
    for thread in threading.enumerate():
        if thread.name == "memoryd-index":
            thread.join()


def _archived_lines(folder: Path) -> list[bytes]:
    archive = Workspace(folder).archive_dir
    files = sorted(archive.glob("*.jsonl")) if archive.is_dir() else []
    return [line for f in files for line in f.read_bytes().splitlines(keepends=True)]


def _recalled(folder: Path, fact: Fact, holders: set[str]) -> bool:
    """True when a message holding ``fact`` is among recall's first 5 hits."""
    query = '"' + fact.text.replace('"', " ") + '"'
    return any(hit.id in holders for hit in recall(folder, query, limit=5))


def run_one(
    folder: Path, transcript: Transcript, strategy: str, config_home: Path, max_recall: int
) -> JobFigures:
    """Write ``transcript`` to ``folder``, run one job as the daemon would, measure it."""
    conversation = write_workspace(folder, transcript) / "conversation.jsonl"
    original = transcript.lines
    tokens = sum(line.tokens for line in split_lines(b"".join(original), MAX_LINE_BYTES))
    settings = settings_for(strategy, math.ceil(tokens / USAGE), config_home)
    _finish_background_work()
    yard_s, yard_cpu_s = yardstick(conversation)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = run_job(JobRequest(folder, settings, reason="trigger"))
    job_s, job_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    _finish_background_work()
    data = conversation.read_bytes()
    live_lines = data.splitlines(keepends=True)
    live = set(live_lines)
    lost = Counter(original) - Counter(live_lines + _archived_lines(folder))
    after = sum(line.tokens for line in split_lines(data, MAX_LINE_BYTES))
    trigger = strategy_for(settings).trigger or settings.summarize_at
    live_messages = [json.loads(line) for line in live_lines]
    live_text = "\n".join(message_text(m) for m in live_messages)
    summarized = [f for f in transcript.facts if original[f.index] not in live]
    gone = [f for f in summarized if not occurs(f.text, live_text)]
    asked = random.Random(transcript.seed).sample(gone, min(max_recall, len(gone)))
    found = 0
    for fact in asked:
        holders = {
            str(m["id"])
            for m, line in zip(transcript.messages, original, strict=True)
            if line not in live and occurs(fact.text, message_text(m))
        }
        found += _recalled(folder, fact, holders)
    if transcript.pending is not None:
        # The tool finished: the agent appends its result, under the writers' lock.
        with flocked(Workspace(folder).lock, root=folder), conversation.open("ab") as out:
            out.write(encode(transcript.pending))
    return JobFigures(
        strategy=strategy,
        shape=transcript.shape,
        seed=transcript.seed,
        running=transcript.pending is not None,
        messages=len(original),
        tokens=tokens,
        outcome=result.outcome,
        reason=result.reason,
        below_trigger=not over_trigger(after, settings.token_limit, trigger),
        api_problem=view_problem(folder),
        orphaned=(
            transcript.pending is not None
            and _has_tool_use(transcript.messages[-1])
            and original[-1] not in live
        ),
        task_kept=original[0] in live,
        facts_summarized=len(summarized),
        facts_kept=len(summarized) - len(gone),
        recall_asked=len(asked),
        recall_found=found,
        lost_lines=sum(lost.values()),
        job_s=job_s,
        yardstick_s=yard_s,
        job_cpu_s=job_cpu_s,
        yardstick_cpu_s=yard_cpu_s,
    )


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def cell(jobs: list[JobFigures]) -> dict[str, Any]:
    """The figures of one strategy and shape."""
    running = [j for j in jobs if j.running]
    summarized = sum(j.facts_summarized for j in jobs)
    asked = sum(j.recall_asked for j in jobs)
    outcomes = Counter(j.outcome for j in jobs)
    problems = Counter(j.api_problem.split(":")[0] for j in jobs if j.api_problem)
    ratios = [j.job_s / j.yardstick_s for j in jobs]
    cpu_ratios = [j.job_cpu_s / j.yardstick_cpu_s for j in jobs]
    return {
        "jobs": len(jobs),
        "outcomes": dict(outcomes),
        "below_trigger": _share(sum(j.below_trigger for j in jobs), len(jobs)),
        "api_valid": _share(sum(j.api_problem is None for j in jobs), len(jobs)),
        "api_problems": dict(problems.most_common(3)),
        "orphaned": sum(j.orphaned for j in running),
        "running_jobs": len(running),
        "task_kept": _share(sum(j.task_kept for j in jobs), len(jobs)),
        "facts_summarized": summarized,
        "facts_kept": _share(sum(j.facts_kept for j in jobs), summarized),
        "recall_asked": asked,
        "recall_at_5": _share(sum(j.recall_found for j in jobs), asked),
        "job_ms_median": round(statistics.median(j.job_s for j in jobs) * 1000, 2),
        "yardstick_ms_median": round(statistics.median(j.yardstick_s for j in jobs) * 1000, 3),
        "job_over_yardstick": round(statistics.median(ratios), 2),
        "job_cpu_over_yardstick_cpu": round(statistics.median(cpu_ratios), 2),
        "lost_lines": sum(j.lost_lines for j in jobs),
    }


def measure(count: int, quick: bool, max_recall: int, scratch: Path) -> dict[str, Any]:
    """Every strategy on every transcript, as written and with a running tool call."""
    jobs: list[JobFigures] = []
    config_home = scratch / "config"
    for strategy in STRATEGIES:
        for case in cases(count, quick):
            for running in (False, True):
                transcript = generate(
                    case.shape, case.seed, case.messages, tokens=case.tokens, running=running
                )
                name = f"{strategy}-{case.shape}-{case.seed}-{'running' if running else 'done'}"
                jobs.append(run_one(scratch / name, transcript, strategy, config_home, max_recall))
        print(f"{strategy}: {len(jobs)} jobs so far", file=sys.stderr)
    cells = {
        f"{strategy}/{shape}": cell([j for j in jobs if (j.strategy, j.shape) == (strategy, shape)])
        for strategy in STRATEGIES
        for shape in SHAPES
    }
    return {
        "transcripts_per_shape": count,
        "usage": USAGE,
        "cells": cells,
        "jobs": [asdict(j) for j in jobs],
    }


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def render(report: dict[str, Any]) -> str:
    """The figures as a table, for people."""
    headers = ["strategy/shape", "jobs", "completed", "below trigger", "API valid"]
    headers += ["orphaned", "task kept", "facts kept", "recall@5", "job/yardstick (CPU)", "lost"]
    rows = [
        [
            name,
            c["jobs"],
            c["outcomes"].get("completed", 0),
            _percent(c["below_trigger"]),
            _percent(c["api_valid"]),
            f"{c['orphaned']}/{c['running_jobs']}",
            _percent(c["task_kept"]),
            f"{_percent(c['facts_kept'])} of {c['facts_summarized']}",
            f"{_percent(c['recall_at_5'])} of {c['recall_asked']}",
            f"{c['job_over_yardstick']:.1f}x ({c['job_cpu_over_yardstick_cpu']:.1f}x)",
            c["lost_lines"],
        ]
        for name, c in report["cells"].items()
    ]
    return common.table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--transcripts", type=int, default=20, help="transcripts per shape")
    parser.add_argument("--max-recall", type=int, default=50, help="recall queries per job")
    parser.add_argument("--quick", action="store_true", help="2 small transcripts per shape")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--dir",
        type=Path,
        help="where the workspaces are written (default: a scratch folder under bench/results)",
    )
    args = parser.parse_args(argv)
    count = 2 if args.quick else args.transcripts
    max_recall = min(args.max_recall, 10) if args.quick else args.max_recall
    configure_logging("json", "warning", sys.stderr)
    common.install_exit_handlers()
    with contextlib.ExitStack() as stack:
        if args.dir is None:
            scratch = stack.enter_context(common.scratch("agent_loops"))
        else:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir)))
        report = measure(count, args.quick, max_recall, scratch)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    if not args.quick:
        print(f"raw figures: {common.save('agent_loops', report)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
