"""A job's masking stage in the shell: the decision of :mod:`memoryd.compaction.masking.decide`
applied to the snapshot, for a job that masking alone ends: what it writes and says,
committed and reported as any job is (:func:`memoryd.compaction.job.finish.commit_and_report`;
docs/design.md#masking).

Masking is one more list of parts for the job's one commit (:func:`memoryd.commit.rewrite.
rewrite`): the masked lines as new bytes, the rest as byte ranges of the snapshot, the
originals of the masked lines in the archive before the file changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import structlog

from memoryd.commit.rewrite import FaultHook, archive_name
from memoryd.compaction.job.finish import JobContext, Written, commit_and_report
from memoryd.compaction.job.request import JobResult, Progress
from memoryd.compaction.masking.decide import MaskingStage
from memoryd.conversation.pins import pinned_indices
from memoryd.errors import CommitAborted
from memoryd.published.heartbeat import HeartbeatManager

log = structlog.get_logger()


def masking_only(
    job: JobContext,
    stage: MaskingStage,
    failed: Callable[[str], JobResult],
    progress: Progress,
    fault: FaultHook | None,
) -> JobResult:
    """A job that masking alone ends (usage at its target, or no summary can follow):
    the dry run's words, or the commit and its report; ``failed`` reports a commit that
    could not be made (the conversation unchanged)."""
    if job.request.dry_run:
        then = "" if stage.decision == "enough" else ", then summarize"
        masking = stage.masking
        would = f"would mask {masking.what()} (~{stage.freed_tokens:,} tokens)"
        return replace(job.base, outcome="dry_run", reason=f"{would}{then}")
    if not job.request.heartbeat_started:
        HeartbeatManager(job.workspace).start_task(f"Masking {stage.masking.what()}")
    try:
        return _commit_masking(job, stage, progress, fault)
    except CommitAborted as exc:
        log.warning("summarize_failed", workspace=str(job.workspace.path), reason=str(exc))
        return failed(str(exc))
    except OSError as exc:
        return failed(f"file error: {exc.strerror or exc}")


def _commit_masking(
    job: JobContext, stage: MaskingStage, progress: Progress, fault: FaultHook | None
) -> JobResult:
    """Commit the masking, then report it as any job is (no LLM call, no summary)."""
    masking, lines = stage.masking, job.lines
    head = masking.applied(lines)
    result = commit_and_report(
        job,
        Written(
            parts=masking.parts(lines),
            archive_name=archive_name("conversation"),
            archived=list(masking.originals(lines)),
            line_tokens=tuple(x.tokens for x in head),
            malformed=sum(1 for x in head if x.malformed),
            backend="masking",
            masking=stage,
            head_text=None,
            why_first=True,
            aim=stage.aim,
            cause="masked what it could and no summary can follow",
            receipt=dict(pins_kept=len(pinned_indices(lines, job.request.settings.keep_first))),
            details=dict(masked=len(masking.masked)),
            stuck="no summary could follow; ",
        ),
        progress,
        fault,
    )
    log.info(
        "tool_outputs_masked",
        workspace=str(job.workspace.path),
        job=result.receipt.job if result.receipt is not None else None,
        outputs=masking.outputs,
        inputs=masking.inputs,
        media=masking.media,
        tokens_freed=stage.freed_tokens,
        tokens_after=result.tokens_after,
    )
    # Its result says all its receipt says: that no summary could follow, and why.
    return replace(result, reason=result.receipt.reason if result.receipt else result.reason)
