"""Recall with a budget: a query's length, terms and prefixes are bounded before it runs
and its time while it runs, a cancelled MCP call stops its search, and a query that
starts with ``-`` is a query. The slow queries of the report run as real processes:
200 prefix terms (49 s on 181 messages), 9 KB of words (past 300 s), a ``--raw NEAR``
(past 4.5 minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from daemon_harness import clean_env
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent

from memoryd.errors import UsageError
from memoryd.search.archive import recall, update_index
from memoryd.search.cost import QueryTooCostly, prefixes
from memoryd.search.query import (
    MAX_QUERY_CHARS,
    MAX_RAW_TERMS,
    MAX_TERMS,
    QueryStopped,
    check_timeout,
    plain_terms,
    to_match,
)

WORDS = ["aa", "ab", "ac", "ad", "ae", "af", "ag", "ah"]
SIXTEEN_PREFIXES = " ".join(f"{word}*" for word in WORDS * 2)
NEAR = f"NEAR({' '.join(WORDS * 2)}, 100)"
PHRASES = " ".join('"' + " ".join(WORDS[i:] + WORDS[:i]) + '"' for i in range(8))


def archive_of(folder: Path, messages: int, repeats: int) -> Path:
    """A workspace whose archive holds ``messages`` messages of ``8 x repeats`` short words
    (and one that mentions postgres), indexed."""
    (folder / ".memoryd" / "archive").mkdir(parents=True)
    (folder / "conversation.jsonl").write_bytes(b"")
    text = " ".join(WORDS * repeats)
    lines = [
        json.dumps({"id": f"m{n}", "role": "user", "content": text, "timestamp": n})
        for n in range(messages)
    ]
    lines.append(json.dumps({"id": "pg", "role": "user", "content": "use -postgres here"}))
    archive = folder / ".memoryd" / "archive" / "conversation-20260101T000000Z-abcd.jsonl"
    archive.write_text("\n".join(lines) + "\n")
    update_index(folder)
    return folder


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 messages of 800 words: before snippets were made for the hits only, 16
    prefix terms took 40 s here."""
    return archive_of(tmp_path_factory.mktemp("slow") / "ws", 2000, 100)


def memoryd(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORYD_SUMMARIZER__BACKEND": "extractive"},
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("memoryd: ") and words in line, line


# ----- limits before the query runs ---------------------------------------------------------


def test_a_query_is_bounded_in_length_terms_and_prefixes() -> None:
    assert len(plain_terms(" ".join(f"w{n}" for n in range(MAX_TERMS)))) == MAX_TERMS
    with pytest.raises(UsageError, match=f"at most {MAX_TERMS}"):
        plain_terms(" ".join(f"w{n}" for n in range(MAX_TERMS + 1)))
    with pytest.raises(UsageError, match="characters long"):
        to_match("w " * MAX_QUERY_CHARS)
    assert plain_terms("ab* x'y*") == ['"ab"*', '"x\'y"*']
    for short in ("a*", "é*", "-a*"):
        with pytest.raises(UsageError, match="too short"):
            plain_terms(f"deploy {short}")
    for raw in ("a*", 'deploy AND "b" *', "NEAR(x* y)", "body:a*"):
        with pytest.raises(UsageError, match="prefix needs at least 2"):
            to_match(raw, raw=True)
    assert to_match("ab* AND cd*", raw=True).all_words == "ab* AND cd*"


@pytest.mark.parametrize("seconds", [0, -1, float("inf"), float("nan"), 3601, True])
def test_a_time_budget_outside_its_range_is_refused(seconds: float) -> None:
    with pytest.raises(UsageError, match="--timeout"):
        check_timeout(seconds)


def test_the_report_s_slow_queries_are_refused_at_once_as_processes(slow: Path) -> None:
    """200 prefix terms and 9 KB of words: exit 2, one line, before any search."""
    refused(memoryd("recall", str(slow), " ".join(["a*"] * 200)), 2, "too short")
    refused(memoryd("recall", str(slow), " ".join(["ab*"] * 200)), 2, "at most 16")
    refused(memoryd("recall", str(slow), "the deploy error " * 530), 2, "characters long")


# ----- the time budget ----------------------------------------------------------------------


def test_a_query_past_its_budget_is_stopped_with_a_clear_error(slow: Path) -> None:
    with pytest.raises(QueryStopped, match="time budget"):
        recall(slow, SIXTEEN_PREFIXES, timeout=1e-9)
    with pytest.raises(QueryStopped, match="cancelled"):
        recall(slow, SIXTEEN_PREFIXES, cancelled=lambda: True)


def test_heavy_queries_answer_within_the_budget(slow: Path) -> None:
    """Snippets only for the hits: 16 prefix terms and 8 phrases over 2,000 long messages
    rank and answer (this query ran 40 s when every match got a snippet)."""
    for query, raw in ((SIXTEEN_PREFIXES, False), (PHRASES, False), (NEAR, True)):
        hits = recall(slow, query, limit=5, raw=raw, timeout=60)
        assert len(hits) == 5 and all("**" in hit.snippet for hit in hits)


def test_a_raw_near_query_is_stopped_by_its_budget_as_a_process(slow: Path) -> None:
    """The command line ends it with one line (exit 1) instead of running for minutes."""
    refused(memoryd("recall", str(slow), "--raw", NEAR, "--timeout", "0.000001"), 1, "budget")
    refused(memoryd("recall", str(slow), "deploy", "--timeout", "inf"), 2, "--timeout")


# ----- a query that starts with a dash ------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("{ws}", "-postgres"),
        ("{ws}", "-postgres", "--json"),
        ("--json", "{ws}", "--", "-postgres"),
        ("{ws}", "--limit", "1", "-postgres here"),
    ],
)
def test_a_query_that_starts_with_a_dash_is_a_query(tmp_path: Path, argv: tuple[str, ...]) -> None:
    """``recall WS -postgres`` was refused as an unknown option."""
    ws = archive_of(tmp_path / "ws", 3, 1)
    result = memoryd("recall", *(word.replace("{ws}", str(ws)) for word in argv))
    assert result.returncode == 0, result.stderr
    assert "pg" in result.stdout and "**postgres**" in result.stdout


def test_an_unknown_double_dash_option_is_still_refused(tmp_path: Path) -> None:
    ws = archive_of(tmp_path / "ws", 3, 1)
    refused(memoryd("recall", str(ws), "deploy", "--postgres"), 2, "--postgres")


# ----- MCP: cancellation and hostile workspace arguments ------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mcp_params(ws: Path, home: Path, stderr: Path) -> StdioServerParameters:
    server = [sys.executable, "-m", "memoryd", "mcp", "--workspace", str(ws)]
    return StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'echo $$ > "$MCP_PID"; exec "$0" "$@" 2>>"$MCP_STDERR"', *server],
        env={**clean_env(home), "MCP_STDERR": str(stderr), "MCP_PID": str(home / "pid")},
        cwd=str(home),
    )


@pytest.mark.slow
def test_a_cancelled_mcp_recall_stops_its_search(tmp_path: Path) -> None:
    """The client gives up on a long search (``notifications/cancelled``): the server's
    search thread stops at once instead of running to the end of its query, and the
    next call is answered."""
    ws = archive_of(tmp_path / "ws", 20_000, 100)  # 8 phrases: about 4 s of CPU here
    stderr = tmp_path / "mcp.stderr"
    after_cancel: list[float] = []

    async def session() -> None:
        with anyio.fail_after(120):
            async with Client(mcp_params(ws, tmp_path, stderr)) as client:
                pid = int((tmp_path / "pid").read_text())
                with anyio.move_on_after(0.5) as scope:
                    await client.call_tool("recall", {"query": PHRASES})
                assert scope.cancelled_caught, "the search ended before it could be cancelled"
                await anyio.sleep(0.5)  # the thread notices at its next progress step
                before = cpu_seconds(pid)
                await anyio.sleep(2.0)
                after_cancel.append(cpu_seconds(pid) - before)
                answer = await client.call_tool("recall", {"query": "postgres"})
                assert not answer.is_error
                assert answer.structured_content is not None
                assert [h["id"] for h in answer.structured_content["hits"]] == ["pg"]

    anyio.run(session)
    assert after_cancel[0] < 0.5, f"{after_cancel[0]:.2f} s of CPU after the cancel"
    assert "Traceback" not in stderr.read_text()


@pytest.mark.slow
def test_a_workspace_argument_with_a_nul_or_5000_characters_is_a_tool_error(
    tmp_path: Path,
) -> None:
    """A bare "Error executing tool" and a stack on stderr before: now one line that
    says what is wrong with the path."""
    ws = archive_of(tmp_path / "ws", 3, 1)
    stderr = tmp_path / "mcp.stderr"
    texts: dict[str, str] = {}

    async def session() -> None:
        with anyio.fail_after(60):
            async with Client(mcp_params(ws, tmp_path, stderr)) as client:
                for name, given in (("nul", f"{ws}\x00x"), ("long", "x" * 5000)):
                    for tool, arguments in (
                        ("context_status", {"workspace": given}),
                        ("recall", {"query": "postgres", "workspace": given}),
                    ):
                        result = await client.call_tool(tool, arguments)
                        assert result.is_error, (tool, name)
                        first = result.content[0]
                        assert isinstance(first, TextContent)
                        texts[f"{tool} {name}"] = first.text

    anyio.run(session)
    assert all("\n" not in text for text in texts.values()), texts
    assert "NUL character" in texts["recall nul"] and "longer than" in texts["recall long"]
    assert "NUL character" in texts["context_status nul"]
    assert "longer than" in texts["context_status long"]
    assert "Traceback" not in stderr.read_text()


def test_the_time_budget_covers_every_workspace_of_a_root(tmp_path: Path) -> None:
    """A search over a root stops at its budget instead of skipping to the next
    workspace with the budget spent."""
    for name in ("a", "b"):
        archive_of(tmp_path / "root" / name, 200, 10)
    with pytest.raises(QueryStopped):
        recall(tmp_path / "root", SIXTEEN_PREFIXES, timeout=1e-9)


# ----- the cost bound -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def many_terms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive whose vocabulary is as wide as real transcripts': 40,000 distinct ids
    (``idxa0`` … ``idxa39999``) in 40 messages, and a message about postgres."""
    folder = tmp_path_factory.mktemp("vocab") / "ws"
    (folder / ".memoryd" / "archive").mkdir(parents=True)
    (folder / "conversation.jsonl").write_bytes(b"")
    lines = [
        json.dumps(
            {
                "id": f"m{n}",
                "role": "user",
                "content": " ".join(f"idxa{k}" for k in range(n * 1000, (n + 1) * 1000)),
            }
        )
        for n in range(40)
    ]
    lines.append(json.dumps({"id": "pg", "role": "user", "content": "postgres idxa7 here"}))
    archive = folder / ".memoryd" / "archive" / "conversation-20260101T000000Z-abcd.jsonl"
    archive.write_text("\n".join(lines) + "\n")
    update_index(folder)
    return folder


def test_a_query_whose_prefixes_stand_for_too_many_words_is_refused_before_it_runs(
    many_terms: Path,
) -> None:
    """idxa* stands for 40,000 index terms: refused at once, one line naming the prefix,
    exit 2, root-wide too; a longer prefix, and a three-letter one (the prefix index
    holds those whole), answer."""
    with pytest.raises(QueryTooCostly, match=r"idxa\* alone for"):
        recall(many_terms, "postgres idxa*")
    with pytest.raises(QueryTooCostly):
        recall(many_terms.parent, "idxa* OR postgres", raw=True)
    refused(memoryd("recall", str(many_terms), "idxa*"), 2, "longer prefixes")
    assert [hit.id for hit in recall(many_terms, "postgres idxa7*")] == ["pg", "m7", "m0"]
    assert recall(many_terms, "postgres idx*")[0].id == "pg"
    assert prefixes(to_match('"be idxa"* OR ab* OR abcd*', raw=True)) == ["idxa", "abcd"]


def test_a_raw_query_of_more_than_48_words_is_refused() -> None:
    """OR-ed words common in every message each make BM25 score most of the index: a raw
    query holds at most 48 words (operators and NEAR's distance aside)."""
    common = " OR ".join(["test", "file", "error", "line"] * 12)
    assert to_match(common, raw=True).raw
    with pytest.raises(UsageError, match=f"at most {MAX_RAW_TERMS}"):
        to_match(common + " OR self", raw=True)
