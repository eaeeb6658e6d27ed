"""The exception hierarchy: one root, a few specific kinds, each with its exit code."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from memoryd.tokens import LLMUsage


class MemorydError(Exception):
    """Root of every error memoryd raises on purpose; ``str(err)`` is one clear line."""

    exit_code = 1


class UsageError(MemorydError):
    """Bad usage, bad configuration or bad input: exit code 2, nothing changed."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration value, file or key was refused."""


class InputError(UsageError):
    """A file or argument given to memoryd cannot be used as it is."""


class UnsafePathError(InputError):
    """A path leaves its workspace, is a hard link, or is not a regular file."""


class CommitAborted(MemorydError):
    """A rewrite was abandoned before the rename; the original file is untouched."""


class PoolUnavailable(MemorydError):
    """The worker pool could not start the process a job needed (its forkserver or a
    worker): the job failed, nothing was changed, and it is retried with back-off."""


class SummarizerError(MemorydError):
    """The summarizer gave no usable summary (after its retries); nothing was changed.

    ``usage`` and ``model``, once set by the strategy, say what the job's LLM calls cost
    before it failed (an answer that cannot be used is still billed), for its receipt.
    """

    usage: LLMUsage | None = None
    model: str | None = None


class NoSummaryAnswer(SummarizerError):
    """The model answered, and no answer was a summary: cut at ``max_tokens`` on every
    try, empty, or a refusal. Not the server's trouble (no 429, 5xx or connection error):
    trying again later would give the same, so the offline summary stands in
    (docs/design.md#retention). ``why`` says what the answers were, in a few words."""

    def __init__(self, reason: str, why: str) -> None:
        super().__init__(reason)
        self.why = why


class CheckpointParseError(SummarizerError):
    """An LLM answer is not a valid structured checkpoint."""
