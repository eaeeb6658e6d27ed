"""The structured checkpoint: its model and its text in the conversation (pure).

A checkpoint lists what is ``completed``, ``in_progress``, ``pending``, the ``blockers``
and the ``decisions`` of a conversation. Each compaction merges the previous checkpoint
with the messages since, removes what was resolved, and bumps ``version``
(docs/design.md#strategies). The prompt lives in
:mod:`memoryd.summary.checkpoint_prompt`, the offline builder in
:mod:`memoryd.summary.extractive_checkpoint`, the storage with the strategy in
:mod:`memoryd.compaction.strategies.checkpoint`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SECTIONS = ("completed", "in_progress", "pending", "blockers", "decisions")
CHECKPOINT_PREFIX = "[Checkpoint of earlier conversation]\n\n"
"""The fixed start of a checkpoint head message's content."""
MAX_ITEMS = 25
"""Items an LLM is asked for per section, so a checkpoint never grows without bound (the
offline builder fits its lists within a token budget instead)."""
ITEM_LEAD = "\n- "
"""What comes before each item of a list in the checkpoint's text."""


class CheckpointSummary(BaseModel):
    """The five lists of a checkpoint; every item a short sentence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    completed: list[str]
    in_progress: list[str]
    pending: list[str]
    blockers: list[str]
    decisions: list[str]


class CompactionInfo(BaseModel):
    """What the last compaction took in."""

    model_config = ConfigDict(extra="allow")

    messages_compacted: int
    oldest_message_timestamp: int | None
    newest_message_timestamp: int | None
    compacted_at: str
    archive: str | None = None
    first_id: str | None = None
    """The id of the first message this compaction absorbed (its original is in ``archive``)."""
    last_id: str | None = None


class CheckpointStats(BaseModel):
    """Totals over every compaction of the workspace."""

    model_config = ConfigDict(extra="allow")

    total_compactions: int = 0
    total_messages: int = 0


class Checkpoint(BaseModel):
    """The content of ``checkpoint.json``."""

    model_config = ConfigDict(extra="allow")

    version: int = Field(ge=1)
    updated_at: str
    completed: list[str]
    in_progress: list[str]
    pending: list[str]
    blockers: list[str]
    decisions: list[str]
    compaction_info: CompactionInfo
    stats: CheckpointStats
    details: list[str] = Field(default_factory=list)
    """Details the lists lost, kept verbatim by the retention check (docs/design.md#retention)."""

    @property
    def summary(self) -> CheckpointSummary:
        """The five lists alone."""
        return CheckpointSummary(**{name: getattr(self, name) for name in SECTIONS})


def render_checkpoint(checkpoint: Checkpoint) -> str:
    """The checkpoint as text for the head message of the conversation (pure)."""
    lines = [
        f"Checkpoint v{checkpoint.version} ({checkpoint.updated_at}):",
        render_lists(checkpoint.summary),
    ]
    if checkpoint.details:
        lines.append("Details kept verbatim: " + "; ".join(checkpoint.details))
    return "\n".join(lines)


def render_lists(lists: CheckpointSummary) -> str:
    """The five lists as the checkpoint's text shows them: a title, then one item a line
    (``Pending: none`` when a list is empty) (pure)."""
    lines = []
    for name in SECTIONS:
        items = getattr(lists, name)
        title = name.replace("_", " ").capitalize()
        lines.append(
            f"{title}:" + "".join(ITEM_LEAD + x for x in items) if items else f"{title}: none"
        )
    return "\n".join(lines)
