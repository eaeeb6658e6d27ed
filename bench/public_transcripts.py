"""Public agent transcripts: the agent-loop figures on real trajectories.

The same measurement as ``bench/agent_loops.py`` (its docstring defines the columns and
targets: below trigger, API valid, orphaned running tool calls, task kept verbatim,
facts kept >= 0.6, recall@5 of the facts gone >= 0.98, lost lines 0), on transcripts that
real coding agents wrote instead of generated ones. DIR holds the raw files as their
projects publish them: SWE-agent ``.traj``, mini-swe-agent ``.traj.json``, OpenHands event
lists, Claude Code session ``.jsonl``; ``tests/fakes/public_formats.py`` picks the format from
each file's content, converts it to ``conversation.jsonl`` lines and finds the probe
facts. Each transcript is cut after its last tool output and runs as written and with
that output withheld (the tool still running), at 95% of its budget, once per strategy
(extractive backend). No transcript is part of this repository: bench/README.md says
where the evaluated ones come from.

    python bench/public_transcripts.py DIR [--max-recall 50] [--json] [--dir D]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import _common as common
from agent_loops import STRATEGIES, USAGE, JobFigures, cell, render, run_one
from agent_transcripts import SHAPES, Transcript
from public_formats import convert, shape_of, transcripts

from memoryd.daemon.logs import configure_logging

SUFFIXES = (".traj", ".json", ".jsonl")


def load(folder: Path) -> list[tuple[str, str, Transcript, Transcript]]:
    """Each transcript file in ``folder`` (sorted by name): its name, format, and the
    transcript as written and with its last tool call running."""
    found = []
    for seed, path in enumerate(sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIXES))):
        name = path.name.split(".")[0]
        kind, messages = convert(path.read_text(encoding="utf-8"), name)
        done, running = transcripts(messages, shape_of(messages), seed)
        found.append((name, kind, done, running))
    return found


def describe(loaded: list[tuple[str, str, Transcript, Transcript]]) -> list[dict[str, Any]]:
    """What was evaluated: per file its format, shape, messages, tokens and facts."""
    return [
        {
            "name": name,
            "format": kind,
            "shape": done.shape,
            "messages": len(done.messages),
            "tokens": done.tokens,
            "facts": len(done.facts),
            "fact_kinds": dict(Counter(f.kind for f in done.facts)),
        }
        for name, kind, done, _ in loaded
    ]


def measure(folder: Path, max_recall: int, scratch: Path) -> dict[str, Any]:
    """Every strategy on every transcript of ``folder``, as written and running."""
    loaded = load(folder)
    config_home = scratch / "config"
    jobs: list[JobFigures] = []
    formats: dict[tuple[str, int], str] = {}
    for strategy in STRATEGIES:
        for name, kind, done, running in loaded:
            for transcript in (done, running):
                state = "running" if transcript.pending is not None else "done"
                folder_name = f"{strategy}-{name}-{state}"
                job = run_one(scratch / folder_name, transcript, strategy, config_home, max_recall)
                formats[(job.shape, job.seed)] = kind
                jobs.append(job)
        print(f"{strategy}: {len(jobs)} jobs so far", file=sys.stderr)
    cells = {
        f"{strategy}/{shape}": cell([j for j in jobs if (j.strategy, j.shape) == (strategy, shape)])
        for strategy in STRATEGIES
        for shape in SHAPES
        if any(j.shape == shape for j in jobs)
    }
    by_format = {
        f"{strategy}/{kind}": cell(
            [j for j in jobs if j.strategy == strategy and formats[(j.shape, j.seed)] == kind]
        )
        for strategy in STRATEGIES
        for kind in sorted(set(formats.values()))
    }
    return {
        "usage": USAGE,
        "transcripts": describe(loaded),
        "cells": cells,
        "by_format": by_format,
        "jobs": [asdict(j) | {"format": formats[(j.shape, j.seed)]} for j in jobs],
    }


def overview(report: dict[str, Any]) -> str:
    """The transcripts per format: how many, their shapes, messages and tokens."""
    rows = []
    for kind in sorted({t["format"] for t in report["transcripts"]}):
        mine = [t for t in report["transcripts"] if t["format"] == kind]
        shapes = Counter(t["shape"] for t in mine)
        messages = [t["messages"] for t in mine]
        tokens = [t["tokens"] for t in mine]
        rows.append(
            [
                kind,
                len(mine),
                ", ".join(f"{n} {shape}" for shape, n in sorted(shapes.items())),
                f"{min(messages)}-{max(messages)} (median {statistics.median(messages):g})",
                f"{min(tokens):,}-{max(tokens):,}",
                sum(t["facts"] for t in mine),
            ]
        )
    return common.table(["format", "files", "shapes", "messages", "tokens", "facts"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("folder", type=Path, metavar="DIR", help="the raw transcript files")
    parser.add_argument("--max-recall", type=int, default=50, help="recall queries per job")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--dir",
        type=Path,
        help="where the workspaces are written (default: a scratch folder under bench/results)",
    )
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"public_transcripts: {args.folder} is not a folder", file=sys.stderr)
        return 2
    configure_logging("json", "warning", sys.stderr)
    common.install_exit_handlers()
    with contextlib.ExitStack() as stack:
        if args.dir is None:
            scratch = stack.enter_context(common.scratch("public_transcripts"))
        else:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir)))
        report = measure(args.folder, args.max_recall, scratch)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(overview(report))
        print()
        print(render(report))
        print()
        print(render({"cells": report["by_format"]}))
    print(f"raw figures: {common.save('public_transcripts', report)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
