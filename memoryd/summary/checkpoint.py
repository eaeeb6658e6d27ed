"""The structured checkpoint: a rendering of items, as JSON and as text (pure).

A checkpoint's items (:mod:`memoryd.summary.items`) each have for kind the list they are
in: what is ``completed``, ``in_progress``, ``pending``, the ``blockers`` and the
``decisions`` of a conversation. The five lists are how they are stored
(``checkpoint.json``), how an LLM answers (:class:`CheckpointSummary`) and how the head
message shows them (:func:`render_lists`); :func:`as_items` and :func:`as_lists` go from
one to the other. Each compaction folds the messages since into the previous
checkpoint's items, removes what was resolved, and bumps ``version``
(docs/design.md#strategies). The prompt lives in
:mod:`memoryd.summary.checkpoint_prompt`, the offline builder in
:mod:`memoryd.summary.extractive_checkpoint`, the storage with the strategy in
:mod:`memoryd.compaction.strategies.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from memoryd.summary.items import SECTIONS, HeadItem

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


def as_items(lists: CheckpointSummary | Checkpoint) -> list[HeadItem]:
    """The items of five lists, list by list, each of its list's kind (pure)."""
    return [HeadItem(name, text) for name in SECTIONS for text in getattr(lists, name)]


def as_lists(items: Iterable[HeadItem]) -> CheckpointSummary:
    """The five lists of a checkpoint's items, each item in its kind's list (pure)."""
    lists: dict[str, list[str]] = {name: [] for name in SECTIONS}
    for item in items:
        lists[item.kind].append(item.text)
    return CheckpointSummary(**lists)


def render_checkpoint(checkpoint: Checkpoint) -> str:
    """The checkpoint as text for the head message of the conversation (pure)."""
    lines = [
        f"Checkpoint v{checkpoint.version} ({checkpoint.updated_at}):",
        render_lists(as_items(checkpoint)),
    ]
    if checkpoint.details:
        lines.append("Details kept verbatim: " + "; ".join(checkpoint.details))
    return "\n".join(lines)


def render_lists(items: Iterable[HeadItem]) -> str:
    """A checkpoint's items as its text shows them: each list's title, then its items one
    a line (``Pending: none`` when a list is empty) (pure)."""
    lines = []
    shown = list(items)
    for name in SECTIONS:
        texts = [item.text for item in shown if item.kind == name]
        title = name.replace("_", " ").capitalize()
        lines.append(
            f"{title}:" + "".join(ITEM_LEAD + x for x in texts) if texts else f"{title}: none"
        )
    return "\n".join(lines)
