"""The daily LLM spend cap: the pure total and cap rules, and the ledger file."""

from __future__ import annotations

import calendar
import json
import os
import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from memoryd.budget import (
    Spend,
    SpendLedger,
    add_spend,
    cap_reason,
    ledger_path,
    next_utc_day,
    utc_day,
)

NOON = float(calendar.timegm((2026, 11, 23, 12, 0, 0, 0, 0, 0)))
NEXT_DAY = NOON + 86_400


def test_utc_day_and_next_midnight() -> None:
    assert utc_day(NOON) == "2026-11-23"
    assert next_utc_day(NOON) == calendar.timegm((2026, 11, 24, 0, 0, 0, 0, 0, 0))
    assert utc_day(next_utc_day(NOON)) == "2026-11-24"
    assert utc_day(next_utc_day(NOON) - 0.001) == "2026-11-23"


def test_add_spend_accumulates_within_a_day_and_restarts_on_the_next() -> None:
    spend = add_spend(Spend("2026-11-23"), "2026-11-23", 0.5, 1000)
    spend = add_spend(spend, "2026-11-23", 0.25, 500)
    assert (spend.cost_usd, spend.tokens) == (0.75, 1500)
    fresh = add_spend(spend, "2026-11-24", 0.1, 10)
    assert fresh == Spend("2026-11-24", 0.1, 10)


@given(
    cost=st.floats(min_value=0, max_value=100, allow_nan=False),
    tokens=st.integers(min_value=0, max_value=10**9),
)
def test_caps_of_zero_are_off(cost: float, tokens: int) -> None:
    assert cap_reason(Spend("2026-11-23", cost, tokens), "2026-11-23", 0, 0) is None


def test_cap_reason_names_the_cap_reached() -> None:
    day = "2026-11-23"
    assert cap_reason(Spend(day, 0.99, 10), day, 1.0, 0) is None
    reason = cap_reason(Spend(day, 1.0, 10), day, 1.0, 0)
    assert reason is not None and "$1 daily cap" in reason
    reason = cap_reason(Spend(day, 0.0, 2000), day, 0, 2000)
    assert reason is not None and "2,000 daily cap" in reason
    assert cap_reason(Spend(day, 5.0, 10**6), "2026-11-24", 1.0, 10) is None  # a new day


def test_ledger_survives_a_new_process_and_resets_the_next_day(tmp_path: Path) -> None:
    path = tmp_path / "state" / "memoryd" / "spend-x.json"
    ledger = SpendLedger(path, NOON)
    assert ledger.today(NOON) == Spend("2026-11-23")
    ledger.record(0.5, 1200, NOON)
    ledger.record(0.25, 300, NOON + 60)
    ledger.mark_exhausted("cap", NOON + 61)
    reloaded = SpendLedger(path, NOON + 120)
    assert reloaded.today(NOON + 120) == Spend("2026-11-23", 0.75, 1500, "cap")
    assert reloaded.today(NEXT_DAY) == Spend("2026-11-24")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["tokens"] == 1500
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


def test_a_job_that_spent_nothing_does_not_rewrite_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "spend.json"
    SpendLedger(path, NOON).record(0.0, 0, NOON)
    assert not path.exists()


def test_a_garbled_ledger_is_reported_and_counting_starts_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "spend.json"
    path.write_text('{"day": "2026-11-23", "cost_usd": "lots"')
    with capture_logs() as logs:
        ledger = SpendLedger(path, NOON)
    assert ledger.today(NOON) == Spend("2026-11-23")
    assert [entry["event"] for entry in logs] == ["spend_ledger_invalid"]


def test_ledger_path_is_per_daemon_under_xdg_state_home(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    first = ledger_path(env, [Path("/a"), Path("/b")])
    assert first.parent == tmp_path / "xdg" / "memoryd"
    assert first == ledger_path(env, [Path("/b"), Path("/a")])
    assert first != ledger_path(env, [Path("/a")])
    default = ledger_path({"HOME": str(tmp_path)}, [Path("/a")])
    assert default.parent == tmp_path / ".local" / "state" / "memoryd"
    assert os.path.basename(default).startswith("spend-")
