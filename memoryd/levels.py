"""Context levels and when to act (pure): the level of a usage, its action, the triggers, and
the back-off after failed or ineffective jobs. No clock, file or network."""

from __future__ import annotations

from dataclasses import dataclass

from memoryd.defaults import DEFAULT_CRITICAL_AT, DEFAULT_WARNING_AT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal, Protocol

    Level = Literal["normal", "warning", "critical"]
    Action = Literal["none", "prepare_handoff", "force_return"]

    class ThresholdConfig(Protocol):
        """Anything with the two level thresholds (a Settings, say)."""

        @property
        def warning_at(self) -> float: ...

        @property
        def critical_at(self) -> float: ...

else:
    # typing is not imported at run time (it costs a quarter of a bare interpreter's start,
    # docs/design.md#startup); the names stay importable for the modules that annotate
    # with them.
    Level = Action = str
    ThresholdConfig = object


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
