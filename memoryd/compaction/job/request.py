"""What a job takes and gives back: plain picklable values (docs/design.md#commit).

The daemon hands a :class:`JobRequest` to a worker process and gets a :class:`JobResult`
back; ``memoryd summarize`` and the Python API use the same two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from memoryd.config.sections import (
    ANTHROPIC_API_KEY_ENV,
    ANTHROPIC_BASE_URL_ENV,
    OPENAI_API_KEY_ENV,
)
from memoryd.config.settings import Settings
from memoryd.llm.limits import LearnedLimit
from memoryd.receipts.records import Receipt

Outcome = Literal["completed", "nothing_to_do", "ineffective", "failed", "busy", "dry_run"]
Progress = Callable[[str], None]
SUMMARIZER_ENV = (ANTHROPIC_API_KEY_ENV, ANTHROPIC_BASE_URL_ENV, OPENAI_API_KEY_ENV)
"""The environment variables the summarizer honours, handed to a job explicitly."""


def summarizer_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that a job's summarizer reads (for :class:`JobRequest`)."""
    return {name: environ[name] for name in SUMMARIZER_ENV if name in environ}


@dataclass(frozen=True, slots=True)
class JobRequest:
    """Everything a job needs, as plain picklable values."""

    workspace: Path
    settings: Settings
    force: bool = False
    dry_run: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    """The variables the summarizer honours (see :data:`SUMMARIZER_ENV`)."""
    heartbeat_started: bool = False
    """True when the caller already set HEARTBEAT.md active (the daemon does, at dispatch)."""
    calibration: float = 1.0
    reason: str = "manual"
    """Why the job runs: "trigger" (usage or message count), "idle" or "manual"."""
    result_note: str | None = None
    """Appended to HEARTBEAT.md's ``last_result`` (the spend cap says why it is extractive)."""
    context_limits: Mapping[str, LearnedLimit] = field(default_factory=dict)
    """Servers' contexts learned by earlier jobs (:mod:`memoryd.llm.limits`)."""


@dataclass(frozen=True, slots=True)
class JobResult:
    """What a job did, in ids, counts and sizes (never message text)."""

    workspace: Path
    outcome: Outcome
    reason: str
    strategy: str = "narrative"
    messages_before: int = 0
    tokens_before: int = 0
    messages_after: int = 0
    tokens_after: int = 0
    summarized_count: int = 0
    summarized_bytes: int = 0
    """Bytes of the conversation's start that the job replaced (all now in ``archive``)."""
    summary_tokens: int = 0
    archive: str | None = None
    backend: str | None = None
    llm_calls: int = 0
    carried_bytes: int = 0
    calibration: float | None = None
    ineffective: bool = False
    identity: tuple[int, int] | None = None
    """(device, inode) of the new conversation file."""
    head_end: int = 0
    """Bytes of the new file that the job wrote (summary + kept); the rest was carried."""
    head_line_tokens: tuple[int, ...] = ()
    """Uncalibrated token estimate of each line of the head, for the daemon's reader."""
    head_malformed: int = 0
    duration_s: float = 0.0
    pins_kept: int = 0
    masked_messages: int = 0
    """Lines whose old tool outputs became placeholders (docs/design.md#masking)."""
    masked_tokens: int = 0
    """Tokens the masking freed."""
    receipt: Receipt | None = None
    """The job's receipt, as appended to ``.memoryd/receipts.jsonl`` (None when no job ran)."""
    context_limits: Mapping[str, LearnedLimit] = field(default_factory=dict)
    """Servers' contexts known to the job's process at its end, for the daemon to keep."""
