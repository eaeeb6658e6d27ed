"""The daily LLM spend cap of one daemon: a running total per UTC day, kept in a small file.

The decisions are pure (:func:`add_spend`, :func:`cap_reason`); :class:`SpendLedger` keeps
the total in ``$XDG_STATE_HOME/memoryd/spend-<daemon>.json``, rewritten atomically and
fsynced after every job that spent something, so it survives restarts and SIGKILL
(docs/design.md#spend-cap).
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import structlog

from memoryd.events import iso_ms
from memoryd.fsutil import atomic_write
from memoryd.receipts import LLMUsage

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Spend:
    """What one daemon spent on the LLM during one UTC day."""

    day: str
    cost_usd: float = 0.0
    tokens: int = 0
    exhausted: str | None = None
    """Why the cap was reached, once it was (the day's first crossing is logged once)."""


def utc_day(now: float) -> str:
    """The UTC date of ``now`` (epoch seconds): ``2026-11-23``."""
    return time.strftime("%Y-%m-%d", time.gmtime(now))


def next_utc_day(now: float) -> float:
    """Epoch seconds of the next UTC midnight after ``now``."""
    day_start = calendar.timegm(time.strptime(utc_day(now), "%Y-%m-%d"))
    return float(day_start + 86_400)


def add_spend(spend: Spend, day: str, cost_usd: float, tokens: int) -> Spend:
    """``spend`` plus one job's cost and tokens; a new day starts from zero (pure)."""
    base = spend if spend.day == day else Spend(day)
    return replace(base, cost_usd=base.cost_usd + cost_usd, tokens=base.tokens + tokens)


def cap_reason(
    spend: Spend, day: str, max_cost_per_day_usd: float, max_llm_tokens_per_day: int
) -> str | None:
    """Why the day's cap is reached, or None (a cap of 0 is off; pure)."""
    if spend.day != day:
        return None
    if max_cost_per_day_usd > 0 and spend.cost_usd >= max_cost_per_day_usd:
        return f"LLM cost ${spend.cost_usd:.4f} reached the ${max_cost_per_day_usd:g} daily cap"
    if max_llm_tokens_per_day > 0 and spend.tokens >= max_llm_tokens_per_day:
        return f"LLM tokens {spend.tokens:,} reached the {max_llm_tokens_per_day:,} daily cap"
    return None


def ledger_path(env: Mapping[str, str], roots: Sequence[Path]) -> Path:
    """Where this daemon keeps its total: one file per set of roots (one per daemon).

    ``$XDG_STATE_HOME/memoryd/`` (default ``~/.local/state/memoryd/``).
    """
    state_home = env.get("XDG_STATE_HOME", "")
    if not state_home or not Path(state_home).is_absolute():
        home = env.get("HOME")
        state_home = str((Path(home) if home else Path.home()) / ".local" / "state")
    identity = "\n".join(sorted(str(root) for root in roots))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return Path(state_home) / "memoryd" / f"spend-{digest}.json"


def _parse(raw: bytes) -> Spend | None:
    try:
        data = json.loads(raw)
        spend = Spend(
            day=str(data["day"]),
            cost_usd=float(data["cost_usd"]),
            tokens=int(data["tokens"]),
            exhausted=data.get("exhausted"),
        )
    except (ValueError, KeyError, TypeError):
        return None
    if not math.isfinite(spend.cost_usd) or spend.cost_usd < 0 or spend.tokens < 0:
        return None
    return spend


class SpendLedger:
    """The running total of one daemon, loaded at start and saved after each job."""

    def __init__(self, path: Path, now: float | None = None) -> None:
        self.path = path
        moment = time.time() if now is None else now
        self.spend = Spend(utc_day(moment))
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("spend_ledger_unreadable", path=str(path), error=exc.strerror)
            return
        loaded = _parse(raw)
        if loaded is None:
            log.warning("spend_ledger_invalid", path=str(path), action="counting from zero")
            return
        self.spend = loaded

    def today(self, now: float) -> Spend:
        """The total of the UTC day of ``now`` (zero on a new day)."""
        day = utc_day(now)
        return self.spend if self.spend.day == day else Spend(day)

    def record(self, cost_usd: float, tokens: int, now: float) -> Spend:
        """Add one job's spend and save the total durably; the new total."""
        if cost_usd <= 0 and tokens <= 0:
            return self.today(now)
        self.spend = add_spend(self.spend, utc_day(now), cost_usd, tokens)
        self._save()
        return self.spend

    def mark_exhausted(self, reason: str, now: float) -> None:
        """Remember that today's cap was reached (so a restart does not report it again)."""
        self.spend = replace(self.today(now), exhausted=reason)
        self._save()

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = json.dumps(asdict(self.spend), sort_keys=True).encode() + b"\n"
            atomic_write(self.path, data, 0o600, root=self.path.parent)
        except OSError as exc:
            log.warning("spend_ledger_unwritable", path=str(self.path), error=exc.strerror)


@dataclass(frozen=True, slots=True)
class Downgrade:
    """A job sent to the extractive backend because today's cap is reached."""

    reason: str
    until: str
    """ISO time of the next UTC midnight, when the LLM is used again."""

    @property
    def note(self) -> str:
        """The words HEARTBEAT.md's ``last_result`` carries."""
        return f"extractive backend: {self.reason}, until {self.until}"


class SpendCap:
    """The daemon's side of the cap: which backend a job gets, and what jobs spent.

    Caps come from the settings of the moment (a reload may change them); the total is
    per daemon, not per workspace.
    """

    def __init__(self, ledger: SpendLedger) -> None:
        self.ledger = ledger

    def check(
        self, max_cost_per_day_usd: float, max_llm_tokens_per_day: int, now: float
    ) -> Downgrade | None:
        """The downgrade for a job dispatched now, or None while under the caps."""
        spend = self.ledger.today(now)
        reason = cap_reason(spend, spend.day, max_cost_per_day_usd, max_llm_tokens_per_day)
        if reason is None:
            return None
        until = iso_ms(next_utc_day(now))
        if spend.exhausted is None:
            log.warning(
                "llm_budget_exhausted",
                reason=reason,
                cost_usd=round(spend.cost_usd, 6),
                tokens=spend.tokens,
                until=until,
                ledger=str(self.ledger.path),
            )
            self.ledger.mark_exhausted(reason, now)
        return Downgrade(reason, until)

    def record(self, usage: LLMUsage, cost_usd: float | None, now: float) -> Spend:
        """Count one job's spend against today (every billed token, cache included)."""
        return self.ledger.record(cost_usd or 0.0, usage.total_tokens, now)
