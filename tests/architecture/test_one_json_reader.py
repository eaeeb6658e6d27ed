"""One JSON reader for everything memoryd parses from disk or the wire: nesting deeper
than 200, NaN, Infinity and numbers beyond a double are refused in words, never a
RecursionError or OverflowError (a ``[`` x 100,000 state.json stopped the daemon at
start), and whatever a reader takes it can walk and write again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd import strict_json
from memoryd.compaction.strategies.checkpoint import load_checkpoint
from memoryd.config.settings import load_settings, settings_for_workspace
from memoryd.daemon.telemetry import salvaged_since
from memoryd.errors import CheckpointParseError, ConfigError
from memoryd.published.events import read_events
from memoryd.published.monitor import read_monitors
from memoryd.published.state import read_state
from memoryd.receipts.pricing import DEFAULT_PRICES, cost_usd
from memoryd.receipts.records import build_receipt, read_receipts, receipt_line
from memoryd.receipts.totals import history_totals
from memoryd.search.history import RawLine, parse_message
from memoryd.stores.entries import parse_store
from memoryd.summary.checkpoint_prompt import parse_compaction_result
from memoryd.tokens import LLMUsage
from memoryd.workspace import Workspace

DEEP = b"[" * 100_000
NESTED_EVENT = (
    b'{"ts":"2026-11-23T10:00:00.000Z","type":"salvaged_lines","lines":'
    + b"[" * 50_000
    + b"]" * 50_000
    + b"}"
)
NOT_JSON_NUMBERS = (b'{"x": 1e400}', b'{"x": Infinity}', b'{"x": NaN}', b'{"x": -Infinity}')
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=30,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def nest(value: Any, levels: int) -> Any:
    for level in range(levels):
        value = [value] if level % 2 else {"k[{": value}
    return value


@given(JSON, st.integers(0, 12), st.integers(0, 12))
def test_nested_deeper_is_exactly_the_nesting_depth(value: Any, levels: int, limit: int) -> None:
    nested = nest(value, levels)
    assert strict_json.nested_deeper(nested, limit) == (depth(nested) > limit)


@given(JSON, st.integers(0, 250))
def test_loads_refuses_exactly_what_nests_deeper_than_the_limit(value: Any, levels: int) -> None:
    """Whatever the brackets inside strings (the keys here hold some)."""
    nested = nest(value, levels)
    text = json.dumps(nested)
    if depth(nested) > strict_json.MAX_DEPTH:
        with pytest.raises(strict_json.JSONProblem, match="too deeply nested"):
            strict_json.loads(text)
    else:
        assert strict_json.loads(text) == nested


def test_nesting_up_to_the_limit_is_taken_and_deeper_is_refused() -> None:
    limit = strict_json.MAX_DEPTH
    assert depth(strict_json.loads("[" * limit + "]" * limit)) == limit
    for text in ("[" * (limit + 1) + "]" * (limit + 1), DEEP, NESTED_EVENT):
        with pytest.raises(strict_json.JSONProblem, match="too deeply nested"):
            strict_json.loads(text)
    assert strict_json.loads(json.dumps({"text": "[" * 10_000})) == {"text": "[" * 10_000}


@pytest.mark.parametrize("raw", NOT_JSON_NUMBERS)
def test_numbers_other_parsers_cannot_read_are_refused(raw: bytes) -> None:
    with pytest.raises(strict_json.JSONProblem):
        strict_json.loads(raw)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    folder = tmp_path / "ws"
    (folder / ".memoryd" / "monitors").mkdir(parents=True)
    (folder / "conversation.jsonl").write_bytes(b"")
    return Workspace(folder)


@pytest.mark.parametrize("raw", [DEEP, *NOT_JSON_NUMBERS])
def test_every_file_reader_leaves_out_what_it_cannot_take(ws: Workspace, raw: bytes) -> None:
    """state.json, events, receipts, a monitor's file, checkpoint.json: the line or the file
    is left out (derived data) or skipped, and the next reader carries on."""
    ws.state.write_bytes(raw)
    (ws.meta / "monitors" / "agent.json").write_bytes(raw)
    ws.checkpoint.write_bytes(raw)
    good_event = b'{"ts":"t","type":"x","workspace":"w"}\n'
    ws.events.write_bytes(raw + b"\n" + good_event)
    receipt = receipt_line(
        build_receipt(
            job="j",
            strategy="narrative",
            started=0,
            finished=0,
            outcome="completed",
            reason="ok",
            before=(1, 1),
            after=(1, 1),
            prices={},
        )
    )
    (ws.meta / "receipts.jsonl").write_bytes(raw + b"\n" + receipt)
    assert read_state(ws) is None
    assert read_monitors(ws.path, 300, 0) == []
    assert load_checkpoint(ws) is None
    assert [event["type"] for event in read_events(ws.events)] == ["x"]
    assert [r.job for r in read_receipts(ws)] == ["j"]
    assert parse_message(RawLine("conversation.jsonl", 0, raw + b"\n")) is None
    assert parse_store(raw + b"\n")[0].value is None


def test_the_salvaged_lines_count_reads_past_a_nested_event(tmp_path: Path) -> None:
    """The metrics' reading of events.jsonl: a nested event raised RecursionError in the
    daemon's loop; it is skipped, and the next event is counted."""
    events = tmp_path / "events.jsonl"
    good = b'{"ts":"t","type":"salvaged_lines","workspace":"w","lines":3}\n'
    events.write_bytes(NESTED_EVENT + b"\n" + good)
    assert salvaged_since(events, 0) == 3


@pytest.mark.parametrize(
    "receipt_change",
    [{"cost_usd": 10**400}, {"cost_usd": -1.0}, {"retention": {"before": 10**400}}],
)
def test_history_totals_stay_finite_whatever_the_receipts_say(
    ws: Workspace, receipt_change: dict[str, Any]
) -> None:
    """A receipt with a figure out of range is skipped: the totals, and so ``history``'s
    output, never say inf or NaN."""
    lines = []
    for job in ("a", "b"):
        record = build_receipt(
            job=job,
            strategy="narrative",
            started=0,
            finished=0,
            outcome="completed",
            reason="ok",
            before=(1, 1),
            after=(1, 1),
            prices={},
            model="claude-haiku-4-5",
            llm=LLMUsage(1, 1000, 100),
        ).to_record()
        if job == "b":
            record |= receipt_change
        lines.append(json.dumps(record).encode() + b"\n")
    (ws.meta / "receipts.jsonl").write_bytes(b"".join(lines))
    receipts = read_receipts(ws)
    assert [r.job for r in receipts] == ["a"]
    json.dumps(history_totals(receipts).to_record(), allow_nan=False)


def test_a_cost_is_never_infinite() -> None:
    price = DEFAULT_PRICES["claude-opus-4-1"]
    assert cost_usd(price, 10**400, 0) is None
    assert cost_usd(price, 10**17, 10**17) is None  # beyond any real bill
    assert cost_usd(price, 1000, 100) == pytest.approx(0.0225)


def test_a_price_beyond_the_bound_is_refused(tmp_path: Path, clean_environment: Path) -> None:
    """A price of 1e308 per million tokens made one job's cost infinity."""
    config = tmp_path / "memoryd.toml"
    config.write_text('[prices."m"]\ninput = 1e308\noutput = 1.0\n')
    with pytest.raises(ConfigError, match=r"prices\.m\.input"):
        load_settings(config, env={})


@pytest.mark.parametrize(
    "answer", ["[" * 100_000, '{"completed": [], "pending": [NaN]}', '{"completed": 1e400}']
)
def test_a_checkpoint_answer_from_the_llm_is_refused_in_words(answer: str) -> None:
    with pytest.raises(CheckpointParseError, match="not valid JSON"):
        parse_compaction_result(answer)


def test_deep_configuration_is_refused_in_one_line(
    ws: Workspace, tmp_path: Path, clean_environment: Path
) -> None:
    """TOML files and JSON in MEMORYD_* variables: ConfigError, never RecursionError."""
    config = tmp_path / "memoryd.toml"
    config.write_text("roots = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_settings(config, env={})
    with pytest.raises(ConfigError, match="too deeply nested"):
        load_settings(env={"MEMORYD_ROOTS": "[" * 100_000})
    ws.config.write_text("token_limit = " + "[" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        settings_for_workspace(load_settings(env={}).settings, ws.path)


def memoryd(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def test_history_never_prints_infinity_or_nan(ws: Workspace) -> None:
    """A receipt with ``"cost_usd": Infinity`` (or 1e400, or NaN in its retention) made
    ``history`` print ``$inf`` and ``history --json`` print NaN, which is not JSON."""
    good = build_receipt(
        job="good",
        strategy="narrative",
        started=0,
        finished=0,
        outcome="completed",
        reason="ok",
        before=(1, 1),
        after=(1, 1),
        prices={},
        model="claude-haiku-4-5",
        llm=LLMUsage(1, 1000, 100),
    )
    line = receipt_line(good)
    lines = [
        line.replace(b'"job":"good"', b'"job":"inf"').replace(
            b'"cost_usd":0.0015', b'"cost_usd":Infinity'
        ),
        line.replace(b'"job":"good"', b'"job":"big"').replace(
            b'"cost_usd":0.0015', b'"cost_usd":1e400'
        ),
        line.replace(b'"job":"good"', b'"job":"nan"').replace(
            b'"retention":null', b'"retention":{"before":NaN}'
        ),
        line,
    ]
    assert all(b"good" not in x for x in lines[:3]) and len(set(lines)) == 4
    (ws.meta / "receipts.jsonl").write_bytes(b"".join(lines))
    table = memoryd("history", str(ws.path))
    assert table.returncode == 0, table.stderr
    assert "inf" not in table.stdout and "nan" not in table.stdout.lower()
    as_json = memoryd("history", str(ws.path), "--json")
    assert as_json.returncode == 0, as_json.stderr
    shown = strict_json.loads(as_json.stdout)
    assert [r["job"] for r in shown["receipts"]] == ["good"]


def test_a_price_of_1e308_is_refused_before_a_job_writes_infinity(
    ws: Workspace, tmp_path: Path
) -> None:
    config = tmp_path / "memoryd.toml"
    config.write_text('[prices."claude-haiku-4-5"]\ninput = 1e308\noutput = 1.0\n')
    result = memoryd("summarize", str(ws.path), "--force", "--config", str(config))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "prices.claude-haiku-4-5.input" in line and "less than or equal to 1000000" in line


LINE_LIKE = st.one_of(
    st.text(max_size=60),
    JSON.map(json.dumps).flatmap(
        lambda text: st.tuples(
            st.sampled_from(["", " ", "\n", "\t", "\u00a0", "x", "]"]),
            st.just(text),
            st.sampled_from(["", "\n", " \r\n", "\u00a0", "x", " 1", "{}"]),
        ).map("".join)
    ),
)


@given(LINE_LIKE)
def test_the_fast_path_reads_what_the_decoder_reads(text: str) -> None:
    """A line handed straight to the C scanner gives the value (or the refusal, in the
    same words) that the whole decoder gives."""
    try:
        expected: Any = strict_json._DECODER.decode(text)
    except ValueError as exc:
        with pytest.raises(ValueError) as caught:
            strict_json.loads(text)
        if isinstance(exc, json.JSONDecodeError):
            assert isinstance(caught.value, strict_json.JSONProblem)
            assert caught.value.detail == f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        return
    assert strict_json.loads(text) == expected
