"""Receipts: the record's fields, the file, totals, and the price table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memoryd.errors import UnsafePathError
from memoryd.receipts.pricing import DEFAULT_PRICES, ModelPrice, cost_usd, price_for
from memoryd.receipts.records import (
    Receipt,
    RetentionFigures,
    SummarizedSpan,
    append_receipt,
    read_receipts,
    receipts_path,
)
from memoryd.receipts.totals import history_totals, latest, render_history
from memoryd.tokens import LLMUsage
from memoryd.workspace import Workspace

FIELDS = {
    "job", "strategy", "backend", "model", "started_at", "finished_at", "duration_ms",
    "outcome", "reason", "messages_before", "messages_after", "tokens_before", "tokens_after",
    "summarized", "pins_kept", "retention", "llm", "cost_usd", "trigger", "masked",
    "messages_arrived", "tokens_arrived", "why", "aim",
}  # fmt: skip


def _receipt(job: str, outcome: str = "completed", **overrides: object) -> Receipt:
    values: dict[str, object] = dict(
        job=job,
        strategy="narrative",
        backend="anthropic",
        model="claude-haiku-4-5",
        started_at=f"2026-11-23T10:00:0{job[-1]}.000Z",
        finished_at=f"2026-11-23T10:00:0{job[-1]}.500Z",
        duration_ms=500,
        outcome=outcome,
        reason="replaced 10 messages",
        messages_before=20,
        messages_after=11,
        tokens_before=9000,
        tokens_after=4000,
        summarized=SummarizedSpan(10, "m1", "m10", ".memoryd/archive/a.jsonl", 0, 1234),
        pins_kept=1,
        retention=RetentionFigures(0.5, 1.0, 0),
        llm=LLMUsage(2, 3000, 400, 1000, 0),
        cost_usd=0.0051,
    )
    values.update(overrides)
    return Receipt(**values)  # type: ignore[arg-type]


def test_a_receipt_line_has_exactly_the_documented_fields(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    append_receipt(workspace, _receipt("j1"))
    record = json.loads(receipts_path(workspace).read_text())
    assert set(record) == FIELDS
    assert set(record["summarized"]) == {
        "count",
        "firstId",
        "lastId",
        "archive",
        "offset",
        "length",
    }
    assert set(record["retention"]) == {"before", "after", "missing"}
    assert {"calls", "input_tokens", "output_tokens", "cache_read_tokens"} <= set(record["llm"])


def test_receipts_round_trip_and_skip_torn_lines(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    first, second = _receipt("j1"), _receipt("j2", "failed", summarized=None, retention=None)
    append_receipt(workspace, first)
    with receipts_path(workspace).open("ab") as file:
        file.write(b'{"not": "a receipt"}\n{"job": "torn\n')
    append_receipt(workspace, second)
    back = read_receipts(workspace)
    assert [r.job for r in back] == ["j1", "j2"]
    assert back[0].to_record() == first.to_record()
    assert back[1].summarized is None and back[1].workspace == str(tmp_path)


def test_receipts_are_never_written_through_a_symlink(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "ws")
    workspace.meta.mkdir(parents=True)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    os.symlink(outside, receipts_path(workspace))
    with pytest.raises(UnsafePathError, match="symlink"):
        append_receipt(workspace, _receipt("j1"))
    assert outside.read_text() == ""


def test_totals_count_saved_tokens_and_cost() -> None:
    receipts = [
        _receipt("j1"),
        _receipt("j2", "failed", summarized=None, tokens_after=9000, cost_usd=0.001),
        _receipt("j3", "ineffective", model="mystery", cost_usd=None),
    ]
    totals = history_totals(receipts)
    assert totals.jobs == 3 and totals.completed == 1 and totals.failed == 1
    assert totals.ineffective == 1
    assert totals.tokens_saved == 5000 * 2
    assert totals.cost_usd == pytest.approx(0.0061)
    assert totals.unpriced_jobs == 1
    table = render_history(receipts, totals, many=False)
    assert "10,000 tokens saved" in table and "$0.0061" in table
    assert "1 job at unknown prices" in table


def test_latest_keeps_the_most_recent() -> None:
    receipts = [_receipt("j3"), _receipt("j1"), _receipt("j2")]
    assert [r.job for r in latest(receipts, 2)] == ["j2", "j3"]
    assert latest(receipts, 0) == []


def test_prices_of_known_unknown_dated_and_configured_models() -> None:
    haiku = price_for("claude-haiku-4-5", {})
    assert haiku == DEFAULT_PRICES["claude-haiku-4-5"]
    assert price_for("claude-haiku-4-5-20251001", {}) == haiku
    assert price_for("some-other-model", {}) is None
    custom = ModelPrice(input=2.0, output=4.0)
    assert price_for("some-other-model", {"some-other-model": custom}) == custom
    assert price_for("claude-haiku-4-5", {"claude-haiku-4-5": custom}) == custom


def test_cost_counts_cache_reads_and_writes_at_their_rates() -> None:
    price = ModelPrice(input=1.0, output=5.0)
    assert cost_usd(price, 1_000_000, 0) == pytest.approx(1.0)
    assert cost_usd(price, 0, 1_000_000) == pytest.approx(5.0)
    assert cost_usd(price, 0, 0, cache_creation_tokens=1_000_000) == pytest.approx(1.25)
    assert cost_usd(price, 0, 0, cache_read_tokens=1_000_000) == pytest.approx(0.1)
    assert cost_usd(None, 1000, 1000) is None
