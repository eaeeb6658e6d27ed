"""``memoryd summarize``: one job in the foreground."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.cli.options import load_config, log_to_stderr

if TYPE_CHECKING:
    from memoryd.compaction.job.request import JobResult

EXIT_BY_OUTCOME = {
    "completed": 0,
    "nothing_to_do": 0,
    "dry_run": 0,
    "ineffective": 0,
    "failed": 1,
    "busy": 1,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workspace, ``--force``, ``--dry-run`` and ``--strategy``."""
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--force", action="store_true", help="even below the trigger")
    parser.add_argument("--dry-run", action="store_true", help="say what would happen")
    parser.add_argument("--strategy", choices=("narrative", "rolling", "checkpoint"))


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run one job on the workspace and print one line saying what it did."""
    from memoryd.compaction.job.request import JobRequest, summarizer_env
    from memoryd.compaction.job.run import run_job
    from memoryd.config.settings import settings_for_workspace
    from memoryd.files.paths import check_workspace

    log_to_stderr(args)
    loaded = load_config(args)
    workspace = check_workspace(args.workspace)
    settings = settings_for_workspace(loaded.settings, workspace)
    if args.strategy:
        settings = settings.model_copy(update={"strategy": args.strategy})
    on_terminal = sys.stderr.isatty()

    def progress(stage: str) -> None:
        if on_terminal:
            print(f"memoryd: {stage}…", file=sys.stderr, flush=True)

    result = run_job(
        JobRequest(
            workspace=workspace,
            settings=settings,
            force=args.force,
            dry_run=args.dry_run,
            env=summarizer_env(os.environ),
        ),
        progress=progress,
    )
    print(describe_result(result), file=out)
    return EXIT_BY_OUTCOME[result.outcome]


def _receipt_figures(result: JobResult) -> str:
    """Retention, pins and cost from the job's receipt (what ``memoryd history`` lists)."""
    receipt = result.receipt
    if receipt is None:
        return ""
    parts = []
    if receipt.retention is not None:
        parts.append(f"retention {receipt.retention.before:.2f} → {receipt.retention.after:.2f}")
    if receipt.pins_kept:
        parts.append(f"{receipt.pins_kept} pinned kept")
    if receipt.llm.calls:
        cost = "unknown price" if receipt.cost_usd is None else f"${receipt.cost_usd:.4f}"
        parts.append(f"{receipt.llm.calls} LLM calls, {cost}")
    return "; " + ", ".join(parts) if parts else ""


def describe_result(result: JobResult) -> str:
    """One line saying what a job did, in words and figures."""
    if result.outcome == "ineffective" and result.archive is None:
        return f"{result.workspace}: nothing done: {result.reason} (summarize_ineffective)"
    if result.outcome in ("completed", "ineffective"):
        text = (
            f"{result.workspace}: {result.reason}; {result.messages_before} → "
            f"{result.messages_after} messages, ~{result.tokens_before:,} → "
            f"~{result.tokens_after:,} tokens ({result.backend}); originals in {result.archive}"
        )
        text += _receipt_figures(result)
        if result.outcome == "ineffective":
            text += "; still above the trigger (summarize_ineffective)"
        return text
    if result.outcome == "dry_run":
        return f"{result.workspace}: dry run: {result.reason}"
    if result.outcome == "nothing_to_do":
        return f"{result.workspace}: nothing to do: {result.reason}"
    return f"{result.workspace}: {result.outcome}: {result.reason}"
