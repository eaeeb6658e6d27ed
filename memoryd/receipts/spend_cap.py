"""The daily LLM spend cap of one daemon: a running total per UTC day, kept in a small file.

The decisions are pure (:func:`add_spend`, :func:`cap_reason`, :func:`parse_spend`,
:func:`spend_of_receipts`); :class:`SpendLedger` keeps the total in
``$XDG_STATE_HOME/memoryd/spend-<daemon>.json``, rewritten atomically and fsynced after
every job that spent something, so it survives restarts and SIGKILL. The cap fails
closed: a ledger that cannot be read or trusted is rebuilt from the receipts, and when
that is not possible either, the day's cap counts as reached (docs/design.md#spend-cap).
"""

from __future__ import annotations

import calendar
import hashlib
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import structlog

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.discovery import find_workspaces
from memoryd.errors import MemorydError
from memoryd.files.fsutil import atomic_write
from memoryd.files.regular import read_file
from memoryd.receipts.records import Receipt, receipts_path
from memoryd.tokens import LLMUsage
from memoryd.workspace import Workspace

log = structlog.get_logger()

MAX_SPEND_USD = 1e15
"""The largest total a ledger may hold; a larger one is not a total memoryd wrote."""
MAX_SPEND_TOKENS = 10**15
LEDGER_MAX_BYTES = 64 << 10
"""The ledger is a few dozen bytes; a larger file is not one memoryd wrote."""
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True, slots=True)
class Spend:
    """What one daemon spent on the LLM during one UTC day."""

    day: str
    cost_usd: float = 0.0
    tokens: int = 0
    exhausted: str | None = None
    """Why the cap was reached, once it was (the day's first crossing is logged once)."""
    untrusted: str | None = None
    """Why the day's total cannot be trusted (its ledger could not be read, nor rebuilt
    from the receipts): the cap then counts as reached until the next UTC day."""


def utc_day(now: float) -> str:
    """The UTC date of ``now`` (epoch seconds): ``2026-11-23``."""
    return time.strftime("%Y-%m-%d", time.gmtime(now))


def next_utc_day(now: float) -> float:
    """Epoch seconds of the next UTC midnight after ``now``."""
    day_start = calendar.timegm(time.strptime(utc_day(now), "%Y-%m-%d"))
    return float(day_start + 86_400)


def add_spend(spend: Spend, day: str, cost_usd: float, tokens: int) -> Spend:
    """``spend`` plus one job's cost and tokens; a new day starts from zero (pure).

    A figure that is negative or not finite adds nothing, and the totals stop at
    :data:`MAX_SPEND_USD` and :data:`MAX_SPEND_TOKENS`: what is saved is always a number
    the ledger reads back.
    """
    base = spend if spend.day == day else Spend(day)
    cost = cost_usd if math.isfinite(cost_usd) and cost_usd > 0 else 0.0
    return replace(
        base,
        cost_usd=min(MAX_SPEND_USD, base.cost_usd + cost),
        tokens=min(MAX_SPEND_TOKENS, base.tokens + max(0, tokens)),
    )


def cap_reason(
    spend: Spend, day: str, max_cost_per_day_usd: float, max_llm_tokens_per_day: int
) -> str | None:
    """Why the day's cap is reached, or None (a cap of 0 is off; pure).

    A day whose total cannot be trusted counts as reached: the cap fails closed.
    """
    if spend.day != day or (max_cost_per_day_usd <= 0 and max_llm_tokens_per_day <= 0):
        return None
    if spend.untrusted is not None:
        return spend.untrusted
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


def parse_spend(raw: bytes) -> Spend | str:
    """The ledger's total, or why it cannot be trusted (pure): strict JSON, a real day,
    finite figures within their bounds, text or null for the notes."""
    try:
        data = strict_json.loads(raw)
    except strict_json.JSONProblem as problem:
        return f"not JSON: {problem}"
    if not isinstance(data, dict):
        return "not a JSON object"
    day, cost, tokens = data.get("day"), data.get("cost_usd"), data.get("tokens")
    if not isinstance(day, str) or not _DAY.fullmatch(day):
        return "no valid day"
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        return "cost_usd is not a number"
    if not 0 <= cost <= MAX_SPEND_USD:  # compared before float(): 10**400 stays an int
        return "cost_usd out of range"
    if (
        isinstance(tokens, bool)
        or not isinstance(tokens, int)
        or not 0 <= tokens <= MAX_SPEND_TOKENS
    ):
        return "tokens out of range"
    notes = (data.get("exhausted"), data.get("untrusted"))
    if any(note is not None and not isinstance(note, str) for note in notes):
        return "a note is not text"
    return Spend(day, float(cost), tokens, *notes)


def spend_of_receipts(receipts: Iterable[Receipt], day: str) -> Spend:
    """What the jobs whose receipts finished on ``day`` spent on the LLM (pure)."""
    spend = Spend(day)
    for receipt in receipts:
        if receipt.finished_at[:10] == day:
            spend = add_spend(spend, day, receipt.cost_usd or 0.0, receipt.llm.total_tokens)
    return spend


def rebuild_spend(roots: Sequence[Path], max_depth: int, day: str) -> Spend | str:
    """The day's total rebuilt from the receipts of every workspace under ``roots``, or
    why it cannot be: a receipts file that cannot be read, or a line that is not a receipt.

    The receipts are the accounting; the ledger only sums them (docs/design.md#spend-cap).
    """
    receipts: list[Receipt] = []
    for root in roots:
        for folder in find_workspaces(root, max_depth):
            path = receipts_path(Workspace(folder))
            try:
                raw = read_file(path)
            except FileNotFoundError:
                continue
            except (OSError, MemorydError) as exc:
                return f"{path}: {getattr(exc, 'strerror', None) or exc}"
            for number, line in enumerate(raw.splitlines(), 1):
                try:
                    record = strict_json.loads(line)
                    receipts.append(Receipt.from_record(record))
                except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
                    return f"{path}: line {number} is not a receipt"
    return spend_of_receipts(receipts, day)


class SpendLedger:
    """The running total of one daemon, loaded at start and saved after each job.

    A ledger that is there but cannot be read or trusted (not a regular file, not JSON,
    a figure out of range) leaves :attr:`needs_rebuild` set and counts the day as
    untrusted, so the cap fails closed until :meth:`settle` decides. A missing one
    (a first start, or deleted) sets :attr:`missing`.
    """

    def __init__(self, path: Path, now: float | None = None) -> None:
        self.path = path
        moment = time.time() if now is None else now
        self.spend = Spend(utc_day(moment))
        self.needs_rebuild: str | None = None
        """Why the ledger could not be used, until :meth:`settle` has dealt with it."""
        self.missing = False
        """There was no ledger, until :meth:`settle` has written one."""
        try:
            loaded = parse_spend(read_file(path, LEDGER_MAX_BYTES))
        except FileNotFoundError:
            self.missing = True
            return
        except (OSError, MemorydError) as exc:
            loaded = f"cannot read it: {getattr(exc, 'strerror', None) or exc}"
        if isinstance(loaded, Spend):
            self.spend = loaded
            return
        self.needs_rebuild = loaded
        self.spend = Spend(self.spend.day, untrusted=_untrusted(loaded))

    def settle(self, rebuilt: Spend | str, now: float) -> None:
        """After a ledger that could not be used, or was missing: adopt the total rebuilt
        from the receipts, or (``rebuilt`` is why it could not be rebuilt) keep today's cap
        reached, and say which once in the log; saved either way."""
        why = self.needs_rebuild or "missing"
        self.needs_rebuild, self.missing = None, False
        if isinstance(rebuilt, Spend):
            self.spend = rebuilt
            (log.info if why == "missing" else log.warning)(
                "spend_ledger_rebuilt",
                path=str(self.path),
                was=why,
                cost_usd=round(rebuilt.cost_usd, 6),
                tokens=rebuilt.tokens,
            )
        else:
            self.spend = Spend(utc_day(now), untrusted=_untrusted(f"{why}; {rebuilt}"))
            log.warning(
                "spend_ledger_untrusted",
                path=str(self.path),
                reason=why,
                rebuild=rebuilt,
                action="the daily cap counts as reached until the next UTC day",
            )
        self._save()

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
            data = strict_json.dumps_line(asdict(self.spend))
            atomic_write(self.path, data, 0o600, root=self.path.parent)
        except OSError as exc:
            log.warning("spend_ledger_unwritable", path=str(self.path), error=exc.strerror)


def _untrusted(why: str) -> str:
    return f"the spend ledger cannot be trusted ({why}), so today's cap counts as reached"


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
