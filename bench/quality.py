"""Summary quality: how many planted details survive a compaction, before and after the
retention check; pins over 50 compactions; the check's cost; the prompt cache's saving.

Conversations carry planted details of every kind the check knows (file paths, URLs,
issue and PR numbers, versions, code in backticks, numbers with units, dates, decisions,
preferences, open action items) in their oldest part, among bland filler. Each is
compacted once by a real job (``run_job``, narrative, forced) with:

- ``extractive``: the offline backend;
- ``lossy``: the anthropic backend, through the real SDK, against the fake Messages API
  dropping ``--drop`` of the details it is shown (and of those a repair request lists);
- ``fluent``: the same server answering a fluent summary with no detail at all;
- ``extractive, tight cap``: the offline backend with a 120-token summary, too small for
  every planted sentence.

Reported per mode: the check's own score before and after (from the receipts), the share
of *planted* details found in the final summary (each planted detail is matched on its
own), whether every summary is within ``max_summary_tokens``, and LLM calls. Then: 50
successive compactions of one workspace with pinned messages (every pin must still be
right after the head, byte for byte, after each); the check's wall time against the job's
with the extractive backend, on these conversations and on ones of about 80,000 and 214,000
tokens (the check's functions are wrapped with a timer inside the real job); and the
prompt cache's saving in the lossy mode, priced with the built-in
claude-haiku-4-5 prices, against the same tokens billed without the cache.

Targets: planted retention after the check >= 0.95 in every mode; every summary within its
cap; 0 pins lost over 50 compactions; the check <= 5% of a job's wall time (extractive).

    python bench/quality.py [--conversations 24] [--drop 0.5] [--rounds 50]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common
from fake_anthropic import FakeAnthropic, Reply

import memoryd.compaction.strategies.head as summary_module
from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings, load_settings
from memoryd.daemon.logs import configure_logging
from memoryd.receipts.pricing import DEFAULT_PRICES, cost_usd
from memoryd.receipts.records import read_receipts
from memoryd.summary.retention import Detail, extract_details, score
from memoryd.tokens import LLMUsage, estimate_text_tokens
from memoryd.workspace import Workspace

API_KEY = "sk-ant-bench-quality"
CHECK_FUNCTIONS = ("extract_details", "reconcile")
"""What the retention check runs inside a job (memoryd.compaction.strategies.head)."""
CAP = 400
TIGHT_CAP = 120
"""A cap the extractive summary cannot fit every planted sentence into."""
FILLER = (
    "The conversation went on about the layout of the page and the colour of the buttons",
    "They talked through the wording of the welcome screen for a while",
    "Someone mentioned that the meeting room was cold again this morning",
    "The assistant summarised the discussion so far in a friendly way",
    "There was some back and forth about naming without a clear outcome",
    "The user thanked the assistant and asked it to carry on with the plan",
)
PLANTS: tuple[Callable[[random.Random, int], str], ...] = (
    lambda r, n: f"The parser lives in src/{r.choice(['core', 'io', 'web'])}/parse_{n}.py now.",
    lambda r, n: f"The spec is at https://docs.example.com/specs/{n}/{r.randint(100, 999)}.",
    lambda r, n: f"This is tracked in issue #{r.randint(1000, 9999)} and PR {r.randint(10, 999)}.",
    lambda r, n: f"Pin the SDK to v{r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 9)}.",
    lambda r, n: f"Call `rebuild_cache_{n}` before the import runs.",
    lambda r, n: f"The request timeout is {r.randint(100, 900)} ms at most.",
    lambda r, n: f"The freeze starts on 2027-0{r.randint(1, 9)}-{r.randint(10, 28)}.",
    lambda r, n: f"We decided to shard table orders_{n} by tenant for isolation.",
    lambda r, n: f"I prefer squash merges for branch feature_{n} every time.",
    lambda r, n: f"We need to write the rollback guide for service_{n} this week.",
)


def conversation(
    seed: int, count: int = 40, filler: tuple[int, int] = (4, 7)
) -> tuple[list[dict[str, Any]], list[str]]:
    """``count`` messages of ``filler`` (min, max) bland sentences; each of the first ten
    carries one planted detail (also returned)."""
    rng = random.Random(seed)
    planted = [plant(rng, seed * 100 + i) for i, plant in enumerate(PLANTS)]
    messages = []
    for index in range(count):
        sentences = [rng.choice(FILLER) + "." for _ in range(rng.randint(*filler))]
        if index < len(planted):
            sentences.insert(rng.randint(0, len(sentences)), planted[index])
        messages.append(
            {
                "id": f"c{seed}-m{index:03d}",
                "role": "user" if index % 2 == 0 else "assistant",
                "content": " ".join(sentences),
                "timestamp": 1_800_000_000_000 + index * 1000,
            }
        )
    return messages, planted


def write_workspace(folder: Path, messages: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(m, separators=(",", ":")) + "\n" for m in messages)
    (folder / "conversation.jsonl").write_text(data)


def settings_for(mode: str, base_url: str, **extra: Any) -> Settings:
    overrides: dict[str, Any] = {
        "token_limit": 100_000,
        "drain_seconds": 0,
        "summarizer.max_summary_tokens": CAP,
        **extra,
    }
    if mode == "extractive":
        overrides["summarizer.backend"] = "extractive"
    else:
        overrides.update(
            {
                "summarizer.backend": "anthropic",
                "anthropic.base_url": base_url,
                "anthropic.max_retries": 0,
                "anthropic.timeout": 10.0,
            }
        )
    return load_settings(overrides=overrides, env={"HOME": str(common.TMP)}).settings


def run(folder: Path, settings: Settings) -> JobResult:
    env = {"ANTHROPIC_API_KEY": API_KEY}
    return run_job(JobRequest(workspace=folder, settings=settings, force=True, env=env))


def summary_text(folder: Path) -> str:
    head = json.loads((folder / "conversation.jsonl").read_bytes().split(b"\n", 1)[0])
    return str(head["content"]).split("\n\n", 1)[1]


def planted_kept(planted: list[str], text: str) -> int:
    """Planted details whose own detail (the one the sentence was written for) survives."""
    kept = 0
    for sentence in planted:
        details = extract_details([{"role": "user", "content": sentence}])
        own = _own_detail(details)
        kept += own is not None and score([own], text).score == 1.0
    return kept


def _own_detail(details: list[Detail]) -> Detail | None:
    """The detail a planted sentence was written for: its identifier, else the sentence."""
    identifiers = [d for d in details if d.kind not in ("decision", "preference", "action")]
    chosen = identifiers or details
    return chosen[0] if chosen else None


def quality(
    modes: list[str], count: int, drop: float, scratch: Path, cap: int = CAP
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for mode in modes:
        # A fresh server per mode: its prompt cache starts empty.
        with FakeAnthropic() as fake:
            fake.set_default(Reply.lossy(drop) if mode == "lossy" else Reply.fluent())
            before, after, planted_total, planted_after = [], [], 0, 0
            over_cap = calls = 0
            usage = LLMUsage()
            for seed in range(count):
                messages, planted = conversation(seed)
                folder = scratch / f"{mode}-{cap}" / f"c{seed}"
                write_workspace(folder, messages)
                settings = settings_for(
                    mode, fake.base_url, **{"summarizer.max_summary_tokens": cap}
                )
                result = run(folder, settings)
                assert result.outcome == "completed", result.reason
                [receipt] = read_receipts(Workspace(folder))
                assert receipt.retention is not None
                before.append(receipt.retention.before)
                after.append(receipt.retention.after)
                text = summary_text(folder)
                over_cap += estimate_text_tokens(text) > cap
                planted_total += len(planted)
                planted_after += planted_kept(planted, text)
                calls += receipt.llm.calls
                usage = usage + receipt.llm
            results[mode] = {
                "conversations": count,
                "planted_details": planted_total,
                "check_before_mean": round(statistics.mean(before), 3),
                "check_before_min": round(min(before), 3),
                "check_after_mean": round(statistics.mean(after), 3),
                "check_after_min": round(min(after), 3),
                "planted_retention_after": round(planted_after / planted_total, 3),
                "summaries_over_cap": over_cap,
                "llm_calls": calls,
                "usage": usage.to_record(),
            }
    return results


def cache_saving(usage: dict[str, int]) -> dict[str, Any]:
    """The lossy mode's LLM cost with the cache, and the same tokens without it."""
    price = DEFAULT_PRICES["claude-haiku-4-5"]
    cached = cost_usd(
        price,
        usage["input_tokens"],
        usage["output_tokens"],
        usage["cache_creation_tokens"],
        usage["cache_read_tokens"],
    )
    uncached_input = (
        usage["input_tokens"] + usage["cache_creation_tokens"] + usage["cache_read_tokens"]
    )
    plain = cost_usd(price, uncached_input, usage["output_tokens"])
    assert cached is not None and plain is not None
    return {
        "with_cache_usd": round(cached, 6),
        "without_cache_usd": round(plain, 6),
        "saving": round(1 - cached / plain, 3) if plain else 0.0,
    }


def pins_over_rounds(rounds: int, scratch: Path) -> dict[str, Any]:
    """``rounds`` compactions of one workspace with keep_first=1 and two flagged pins."""
    messages, _ = conversation(999)
    messages[7]["pinned"] = True
    messages[12]["pinned"] = True
    folder = scratch / "pins"
    write_workspace(folder, messages)
    original = (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)
    pins = [original[0], original[7], original[12]]
    settings = settings_for("extractive", "", keep_first=1)
    lost = over_cap = 0
    for round_number in range(rounds):
        more, _ = conversation(1000 + round_number)
        with (folder / "conversation.jsonl").open("a") as out:
            for message in more[:20]:
                message["id"] = f"r{round_number}-{message['id']}"
                out.write(json.dumps(message, separators=(",", ":")) + "\n")
        result = run(folder, settings)
        assert result.outcome == "completed", result.reason
        lines = (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)
        lost += sum(1 for pin in pins if pin not in lines[1:4])
        over_cap += estimate_text_tokens(summary_text(folder)) > CAP
    return {"rounds": rounds, "pins": len(pins), "pins_lost": lost, "summaries_over_cap": over_cap}


def check_cost(
    count: int,
    scratch: Path,
    messages: int = 40,
    filler: tuple[int, int] = (4, 7),
    repeats: int = 1,
) -> dict[str, Any]:
    """The retention check's wall time inside real extractive jobs, against the job's.

    Each of ``count`` conversations is compacted ``repeats`` times (a fresh copy each
    time). The share is the median check time over the median job time: a single job's
    ratio swings with how long its fsyncs wait on the disk, the check's own time does not.
    A job's time is ``run_job``'s, alone: the archive index a job updates in a thread once
    it has returned is finished before the next job starts, not timed inside it. The job's
    CPU time (the process's) gives a second share that the disk does not move: the check
    never waits, so its wall time is CPU time.
    """
    spent = [0.0]

    def timed(function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - started

        return wrapper

    # The job looks these names up in the module at call time: wrapping them there times
    # the real calls inside the real job.
    originals = {name: getattr(summary_module, name) for name in CHECK_FUNCTIONS}
    for name, function in originals.items():
        setattr(summary_module, name, timed(function))
    job_times: list[float] = []
    job_cpu: list[float] = []
    check_times: list[float] = []
    sizes: list[int] = []
    try:
        settings = settings_for("extractive", "")
        for seed in range(count):
            lines, _ = conversation(seed, messages, filler)
            for repeat in range(repeats):
                folder = scratch / f"cost-{messages}" / f"c{seed}-r{repeat}"
                write_workspace(folder, lines)
                _finish_background_work()
                spent[0] = 0.0
                started, cpu = time.perf_counter(), time.process_time()
                result = run(folder, settings)
                job_times.append(time.perf_counter() - started)
                job_cpu.append(time.process_time() - cpu)
                check_times.append(spent[0])
                sizes.append(result.tokens_before)
    finally:
        for name, function in originals.items():
            setattr(summary_module, name, function)
        _finish_background_work()
    job_median = statistics.median(job_times)
    cpu_median = statistics.median(job_cpu)
    check_median = statistics.median(check_times)
    deciles = statistics.quantiles(job_times, n=10)
    return {
        "jobs": len(job_times),
        "messages": messages,
        "tokens_before_median": statistics.median(sizes),
        "job_ms_median": round(job_median * 1000, 2),
        "job_ms_p10": round(deciles[0] * 1000, 2),
        "job_ms_p90": round(deciles[-1] * 1000, 2),
        "check_ms_median": round(check_median * 1000, 3),
        "check_ms_max": round(max(check_times) * 1000, 3),
        "check_share": round(check_median / job_median, 4),
        "job_cpu_ms_median": round(cpu_median * 1000, 2),
        "check_cpu_share": round(check_median / cpu_median, 4),
    }


def _finish_background_work() -> None:
    """Wait for the archive index updates that earlier jobs left running."""
    for thread in threading.enumerate():
        if thread.name == "memoryd-index":
            thread.join()


def render(report: dict[str, Any]) -> str:
    """The figures as tables, for people."""
    rows = [
        [
            mode,
            figures["planted_details"],
            figures["check_before_mean"],
            figures["check_before_min"],
            figures["check_after_mean"],
            figures["check_after_min"],
            figures["planted_retention_after"],
            figures["summaries_over_cap"],
            figures["llm_calls"],
        ]
        for mode, figures in report["quality"].items()
    ]
    headers = ["mode", "planted", "before", "before min", "after", "after min"]
    headers += ["planted kept", "over cap", "LLM calls"]
    cost_rows = [
        [
            c["messages"],
            c["tokens_before_median"],
            c["jobs"],
            f"{c['job_ms_median']} ({c['job_ms_p10']}-{c['job_ms_p90']})",
            f"{c['check_ms_median']} (max {c['check_ms_max']})",
            f"{c['check_share']:.1%}",
            c["job_cpu_ms_median"],
            f"{c['check_cpu_share']:.1%}",
        ]
        for c in report["check_cost"]
    ]
    cost_headers = ["messages", "tokens", "jobs", "job ms median (p10-p90)", "check ms median"]
    cost_headers += ["share (median / median)", "job CPU ms median", "share of CPU"]
    pins, cache = report["pins"], report["cache"]
    return "\n\n".join(
        [
            common.table(headers, rows),
            common.table(cost_headers, cost_rows),
            f"pins: {pins['pins']} pinned messages, {pins['rounds']} compactions, "
            f"{pins['pins_lost']} lost, {pins['summaries_over_cap']} summaries over the cap",
            f"prompt cache (lossy mode, claude-haiku-4-5 prices): ${cache['with_cache_usd']} "
            f"with, ${cache['without_cache_usd']} without, saving {cache['saving']:.1%}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--drop", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument(
        "--repeats", type=int, default=5, help="jobs per conversation for the check's cost"
    )
    parser.add_argument(
        "--check-dir",
        type=Path,
        help="where the jobs that time the check run (default: the scratch folder on the "
        "repository's filesystem; a tmpfs such as /dev/shm takes the disk out of the job)",
    )
    args = parser.parse_args(argv)
    configure_logging("json", "warning", sys.stderr)
    common.install_exit_handlers()
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(common.scratch("quality"))
        report: dict[str, Any] = {
            "quality": quality(
                ["extractive", "lossy", "fluent"], args.conversations, args.drop, scratch
            )
        }
        report["quality"]["extractive, tight cap"] = quality(
            ["extractive"], args.conversations, args.drop, scratch, cap=TIGHT_CAP
        )["extractive"]
        report["cache"] = cache_saving(report["quality"]["lossy"]["usage"])
        report["pins"] = pins_over_rounds(args.rounds, scratch)
        jobs_in = scratch
        if args.check_dir is not None:
            jobs_in = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.check_dir)))
        report["check_cost"] = [
            check_cost(args.conversations, jobs_in, repeats=args.repeats),
            *(
                check_cost(
                    args.conversations,
                    jobs_in,
                    messages=messages,
                    filler=(20, 40),
                    repeats=max(1, args.repeats // 2),
                )
                for messages in (150, 400)
            ),
        ]
    print(render(report))
    print(f"raw figures: {common.save('quality', report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
