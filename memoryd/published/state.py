"""``.memoryd/state.json``: the numbers of a workspace, for orchestrators that poll."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from json.encoder import encode_basestring_ascii

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.conversation.reader import Counted
from memoryd.errors import MemorydError
from memoryd.files.fsutil import atomic_write
from memoryd.files.regular import read_file
from memoryd.levels import (
    Action,
    Level,
    ThresholdConfig,
    detect_threshold,
    get_threshold_action,
    usage_ratio,
)
from memoryd.tokens import CALIBRATION_BOUNDS
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class BudgetSettings(ThresholdConfig, Protocol):
        """What a state needs of the settings (a Settings, or status's fast-path settings)."""

        @property
        def token_limit(self) -> int: ...

        @property
        def strategy(self) -> str: ...

else:
    BudgetSettings = object  # typing is not imported at run time (see memoryd.levels)


@dataclass(frozen=True, slots=True)
class WorkspaceState:
    """What state.json holds, plus the strategy and counters memoryd keeps.

    See docs/design.md#state.
    """

    workspace: str
    messages: int
    tokens: int
    token_limit: int
    warning_at: float
    critical_at: float
    usage_ratio: float
    level: Level
    action: Action
    summarizing: bool
    last_summary_at: str | None
    updated_at: str
    strategy: str
    malformed_lines: int = 0
    calibration: float = 1.0

    def numbers(self) -> tuple[Any, ...]:
        """What must change for the file to be rewritten (everything but the time)."""
        # Shallow on purpose: every field is a scalar, and asdict's deep copy made this
        # the largest cost of a periodic rescan with thousands of workspaces.
        return tuple(getattr(self, name) for name in NUMBER_FIELDS)


FIELD_NAMES = tuple(f.name for f in fields(WorkspaceState))
_KEYS = tuple(f"  {json.dumps(name)}: " for name in FIELD_NAMES)
NUMBER_FIELDS = tuple(name for name in FIELD_NAMES if name != "updated_at")
COUNTED_FIELDS = tuple(f.name for f in fields(Counted))
_COUNTED_KEYS = tuple(f"    {json.dumps(name)}: " for name in COUNTED_FIELDS)


def numbers_key(numbers: tuple[Any, ...] | None) -> int | None:
    """What the daemon keeps of a state's numbers to notice a change: their hash (a small
    int per workspace instead of a tuple; a collision only delays one derived write)."""
    return None if numbers is None else hash(numbers)


def saved_numbers(saved: dict[str, Any]) -> tuple[Any, ...] | None:
    """The numbers of a state.json read back, to skip rewriting it unchanged (None if
    partial, or if a field is not a scalar: a list or object there was not written by
    memoryd, and could not be hashed)."""
    if not all(name in saved for name in NUMBER_FIELDS):
        return None
    numbers = tuple(saved[name] for name in NUMBER_FIELDS)
    if not all(value is None or isinstance(value, (str, int, float)) for value in numbers):
        return None
    return numbers


def saved_calibration(saved: dict[str, Any]) -> float:
    """The calibration factor of a state.json read back: 1.0 unless it is a number within
    the calibration's bounds (the file may have been edited by hand)."""
    value = saved.get("calibration")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 1.0
    low, high = CALIBRATION_BOUNDS
    return float(value) if low <= value <= high else 1.0  # NaN compares False


def saved_time(saved: dict[str, Any]) -> str | None:
    """``last_summary_at`` of a state.json read back, when it is text (else None)."""
    value = saved.get("last_summary_at")
    return value if isinstance(value, str) else None


def build_state(
    workspace: Workspace,
    settings: BudgetSettings,
    *,
    messages: int,
    tokens: int,
    summarizing: bool,
    last_summary_at: str | None,
    now: float,
    malformed_lines: int = 0,
    calibration: float = 1.0,
) -> WorkspaceState:
    """The state of a workspace from its counts (pure)."""
    ratio = usage_ratio(tokens, settings.token_limit)
    # The level comes from the exact ratio: the rounded one would call 69,999 of 100,000
    # tokens "warning".
    level = detect_threshold(tokens / settings.token_limit, settings)
    return WorkspaceState(
        workspace=str(workspace.path),
        messages=messages,
        tokens=tokens,
        token_limit=settings.token_limit,
        warning_at=settings.warning_at,
        critical_at=settings.critical_at,
        usage_ratio=ratio,
        level=level,
        action=get_threshold_action(level).action,
        summarizing=summarizing,
        last_summary_at=last_summary_at,
        updated_at=iso_ms(now),
        strategy=settings.strategy,
        malformed_lines=malformed_lines,
        calibration=calibration,
    )


BUDGET_FIELDS = ("token_limit", "warning_at", "critical_at", "strategy")
"""What a state records of the settings that counted it: the budget, its level thresholds
and the strategy (docs/design.md#state)."""


def recorded_budget(saved: dict[str, Any]) -> dict[str, Any]:
    """The budget fields a state.json read back records; {} without a token limit (pure).

    The values are as written: whoever uses them checks them."""
    if "token_limit" not in saved:
        return {}
    return {name: saved[name] for name in BUDGET_FIELDS if name in saved}


def state_bytes(state: WorkspaceState, counted: Counted | None = None) -> bytes:
    """The text of state.json for ``state`` (pure): ``strict_json.dumps(asdict(state), indent=2)``
    and a newline, written field by field, with ``counted`` (what the daemon's reader
    counted, see :class:`~memoryd.conversation.reader.Counted`) as a last object when given.
    Every field is a scalar; the indenting encoder is pure Python, slow at thousands of
    workspaces, and each call of it leaves reference cycles behind
    (docs/design.md#scale-start)."""
    values = tuple(map(_scalar, map(state.__getattribute__, FIELD_NAMES)))
    if counted is None:
        return (_STATE_TEXT % values).encode()
    inner = tuple(map(_scalar, map(counted.__getattribute__, COUNTED_FIELDS)))
    return (_STATE_COUNTED_TEXT % (values + inner)).encode()


_STATE_BODY = ",\n".join(f"{key}%s" for key in _KEYS)
_STATE_TEXT = f"{{\n{_STATE_BODY}\n}}\n"
_COUNTED_BODY = ",\n".join(f"{key}%s" for key in _COUNTED_KEYS)
_STATE_COUNTED_TEXT = f'{{\n{_STATE_BODY},\n  "counted": {{\n{_COUNTED_BODY}\n  }}\n}}\n'


def saved_counted(saved: dict[str, Any]) -> Counted | None:
    """The ``counted`` object of a state.json read back, or None (missing or not exactly
    the fields of :class:`~memoryd.conversation.reader.Counted`, each of its type)."""
    value = saved.get("counted")
    if not isinstance(value, dict) or set(value) != set(COUNTED_FIELDS):
        return None
    if not isinstance(value["starts_with_summary"], bool):
        return None
    numbers = [value[name] for name in COUNTED_FIELDS if name != "starts_with_summary"]
    if not all(type(number) is int for number in numbers):
        return None
    return Counted(**value)


def _scalar(value: Any) -> str:
    """A scalar as ``json.dumps`` writes it; NaN and Infinity are refused (JSONProblem),
    as :func:`memoryd.strict_json.dumps` refuses them (docs/design.md#one-json-reader)."""
    write = _WRITERS.get(type(value))
    return write(value) if write is not None else strict_json.dumps(value)


def _float(value: float) -> str:
    return float.__repr__(value) if math.isfinite(value) else strict_json.dumps(value)


_WRITERS: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii,
    int: int.__repr__,
    float: _float,
    bool: lambda value: "true" if value else "false",
    type(None): lambda _value: "null",
}
"""How each exact type of scalar is written (a subclass goes through strict_json)."""


def write_state(
    workspace: Workspace, state: WorkspaceState, counted: Counted | None = None
) -> None:
    """Rewrite state.json atomically (not fsynced: it is derived, and rebuilt at start)."""
    data = state_bytes(state, counted)
    atomic_write(workspace.state, data, root=workspace.path, durable=False)


STATE_MAX_BYTES = 1 << 20
"""A state.json larger than this is not one memoryd wrote (it holds a few hundred bytes)."""


def read_state(workspace: Workspace) -> dict[str, Any] | None:
    """The last state.json written, or None when there is none or it cannot be used: not
    a regular file (never waited on), too large, not strict JSON, not an object. It is
    derived data, rebuilt from the conversation (docs/design.md#state)."""
    try:
        value = strict_json.loads(read_file(workspace.state, STATE_MAX_BYTES))
    except (OSError, MemorydError, ValueError):
        return None
    return value if isinstance(value, dict) else None
