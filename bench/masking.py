"""Masking: old tool outputs leave the context first — masking on against off, same run.

**Jobs.** The generated agent loops of ``bench/agent_loops.py`` (autonomous, interactive,
text-mode) and, with ``--public DIR``, the public transcripts ``bench/public_transcripts.py``
reads, each written to a workspace at 95% of its budget; one job per strategy runs as
the daemon would (``run_job``, usage trigger, extractive backend), once with
``[masking]`` at its defaults and once with ``masking.enabled = false``. Per strategy,
shape and setting:

- **old facts live**: of the probe facts that only the old part held (found in the first
  60% of the messages and not in the newest 40%: paths, commands, error names,
  identifiers, ``line N``, the task), the share whose text is still in the live file;
- **task kept**: the task's line still in the live file, byte for byte;
- **API valid**: the API view breaks no rule of the strict fake Messages API;
- **lossless**: jobs after which every original line is once in the live file or the
  archive, byte for byte (a masked line stands for its archived original);
- **summarized**: jobs that wrote a summary (masking on: those where masking was not
  enough);
- **job CPU**: the median CPU time of a job with masking over that without (same
  transcripts).

Targets: old facts live >= 0.85 with masking (autonomous and text-mode), task kept,
API valid and lossless 100%.

**Replay.** A 300-turn autonomous loop (600 messages) is appended one message at a time
to a workspace that a real daemon watches (anthropic backend against the strict fake
Messages API of ``tests/fakes/fake_anthropic.py``, echo answers), once with masking and once
without. Counted from the fake server and the receipts: LLM requests, input tokens sent
to the summarizer, jobs, the daemon's and its workers' CPU, the highest usage seen.
Targets: requests and input tokens each >= 2x fewer with masking; CPU no worse.

**Freed by kind.** With ``--public DIR``, per file (every message of it, not cut at the
last output): its tokens as memoryd counts them, the images and documents it holds and
their tokens (and what their base64 would have counted as text), the share of its
characters that are tool inputs, and the share of its tokens one masking at the defaults
frees (``keep_recent`` 3, the task pinned) by kind: tool outputs alone, then with the
large fields of old calls' inputs, then with old user turns' media (and the image of a
masked tool result). ``--freed-only`` measures only this (seconds).

**A local model.** The jobs use the extractive backend unless ``--backend openai
--base-url URL`` names an OpenAI-compatible server (a real ``llama-server``:
``bench/real_server.py``); run the same files once each way to compare the old facts a
local model's summaries keep with the offline summarizer's. ``--strategy`` limits the
strategies (repeatable).

    python bench/masking.py [--transcripts 4] [--public DIR] [--turns 300] [--json]
    python bench/masking.py --public DIR --freed-only
    python bench/masking.py --transcripts 0 --public DIR --no-replay --strategy narrative \
        --backend openai --base-url http://127.0.0.1:8080/v1 --context-window 8192
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import _common as common
from agent_loops import STRATEGIES, USAGE, cases, view_problem
from agent_transcripts import Fact, Transcript, generate, message_text, occurs, write_workspace
from daemon_harness import llm_env, read_state
from fake_anthropic import FakeAnthropic, Reply

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.compaction.masking.decide import plan_masking
from memoryd.compaction.masking.rules import MaskRules
from memoryd.config.settings import load_settings
from memoryd.conversation.lines import Line, append_message, split_lines
from memoryd.conversation.pins import pinned_indices
from memoryd.daemon.logs import configure_logging
from memoryd.media import media_in
from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace

OLD_SHARE = 0.6
"""The old part of a transcript: its first 60% of messages."""
MAX_LINE_BYTES = 8 << 20
SETTINGS = ("on", "off")


@dataclass
class JobFigures:
    """One job on one transcript, masking on or off."""

    source: str
    strategy: str
    shape: str
    name: str
    masking: str
    outcome: str
    old_facts: int
    old_facts_live: int
    task_kept: bool
    api_valid: bool
    lossless: bool
    summarized: bool
    masked: int
    cpu_s: float
    reason: str = ""
    """What the job did or why it failed (its receipt's reason)."""


def old_facts(transcript: Transcript) -> list[Fact]:
    """The facts only the old part holds: in its first 60% of messages, not in the rest
    (each at the first message that holds it)."""
    cut = math.ceil(len(transcript.messages) * OLD_SHARE)
    newest = "\n".join(message_text(m) for m in transcript.messages[cut:])
    found = {f.text: f for f in reversed(transcript.facts) if f.index < cut}
    return sorted((f for f in found.values() if not occurs(f.text, newest)), key=lambda f: f.index)


def is_live(fact: Fact, original: list[bytes], live: set[bytes], live_text: str) -> bool:
    """A fact is live when the message that holds it is, byte for byte, or its text is in
    the live file (a summary or a placeholder holds it); the task's phrase is taken from
    its message in a normal form (no backquotes), so the first test counts there."""
    return original[fact.index] in live or occurs(fact.text, live_text)


def _archived(folder: Path) -> list[bytes]:
    archive = Workspace(folder).archive_dir
    files = sorted(archive.glob("*.jsonl")) if archive.is_dir() else []
    return [line for f in files for line in f.read_bytes().splitlines(keepends=True)]


def run_one(
    folder: Path,
    transcript: Transcript,
    strategy: str,
    masking: str,
    source: str,
    name: str,
    backend: dict[str, Any] | None = None,
) -> JobFigures:
    """Write ``transcript``, run one usage-triggered job, measure what stays live;
    ``backend`` holds the summarizer's settings (default: the extractive backend)."""
    conversation = write_workspace(folder, transcript) / "conversation.jsonl"
    original = transcript.lines
    tokens = sum(line.tokens for line in split_lines(b"".join(original), MAX_LINE_BYTES))
    overrides = {
        "strategy": strategy,
        "token_limit": math.ceil(tokens / USAGE),
        "summarizer.backend": "extractive",
        "drain_seconds": 0,
        "index_archive": False,
        "masking.enabled": masking == "on",
        **(backend or {}),
    }
    settings = load_settings(overrides=overrides, env={"XDG_CONFIG_HOME": str(folder)}).settings
    started = time.process_time()
    result = run_job(JobRequest(folder, settings, reason="trigger"))
    cpu_s = time.process_time() - started
    live = conversation.read_bytes().splitlines(keepends=True)
    everything = [*live, *_archived(folder)]
    plain = [x for x in everything if b'"isMasked"' not in x]
    live_text = "\n".join(message_text(json.loads(x)) for x in live)
    facts = old_facts(transcript)
    return JobFigures(
        source=source,
        strategy=strategy,
        shape=transcript.shape,
        name=name,
        masking=masking,
        outcome=result.outcome,
        old_facts=len(facts),
        old_facts_live=sum(is_live(f, original, set(live), live_text) for f in facts),
        task_kept=original[0] in set(live),
        api_valid=view_problem(folder) is None,
        lossless=not (Counter(original) - Counter(plain)),
        summarized=result.summarized_count > 0,
        masked=result.masked_messages,
        cpu_s=cpu_s,
        reason=result.reason or "",
    )


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 3) if whole else None


def cell(jobs: list[JobFigures]) -> dict[str, Any]:
    """The figures of one source, strategy, shape and setting."""
    return {
        "jobs": len(jobs),
        "old_facts": sum(j.old_facts for j in jobs),
        "old_facts_live": _share(
            sum(j.old_facts_live for j in jobs), sum(j.old_facts for j in jobs)
        ),
        "task_kept": _share(sum(j.task_kept for j in jobs), len(jobs)),
        "api_valid": _share(sum(j.api_valid for j in jobs), len(jobs)),
        "lossless": _share(sum(j.lossless for j in jobs), len(jobs)),
        "summarized": sum(j.summarized for j in jobs),
        "cpu_ms_median": round(statistics.median(j.cpu_s for j in jobs) * 1000, 1),
    }


def measure_jobs(
    count: int,
    public: Path | None,
    scratch: Path,
    backend: dict[str, Any] | None = None,
    strategies: tuple[str, ...] = STRATEGIES,
) -> list[JobFigures]:
    """Every strategy on every transcript, masking on and off."""
    sources: list[tuple[str, str, Transcript]] = [
        ("generated", f"{c.shape}-{c.seed}", generate(c.shape, c.seed, c.messages, tokens=c.tokens))
        for c in cases(count, quick=False)
    ]
    if public is not None:
        from public_formats import convert, shape_of, transcripts
        from public_transcripts import SUFFIXES

        files = sorted(p for p in public.iterdir() if p.name.endswith(SUFFIXES))
        for seed, path in enumerate(files):
            name = path.name.split(".")[0]
            try:
                messages = convert(path.read_text(encoding="utf-8"), name)[1]
                done = transcripts(messages, shape_of(messages), seed)[0]
            except ValueError as exc:  # no tool output after the task: nothing to mask
                print(f"{path.name}: left out ({exc})", file=sys.stderr)
                continue
            sources.append(("public", f"{seed}-{name}", done))
    jobs = []
    for strategy in strategies:
        for source, name, transcript in sources:
            for masking in SETTINGS:
                folder = scratch / f"{strategy}-{source}-{name}-{masking}"
                jobs.append(run_one(folder, transcript, strategy, masking, source, name, backend))
        print(f"{strategy}: {len(jobs)} jobs so far", file=sys.stderr)
    return jobs


def job_cells(jobs: list[JobFigures]) -> dict[str, dict[str, Any]]:
    """Per source, strategy and shape: both settings, and job CPU on over off."""
    keys = sorted(
        {(j.source, j.strategy, j.shape) for j in jobs},
        key=lambda k: (k[0], STRATEGIES.index(k[1]), k[2]),
    )
    cells = {}
    for source, strategy, shape in keys:
        group = [j for j in jobs if (j.source, j.strategy, j.shape) == (source, strategy, shape)]
        on = [j for j in group if j.masking == "on"]
        off = {j.name: j for j in group if j.masking == "off"}
        ratios = [j.cpu_s / off[j.name].cpu_s for j in on if off[j.name].cpu_s > 0]
        cells[f"{source} {strategy}/{shape}"] = {
            "on": cell(on),
            "off": cell(list(off.values())),
            "cpu_on_over_off": round(statistics.median(ratios), 2) if ratios else None,
        }
    return cells


def caught_up(folder: Path) -> bool:
    """The daemon counted every line of the conversation and runs no job on it."""
    lines = (folder / "conversation.jsonl").read_bytes().count(b"\n")
    state = read_state(folder) or {}
    return state.get("messages") == lines and state.get("summarizing") is False


def replay(turns: int, masking: str, fake: FakeAnthropic, scratch: Path) -> dict[str, Any]:
    """Append a ``turns``-turn autonomous loop to a watched workspace, message by message."""
    transcript = generate("autonomous", 300, 2 * turns + 1)
    root = scratch / f"replay-{masking}" / "root"
    folder = root / "agent"
    folder.mkdir(parents=True)
    limit = 40_000
    env = llm_env(
        fake.base_url,
        token_limit=str(limit),
        coalesce_ms="10",
        masking__enabled="true" if masking == "on" else "false",
        summarizer__min_retention="0",
    )
    before = len(fake.message_requests)
    daemon = common.Daemon(root, env)
    peak = 0.0
    started = time.monotonic()
    try:
        daemon.start()
        daemon.wait_ready()
        for count, message in enumerate(transcript.messages, start=1):
            append_message(folder, str(message["role"]), message["content"])
            seen = functools.partial(caught_up, folder)
            common.wait_until(seen, 120, f"the daemon saw message {count}")
            peak = max(peak, (read_state(folder) or {}).get("usage_ratio", 0.0))
        cpu = common.cpu_seconds(daemon.pid) + sum(
            common.cpu_seconds(pid) for pid in common.descendants(daemon.pid)
        )
    finally:
        daemon.kill_all()
    receipts = read_receipts(Workspace(folder))
    return {
        "messages": len(transcript.messages),
        "tokens": transcript.tokens,
        "token_limit": limit,
        "jobs": len(receipts),
        "maskings": sum(r.masked is not None for r in receipts),
        "summaries": sum(r.summarized is not None for r in receipts),
        "llm_requests": len(fake.message_requests) - before,
        "llm_calls_receipts": sum(r.llm.calls for r in receipts),
        "input_tokens": sum(
            r.llm.input_tokens + r.llm.cache_read_tokens + r.llm.cache_creation_tokens
            for r in receipts
        ),
        "cpu_s": round(cpu, 2),
        "peak_usage": peak,
        "wall_s": round(time.monotonic() - started, 1),
    }


FREED_RULES = {
    "outputs": MaskRules(),
    "inputs": MaskRules(tool_inputs=True),
    "media": MaskRules(tool_inputs=True, media=True),
}
"""What each step masks: outputs alone, then old calls' large inputs, then media."""


def _input_chars(lines: list[Line]) -> int:
    return sum(
        len(json.dumps(block.get("input"), ensure_ascii=False, separators=(",", ":")))
        for line in lines
        if line.role == "assistant"
        for block in line.blocks
        if block.get("type") == "tool_use"
    )


def freed_by_kind(name: str, data: bytes) -> dict[str, Any]:
    """One transcript's tokens, media and the tokens a default masking frees by kind."""
    lines = list(split_lines(data, MAX_LINE_BYTES))
    tokens = sum(line.tokens for line in lines)
    media = [m for x in lines if x.message for m in media_in(x.message.get("content"))]
    base64_chars = sum(
        len(json.dumps(block, separators=(",", ":")))
        for x in lines
        for block in _media_blocks(x.message.get("content") if x.message else None)
    )
    pinned = pinned_indices(lines, 1)
    freed = {kind: plan_masking(lines, 3, pinned, rules) for kind, rules in FREED_RULES.items()}
    outputs, inputs, everything = (freed[k].freed_tokens for k in FREED_RULES)
    chars = sum(x.length for x in lines)
    return {
        "name": name,
        "messages": len(lines),
        "tokens": tokens,
        "images": sum(m.kind == "image" for m in media),
        "documents": sum(m.kind == "document" for m in media),
        "media_tokens": sum(m.tokens for m in media),
        "media_as_text_tokens": (base64_chars + 3) // 4,
        "input_chars_share": _share(_input_chars(lines), chars),
        "freed_outputs": outputs,
        "freed_inputs": inputs - outputs,
        "freed_media": everything - inputs,
        "inputs_masked": freed["media"].inputs,
        "media_masked": freed["media"].media,
    }


def _media_blocks(content: Any) -> list[dict[str, Any]]:
    found = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") in ("image", "document"):
            found.append(block)
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            found += _media_blocks(block.get("content"))
    return found


def measure_freed(public: Path) -> list[dict[str, Any]]:
    """:func:`freed_by_kind` of every Claude Code session file in ``public`` (sorted)."""
    from conftest import encode_lines
    from public_formats import convert

    rows = []
    for path in sorted(public.glob("*.jsonl")):
        name = path.name.removesuffix(".jsonl")
        kind, messages = convert(path.read_text(encoding="utf-8"), name)
        if kind == "claude-code" and len(messages) > 1:
            rows.append(freed_by_kind(name, encode_lines(messages)))
    return rows


def freed_total(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The files together: each figure summed, the shares of the summed tokens."""
    keys = [k for k in rows[0] if k not in ("name", "input_chars_share")] if rows else []
    total: dict[str, Any] = {"name": f"all {len(rows)} files"}
    total |= {k: sum(r[k] for r in rows) for k in keys}
    return total


def render_freed(rows: list[dict[str, Any]]) -> str:
    headers = ["file", "messages", "tokens", "images / docs", "media tokens (as base64)"]
    headers += ["inputs % of chars", "freed: outputs", "+ inputs", "+ media"]
    body = []
    for r in [*rows, freed_total(rows)]:
        tokens = r["tokens"]
        share = r.get("input_chars_share")
        body.append(
            [
                re.sub(r"([0-9a-f]{8})-[0-9a-f-]{27}", r"\1", r["name"]),
                r["messages"],
                f"{tokens:,}",
                f"{r['images']} / {r['documents']}",
                f"{r['media_tokens']:,} ({r['media_as_text_tokens']:,})",
                "" if share is None else f"{share:.0%}",
                f"{_percent(_share(r['freed_outputs'], tokens))}",
                f"{_percent(_share(r['freed_inputs'], tokens))} ({r['inputs_masked']} fields)",
                f"{_percent(_share(r['freed_media'], tokens))} ({r['media_masked']})",
            ]
        )
    return common.table(headers, body)


def render_jobs(cells: dict[str, dict[str, Any]]) -> str:
    headers = ["source strategy/shape", "jobs", "old facts live on / off", "task kept"]
    headers += ["API valid", "lossless", "summarized on / off", "job CPU on/off"]
    rows = []
    for name, c in cells.items():
        on, off = c["on"], c["off"]
        rows.append(
            [
                name,
                on["jobs"],
                f"{_percent(on['old_facts_live'])} / {_percent(off['old_facts_live'])}"
                f" of {on['old_facts']}",
                f"{_percent(on['task_kept'])} / {_percent(off['task_kept'])}",
                f"{_percent(on['api_valid'])} / {_percent(off['api_valid'])}",
                f"{_percent(on['lossless'])} / {_percent(off['lossless'])}",
                f"{on['summarized']} / {off['summarized']}",
                "n/a" if c["cpu_on_over_off"] is None else f"{c['cpu_on_over_off']:.2f}x",
            ]
        )
    return common.table(headers, rows)


def render_replay(runs: dict[str, dict[str, Any]]) -> str:
    keys = ["jobs", "maskings", "summaries", "llm_requests", "input_tokens", "cpu_s", "peak_usage"]
    rows = [[key, runs["on"][key], runs["off"][key]] for key in keys]
    rows.append(
        [
            "off / on",
            f"requests {runs['off']['llm_requests'] / max(1, runs['on']['llm_requests']):.1f}x",
            f"input tokens {runs['off']['input_tokens'] / max(1, runs['on']['input_tokens']):.1f}x",
        ]
    )
    return common.table(["replay", "masking on", "masking off"], rows)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--transcripts", type=int, default=4, help="generated ones per shape")
    parser.add_argument("--public", type=Path, metavar="DIR", help="public transcript files")
    parser.add_argument("--turns", type=int, default=300, help="turns of the daemon replay")
    parser.add_argument("--no-replay", action="store_true", help="only the jobs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--freed-only", action="store_true", help="only what masking frees by kind (--public)"
    )
    parser.add_argument("--strategy", choices=STRATEGIES, action="append", help="(repeatable)")
    parser.add_argument("--backend", choices=("extractive", "openai"), default="extractive")
    parser.add_argument("--base-url", default="", help="the OpenAI-compatible server (openai)")
    parser.add_argument("--model", default="local-model", help="the model name sent (openai)")
    parser.add_argument("--context-window", type=int, default=0, help="its context (openai)")
    args = parser.parse_args(argv)
    if args.backend == "openai" and not args.base_url:
        print("masking: --backend openai needs --base-url URL", file=sys.stderr)
        return 2
    backend: dict[str, Any] = {"summarizer.backend": args.backend}
    if args.backend == "openai":
        backend |= {
            "openai.base_url": args.base_url,
            "openai.model": args.model,
            "openai.context_window": args.context_window,
        }
    if args.public is not None and not args.public.is_dir():
        print(f"masking: {args.public} is not a folder", file=sys.stderr)
        return 2
    configure_logging("json", "warning", sys.stderr)
    common.install_exit_handlers()
    report: dict[str, Any] = {"machine": common.machine(), "backend": backend}
    if args.public is not None:
        report["freed"] = measure_freed(args.public)
    if args.freed_only:
        if args.public is None:
            print("masking: --freed-only needs --public DIR", file=sys.stderr)
            return 2
        print(json.dumps(report, indent=2) if args.json else render_freed(report["freed"]))
        print(f"raw figures: {common.save('masking-freed', report)}", file=sys.stderr)
        return 0
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(common.scratch("masking"))
        strategies = tuple(args.strategy or STRATEGIES)
        jobs = measure_jobs(args.transcripts, args.public, scratch, backend, strategies)
        report["cells"] = job_cells(jobs)
        report["jobs"] = [asdict(j) for j in jobs]
        common.save("masking", report)  # the jobs' figures stay should the replay fail
        if not args.no_replay:
            fake = stack.enter_context(FakeAnthropic())
            fake.set_default(Reply.echo())
            report["replay"] = {s: replay(args.turns, s, fake, scratch) for s in SETTINGS}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_jobs(report["cells"]))
        if report.get("freed"):
            print()
            print(render_freed(report["freed"]))
        if "replay" in report:
            print()
            print(render_replay(report["replay"]))
    print(f"raw figures: {common.save('masking', report)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
