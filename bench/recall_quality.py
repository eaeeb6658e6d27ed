"""Recall quality: does ``memoryd.search.archive`` find what an agent asks for, in its own words,
and how fast is a query on a large archive?

1. Quality. Transcripts from ``tests/fakes/agent_transcripts.py`` in its three shapes
   (``--seeds`` of each, ``--messages`` messages) are written to workspaces and compacted
   by one forced narrative job (extractive summarizer, ``token_limit`` a fifth of the
   conversation, ``keep_first = 0``), so that most of each, the task included, lies in
   the archive. Questions about the archived messages (``bench/recall_questions.py``):
   natural questions in a model's words, exact identifiers, paths and pasted error
   lines, each with the messages that answer it. recall@1 and recall@5: an answering
   message among the first 1 or 5 hits. ``--passage-chars`` measures other cuts of
   messages into passages (0: whole messages) on the same workspaces.
2. Speed. The 200 MB archive of ``bench/recall.py`` (216,161 messages of ~1 KB; kept in
   ``--cache`` between runs, its index too) is queried in-process with ``recall()`` for a
   word in one message and a word in nearly every message, interleaved with ``grep -F -c``
   over the same files, page cache warm: the median of ``--rounds`` each.

Targets: natural questions recall@5 >= 0.9; identifiers and error lines recall@1 >= 0.95;
on the 200 MB archive a rare word <= 50 ms and a word in nearly every message <= 150 ms
(median, in-process).

    python bench/recall_quality.py [--seeds 8] [--messages 300] [--mb 200] [--rounds 15]
                                   [--passage-chars 1000] [--cache DIR] [--no-speed] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common as common
import recall as archive_bench  # bench/recall.py: the 200 MB archive it measures
from agent_transcripts import SHAPES, Transcript, generate, write_workspace
from recall_questions import KINDS, Question, questions, recall_at

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import load_settings
from memoryd.daemon.logs import configure_logging
from memoryd.search import text as recall_text
from memoryd.search.archive import recall, update_index
from memoryd.workspace import Workspace

PER_KIND = {"natural": 10, "identifier": 6, "path": 6, "error": 6}
"""Questions of each kind asked about one transcript, at most."""
TARGETS = {"natural": ("recall@5", 0.9), "identifier": ("recall@1", 0.95)}
TARGETS |= {"error": ("recall@1", 0.95), "path": ("recall@1", 0.95)}
SPEED_TARGETS_MS = {"rare": 50.0, "most": 150.0}


def compact(folder: Path, transcript: Transcript, config_home: Path) -> set[int]:
    """Write ``transcript`` to ``folder``, summarize most of it; the archived indices."""
    write_workspace(folder, transcript)
    overrides = {
        "token_limit": max(2000, transcript.tokens // 5),
        "keep_first": 0,
        "summarizer.backend": "extractive",
        "drain_seconds": 0,
        "index_archive": False,
    }
    env = {"XDG_CONFIG_HOME": str(config_home)}
    settings = load_settings(overrides=overrides, env=env).settings
    result = run_job(JobRequest(folder, settings, force=True))
    assert result.outcome == "completed", result.reason
    index_of = {str(m["id"]): n for n, m in enumerate(transcript.messages)}
    archived: set[int] = set()
    for path in sorted(Workspace(folder).archive_dir.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            ident = json.loads(line).get("id")
            if ident in index_of:
                archived.add(index_of[ident])
    return archived


def build(scratch: Path, seeds: int, messages: int) -> list[tuple[Path, list[Question]]]:
    """The compacted workspaces and their questions."""
    cases = []
    for shape in SHAPES:
        for seed in range(seeds):
            transcript = generate(shape, seed, messages)
            folder = scratch / f"{shape}-{seed}"
            archived = compact(folder, transcript, scratch / "config")
            rng = random.Random(f"questions:{shape}:{seed}")
            cases.append((folder, questions(transcript, archived, PER_KIND, rng)))
    return cases


def ask(cases: list[tuple[Path, list[Question]]], passage_chars: int) -> dict[str, Any]:
    """Every question against indexes built with passages of ``passage_chars`` (0: whole
    messages); recall@1 and recall@5 by kind, the median query time, and the questions
    whose target measure missed."""
    memoryd_size = recall_text.PASSAGE_CHARS
    recall_text.PASSAGE_CHARS = passage_chars or 1 << 40
    try:
        return _ask(cases, passage_chars)
    finally:
        recall_text.PASSAGE_CHARS = memoryd_size


def _ask(cases: list[tuple[Path, list[Question]]], passage_chars: int) -> dict[str, Any]:
    asked: Counter[str] = Counter()
    at1: Counter[str] = Counter()
    at5: Counter[str] = Counter()
    misses: dict[str, list[str]] = {kind: [] for kind in KINDS}
    times: list[float] = []
    for folder, asking in cases:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{Workspace(folder).meta / 'index.sqlite'}{suffix}").unlink(missing_ok=True)
        update_index(folder)
        for question in asking:
            started = time.perf_counter()
            hits = [hit.id for hit in recall(folder, question.text, limit=5)]
            times.append(time.perf_counter() - started)
            asked[question.kind] += 1
            first, top5 = (recall_at(hits, question.answers, k) for k in (1, 5))
            at1[question.kind] += first
            at5[question.kind] += top5
            if not (top5 if TARGETS[question.kind][0] == "recall@5" else first):
                misses[question.kind].append(f"{folder.name}: {question.text}")
    return {
        "passage_chars": passage_chars,
        "kinds": {
            kind: {
                "asked": asked[kind],
                "recall@1": round(at1[kind] / asked[kind], 3) if asked[kind] else None,
                "recall@5": round(at5[kind] / asked[kind], 3) if asked[kind] else None,
            }
            for kind in KINDS
        },
        "query_ms_median": round(common.median(times) * 1000, 2),
        "misses": misses,
    }


def archive(cache: Path, mb: int) -> tuple[Path, list[Path]]:
    """The workspace with bench/recall.py's archive of ``mb`` MB, written once into
    ``cache``; its index is brought up to date (built when missing or old)."""
    workspace = cache / f"ws-{mb}mb"
    done = cache / f"ws-{mb}mb.done"
    if not done.exists():
        shutil.rmtree(workspace, ignore_errors=True)
        archive_bench.write_archive(workspace, mb)
        done.touch()
    started = time.perf_counter()
    update_index(workspace)
    print(f"index up to date in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return workspace, sorted(Workspace(workspace).archive_dir.glob("*.jsonl"))


def speed(cache: Path, mb: int, rounds: int) -> dict[str, Any]:
    """Median in-process ``recall()`` and ``grep -F -c`` per word, interleaved."""
    workspace, files = archive(cache, mb)
    words = {"rare": archive_bench.RARE, "some": archive_bench.SOME, "most": archive_bench.MOST}
    for path in files:  # warm the page cache
        path.read_bytes()
    times: dict[str, list[float]] = {f"{name}/{way}": [] for name in words for way in "rg"}
    counts = {}
    for _ in range(rounds):
        for name, word in words.items():
            started = time.perf_counter()
            recall(workspace, word)
            times[f"{name}/r"].append(time.perf_counter() - started)
            started = time.perf_counter()
            done = subprocess.run(["grep", "-F", "-c", word, *map(str, files)], capture_output=True)
            times[f"{name}/g"].append(time.perf_counter() - started)
            counts[name] = sum(int(line.rsplit(b":", 1)[1]) for line in done.stdout.splitlines())
    figures = {}
    for name, word in words.items():
        ms, grep_ms = (common.median(times[f"{name}/{way}"]) * 1000 for way in "rg")
        figures[name] = {
            "word": word,
            "messages": counts[name],
            "recall_ms": round(ms, 2),
            "grep_ms": round(grep_ms, 2),
            "ratio": round(ms / grep_ms, 2),
        }
    size = sum(path.stat().st_size for path in files)
    return {"archive_mb": round(size / (1 << 20), 1), "words": figures}


def render(report: dict[str, Any]) -> str:
    """The figures as tables, with the targets."""
    lines = []
    for run in report["quality"]:
        rows = [
            [kind, figures["asked"], figures["recall@1"], figures["recall@5"]]
            for kind, figures in run["kinds"].items()
        ]
        cut = run["passage_chars"] or "whole messages"
        lines += [f"passages of {cut} chars; query median {run['query_ms_median']} ms"]
        lines += [common.table(["kind", "asked", "recall@1", "recall@5"], rows), ""]
    first = report["quality"][0]["kinds"]
    for kind, (measure, target) in TARGETS.items():
        value = first[kind][measure]
        met = value is not None and value >= target
        lines.append(
            f"{kind} {measure} {value} (target >= {target}): {'met' if met else 'NOT met'}"
        )
    if "speed" in report:
        words = report["speed"]["words"]
        rows = [
            [f["word"], f["messages"], f["recall_ms"], f["grep_ms"], f["ratio"]]
            for f in words.values()
        ]
        lines += ["", f"{report['speed']['archive_mb']} MB archive, in-process recall()"]
        lines.append(
            common.table(["word", "messages", "recall ms", "grep -F -c ms", "x grep"], rows)
        )
        for name, target in SPEED_TARGETS_MS.items():
            value = words[name]["recall_ms"]
            lines.append(
                f"{words[name]['word']}: {value} ms (target <= {target:g}): "
                f"{'met' if value <= target else 'NOT met'}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8, help="transcripts of each shape")
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--passage-chars",
        default=str(recall_text.PASSAGE_CHARS),
        help="comma-separated passage sizes to compare, the first is memoryd's (0: whole)",
    )
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "memoryd-bench-recall"
    )
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    common.install_exit_handlers()
    configure_logging("console", "warning", sys.stderr)
    os.environ.pop("MEMORYD_CONFIG", None)
    report: dict[str, Any] = {}
    with common.scratch("recall-quality") as scratch:
        cases = build(scratch, args.seeds, args.messages)
        sizes = [int(size) for size in args.passage_chars.split(",")]
        report["quality"] = [ask(cases, size) for size in sizes]
    if not args.no_speed:
        args.cache.mkdir(parents=True, exist_ok=True)
        report["speed"] = speed(args.cache, args.mb, args.rounds)
    print(json.dumps(report, indent=2) if args.json else render(report))
    path = common.save("recall_quality", report)
    print(f"raw figures: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
