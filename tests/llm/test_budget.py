"""The daily LLM spend cap: the pure total and cap rules, and the ledger file."""

from __future__ import annotations

import calendar
import dataclasses
import json
import math
import os
import stat
import time
from pathlib import Path

import pytest
from conftest import SettingsFactory
from fs_helpers import make_special
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from memoryd.clock import iso_ms
from memoryd.daemon.telemetry import Telemetry
from memoryd.receipts.records import build_receipt
from memoryd.receipts.spend_cap import (
    Spend,
    SpendLedger,
    add_spend,
    cap_reason,
    ledger_path,
    next_utc_day,
    parse_spend,
    rebuild_spend,
    utc_day,
)
from memoryd.tokens import LLMUsage

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


UNTRUSTED_LEDGERS = {
    "garbled": b'{"day": "2026-11-23", "cost_usd": "lots"',
    "tokens 1e400": b'{"day": "2026-11-23", "cost_usd": 0.5, "tokens": 1e400}',
    "Infinity": b'{"day": "2026-11-23", "cost_usd": Infinity, "tokens": 10}',
    "a huge integer": b'{"day": "2026-11-23", "cost_usd": 1' + b"0" * 400 + b', "tokens": 1}',
    "negative": b'{"day": "2026-11-23", "cost_usd": -5, "tokens": 10}',
    "tokens true": b'{"day": "2026-11-23", "cost_usd": 0, "tokens": true}',
    "no day": b'{"day": "today", "cost_usd": 0, "tokens": 0}',
    "deep": b"[" * 100_000,
    "not an object": b"[1, 2]",
}


@pytest.mark.parametrize("content", sorted(UNTRUSTED_LEDGERS))
def test_a_ledger_that_cannot_be_trusted_counts_as_the_cap_reached(
    tmp_path: Path, content: str
) -> None:
    """Garbled, non-finite, out of range: never an exception, never a count from zero.
    Until it is settled, the day counts as over any cap that is set (caps off: none)."""
    path = tmp_path / "spend.json"
    path.write_bytes(UNTRUSTED_LEDGERS[content])
    ledger = SpendLedger(path, NOON)
    assert ledger.needs_rebuild is not None
    spend = ledger.today(NOON)
    reason = cap_reason(spend, spend.day, 100.0, 0)
    assert reason is not None and "spend ledger cannot be trusted" in reason
    assert cap_reason(spend, spend.day, 0, 0) is None
    assert ledger.today(NEXT_DAY) == Spend("2026-11-24")


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket", "/dev/zero"])
def test_a_ledger_that_is_not_a_regular_file_is_refused_without_waiting(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO with no writer, a folder, a socket, a symlink to /dev/zero: refused at once
    (the start of the daemon waited on a FIFO forever), and the day counts as capped."""
    path = tmp_path / "spend.json"
    listener = make_special(path, kind)
    try:
        ledger = SpendLedger(path, NOON)
    finally:
        if listener is not None:
            listener.close()
    assert ledger.needs_rebuild is not None and "not a regular file" in ledger.needs_rebuild
    assert ledger.today(NOON).untrusted is not None


def test_a_ledger_rebuilt_from_the_receipts_is_adopted_and_saved(tmp_path: Path) -> None:
    path = tmp_path / "spend.json"
    path.write_bytes(UNTRUSTED_LEDGERS["tokens 1e400"])
    ledger = SpendLedger(path, NOON)
    with capture_logs() as logs:
        ledger.settle(Spend("2026-11-23", 0.25, 700), NOON)
    assert ledger.needs_rebuild is None
    assert SpendLedger(path, NOON).today(NOON) == Spend("2026-11-23", 0.25, 700)
    assert [entry["event"] for entry in logs] == ["spend_ledger_rebuilt"]


def test_a_ledger_that_cannot_be_rebuilt_keeps_the_day_capped_across_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "spend.json"
    path.write_bytes(UNTRUSTED_LEDGERS["Infinity"])
    ledger = SpendLedger(path, NOON)
    with capture_logs() as logs:
        ledger.settle("receipts.jsonl: line 3 is not a receipt", NOON)
    assert [entry["event"] for entry in logs] == ["spend_ledger_untrusted"]
    again = SpendLedger(path, NOON + 60)  # a restart reads a valid ledger: still capped
    assert again.needs_rebuild is None
    reason = cap_reason(again.today(NOON + 60), "2026-11-23", 0, 10**9)
    assert reason is not None and "line 3 is not a receipt" in reason
    again.record(0.1, 10, NEXT_DAY)  # the next day counts from zero
    assert SpendLedger(path, NEXT_DAY).today(NEXT_DAY) == Spend("2026-11-24", 0.1, 10)


def _receipt_line(finished_at: str, cost: float | None, tokens: int) -> bytes:
    receipt = build_receipt(
        job="j",
        strategy="narrative",
        started=NOON,
        finished=NOON,
        outcome="completed",
        reason="ok",
        before=(10, 100),
        after=(5, 50),
        prices={},
        model="claude-haiku-4-5",
        llm=LLMUsage(1, tokens, 0),
    )
    record = receipt.to_record() | {"finished_at": finished_at, "cost_usd": cost}
    return json.dumps(record).encode() + b"\n"


def test_the_days_spend_is_rebuilt_from_every_workspaces_receipts(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for name, lines in {
        "a": [_receipt_line("2026-11-23T01:00:00.000Z", 0.5, 1000)],
        "b/c": [
            _receipt_line("2026-11-22T23:59:59.000Z", 9.0, 9000),  # yesterday
            _receipt_line("2026-11-23T11:00:00.000Z", None, 300),  # unknown price
        ],
    }.items():
        (root / name / ".memoryd").mkdir(parents=True)
        (root / name / "conversation.jsonl").write_bytes(b"")
        (root / name / ".memoryd" / "receipts.jsonl").write_bytes(b"".join(lines))
    assert rebuild_spend([root], 4, "2026-11-23") == Spend("2026-11-23", 0.5, 1300)


@pytest.mark.parametrize("hostile", ["fifo", "a line that is not a receipt", "Infinity"])
def test_receipts_that_cannot_be_read_are_no_rebuild(tmp_path: Path, hostile: str) -> None:
    ws = tmp_path / "root" / "ws"
    (ws / ".memoryd").mkdir(parents=True)
    (ws / "conversation.jsonl").write_bytes(b"")
    receipts = ws / ".memoryd" / "receipts.jsonl"
    if hostile == "fifo":
        os.mkfifo(receipts)
    elif hostile == "Infinity":
        receipts.write_bytes(
            _receipt_line("2026-11-23T01:00:00.000Z", 1.0, 5).replace(
                b'"cost_usd": 1.0', b'"cost_usd": Infinity'
            )
        )
    else:
        receipts.write_bytes(_receipt_line("2026-11-23T01:00:00.000Z", 1.0, 5) + b"{}\n")
    reason = rebuild_spend([tmp_path / "root"], 4, "2026-11-23")
    assert isinstance(reason, str) and str(receipts) in reason


@pytest.mark.parametrize("capped", [True, False])
def test_a_missing_ledger_is_rebuilt_at_start_when_a_cap_is_set(
    tmp_path: Path, make_settings: SettingsFactory, capped: bool
) -> None:
    """Deleting the ledger does not lift the cap: the day's receipts are summed again."""
    root = tmp_path / "root"
    (root / "ws" / ".memoryd").mkdir(parents=True)
    (root / "ws" / "conversation.jsonl").write_bytes(b"")
    now = time.time()
    line = _receipt_line(iso_ms(now), 0.5, 1000)
    (root / "ws" / ".memoryd" / "receipts.jsonl").write_bytes(line)
    cap = "1" if capped else "0"
    settings = make_settings(roots=[str(root)], **{"summarizer.max_cost_per_day_usd": cap})
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    telemetry = Telemetry(settings, env, [root])
    telemetry.settle_ledger(now)
    spend = telemetry.cap.ledger.today(now)
    if capped:
        assert (spend.cost_usd, spend.tokens) == (0.5, 1000)
        assert telemetry.cap.ledger.path.exists()
    else:
        assert (spend.cost_usd, spend.tokens) == (0.0, 0)
        assert not telemetry.cap.ledger.path.exists()


@given(
    costs=st.lists(
        st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**30), 10**30),
        max_size=20,
    ),
    tokens=st.lists(st.integers(-(10**30), 10**30), max_size=20),
)
def test_a_saved_total_is_always_one_the_ledger_reads_back(
    costs: list[float], tokens: list[int]
) -> None:
    """Whatever jobs report, the total stays finite and within bounds, so the ledger
    written is never refused at the next start."""
    spend = Spend("2026-11-23")
    for cost, count in zip(costs, tokens, strict=False):
        spend = add_spend(spend, "2026-11-23", float(cost), count)
    assert parse_spend(json.dumps(dataclasses.asdict(spend), allow_nan=False).encode()) == spend


@given(
    st.binary(max_size=200)
    | st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=9), inner),
        max_leaves=12,
    ).map(
        lambda value: json.dumps(
            {"day": "2026-11-23", "cost_usd": value, "tokens": value}
            if not isinstance(value, dict)
            else value
        ).encode()
    )
)
def test_parsing_a_ledger_never_raises(raw: bytes) -> None:
    result = parse_spend(raw)
    assert isinstance(result, (Spend, str))
    if isinstance(result, Spend):
        assert math.isfinite(result.cost_usd) and result.cost_usd >= 0


def test_ledger_path_is_per_daemon_under_xdg_state_home(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    first = ledger_path(env, [Path("/a"), Path("/b")])
    assert first.parent == tmp_path / "xdg" / "memoryd"
    assert first == ledger_path(env, [Path("/b"), Path("/a")])
    assert first != ledger_path(env, [Path("/a")])
    default = ledger_path({"HOME": str(tmp_path)}, [Path("/a")])
    assert default.parent == tmp_path / ".local" / "state" / "memoryd"
    assert os.path.basename(default).startswith("spend-")
