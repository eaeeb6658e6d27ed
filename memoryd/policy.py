"""The pure core: levels, actions, triggers and split points. No clock, file or network."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from memoryd.defaults import DEFAULT_CRITICAL_AT, DEFAULT_WARNING_AT

Level = Literal["normal", "warning", "critical"]
Action = Literal["none", "prepare_handoff", "force_return"]

ACTIONS: dict[Level, tuple[Action, str]] = {
    "normal": ("none", "Context normal - continue working"),
    "warning": (
        "prepare_handoff",
        f"Context warning ({DEFAULT_WARNING_AT:.0%}+) - complete current task, "
        "prepare clean handoff",
    ),
    "critical": (
        "force_return",
        f"Context critical ({DEFAULT_CRITICAL_AT:.0%}+) - initiating checkpoint return: "
        "save state and return control",
    ),
}

REGROW_FRACTION = 0.05
"""After an ineffective job, the conversation must grow by this share of its budget
before memoryd tries again (no summarization loops)."""


@dataclass(frozen=True, slots=True)
class ThresholdAction:
    """What an agent should do at a level, in a word and in a sentence."""

    level: Level
    action: Action
    message: str


class ThresholdConfig(Protocol):
    """Anything with the two level thresholds (a Settings, say)."""

    @property
    def warning_at(self) -> float: ...

    @property
    def critical_at(self) -> float: ...


def detect_threshold(
    usage_ratio: float,
    config: ThresholdConfig | None = None,
    *,
    warning_at: float | None = None,
    critical_at: float | None = None,
) -> Level:
    """The level of a usage ratio: by default warning from 0.70, critical from 0.85.

    The thresholds come from ``config`` (a Settings, say) when given, and an explicit
    ``warning_at`` / ``critical_at`` wins over both.
    """
    warning = (
        warning_at
        if warning_at is not None
        else config.warning_at
        if config
        else DEFAULT_WARNING_AT
    )
    critical = (
        critical_at
        if critical_at is not None
        else config.critical_at
        if config
        else DEFAULT_CRITICAL_AT
    )
    if usage_ratio >= critical:
        return "critical"
    if usage_ratio >= warning:
        return "warning"
    return "normal"


def get_threshold_action(level: Level) -> ThresholdAction:
    """The action for a level: none, prepare_handoff or force_return, with its message."""
    action, message = ACTIONS[level]
    return ThresholdAction(level, action, message)


def should_emit_event(previous: Level | None, current: Level) -> bool:
    """A ``threshold_changed`` event is due only when the level changes."""
    return previous != current


def usage_ratio(tokens: int, token_limit: int) -> float:
    """Tokens over the budget, rounded for display and files."""
    return round(tokens / token_limit, 4) if token_limit > 0 else 0.0


def over_trigger(tokens: int, token_limit: int, trigger: float) -> bool:
    """True when usage strictly exceeds ``trigger`` (a share of ``token_limit``)."""
    return tokens > trigger * token_limit


def may_retry_after_ineffective(
    tokens: int, tokens_at_ineffective: int | None, token_limit: int
) -> bool:
    """After ``summarize_ineffective``, wait until the conversation has really grown."""
    if tokens_at_ineffective is None:
        return True
    return tokens >= tokens_at_ineffective + max(1, int(REGROW_FRACTION * token_limit))


def failure_backoff(consecutive_failures: int, max_failures: int, cooldown: float) -> float:
    """Seconds to wait before the next try of a failing workspace.

    Below ``max_failures`` failures there is no back-off (the daemon's short retry floor
    applies); from there the wait doubles with each failure (30 s, 60 s, …) up to
    ``cooldown``.
    """
    if consecutive_failures < max_failures:
        return 0.0
    return float(min(cooldown, 30.0 * 2 ** (consecutive_failures - max_failures)))


class MessageLike(Protocol):
    """What a split decision needs of a message (a :class:`memoryd.conversation.Line`)."""

    @property
    def tokens(self) -> int: ...

    @property
    def is_summary(self) -> bool: ...

    @property
    def is_genuine_user_turn(self) -> bool: ...

    @property
    def tool_use_ids(self) -> frozenset[str]: ...

    @property
    def tool_result_ids(self) -> frozenset[str]: ...


def valid_boundaries(messages: Sequence[MessageLike]) -> list[bool]:
    """For each index k, may the kept part start at k?

    It may when message k is a genuine user turn and no ``tool_use`` before k has its
    ``tool_result`` at or after k (nor the reverse).
    """
    n = len(messages)
    open_before: list[frozenset[str]] = []
    seen_uses: set[str] = set()
    for message in messages:
        open_before.append(frozenset(seen_uses))
        seen_uses |= message.tool_use_ids
    results_after: list[frozenset[str]] = [frozenset()] * (n + 1)
    acc: set[str] = set()
    for k in range(n - 1, -1, -1):
        acc |= messages[k].tool_result_ids
        results_after[k] = frozenset(acc)
    uses_after: list[frozenset[str]] = [frozenset()] * (n + 1)
    acc = set()
    for k in range(n - 1, -1, -1):
        acc |= messages[k].tool_use_ids
        uses_after[k] = frozenset(acc)
    results_before: set[str] = set()
    valid: list[bool] = []
    for k, message in enumerate(messages):
        ok = (
            message.is_genuine_user_turn
            and not (open_before[k] & results_after[k])
            and not (results_before & uses_after[k])
        )
        valid.append(ok)
        results_before |= message.tool_result_ids
    return valid


def safe_split(
    messages: Sequence[MessageLike], proposed: int, lowest: int = 1, highest: int | None = None
) -> int | None:
    """The valid boundary nearest to ``proposed`` (earlier on a tie) within [lowest, highest].

    ``highest`` defaults to the last index. Returns None when no index in range is valid.
    """
    valid = valid_boundaries(messages)
    top = len(messages) - 1 if highest is None else min(highest, len(messages) - 1)
    for distance in range(len(messages) + 1):
        for k in (proposed - distance, proposed + distance):
            if lowest <= k <= top and valid[k]:
                return k
    return None


def head_summary_count(messages: Sequence[MessageLike]) -> int:
    """1 when the conversation starts with a previous summary (to be folded), else 0."""
    return 1 if messages and messages[0].is_summary else 0


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """Summarize messages [0, keep_from); keep [keep_from, n) verbatim."""

    keep_from: int
    summarized_count: int
    summarized_tokens: int
    kept_tokens: int
    folds_previous_summary: bool


def plan_for(messages: Sequence[MessageLike], keep_from: int) -> SplitPlan:
    """The plan that summarizes [0, keep_from) of ``messages``."""
    head = head_summary_count(messages)
    return SplitPlan(
        keep_from=keep_from,
        summarized_count=keep_from - head,
        summarized_tokens=sum(m.tokens for m in messages[:keep_from]),
        kept_tokens=sum(m.tokens for m in messages[keep_from:]),
        folds_previous_summary=head == 1 and keep_from >= 1,
    )
