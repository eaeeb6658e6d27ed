"""Recall answers questions: stemming, stop words, any-word matching with all-word hits
first, identifiers whole and by their parts, passages so that a long message ranks for
its own title, and an index of an older schema rebuilt from the archive."""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from pathlib import Path

import pytest
from agent_transcripts import SHAPES, generate, message_text
from conftest import encode_lines, filler_text, make_message
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from memoryd.search import schema
from memoryd.search.archive import Hit, recall, update_index
from memoryd.search.query import identifiers, plain_terms, to_match
from memoryd.search.rank import held, useful_terms
from memoryd.search.text import (
    PASSAGE_CHARS,
    camel_parts,
    identifier_parts,
    identifier_snippet,
    passage_spans,
    passages,
)

ARCHIVE = "conversation-20260101T000000000000Z-abcdef.jsonl"


def archived(folder: Path, contents: list[str]) -> Path:
    """A workspace whose archive holds messages ``msg-0000``.. with ``contents``."""
    messages = [
        make_message(n, ("user", "assistant")[n % 2], text) for n, text in enumerate(contents)
    ]
    (folder / ".memoryd" / "archive").mkdir(parents=True)
    (folder / ".memoryd" / "archive" / ARCHIVE).write_bytes(encode_lines(messages))
    (folder / "conversation.jsonl").write_bytes(b"")
    return folder


def ids(hits: list[Hit]) -> list[str | None]:
    return [hit.id for hit in hits]


def filler(count: int) -> list[str]:
    """``count`` messages of plain prose that none of the tests' queries match."""
    return [filler_text(n, 200) for n in range(count)]


def test_a_word_finds_its_other_forms(tmp_path: Path) -> None:
    folder = archived(tmp_path, ["the upload retries were exhausted", *filler(5), "it retried"])
    assert set(ids(recall(folder, "retry"))) == {"msg-0000", "msg-0006"}
    assert ids(recall(folder, "exhausting")) == ["msg-0000"]


def test_any_word_matches_and_every_word_matches_come_first(tmp_path: Path) -> None:
    folder = archived(
        tmp_path,
        [
            "deploy deploy deploy deploy",
            "the deploy key lives in the vault, says the runbook of the team",
            "vault",
            *filler(5),
        ],
    )
    hits = recall(folder, "deploy vault")
    assert ids(hits) == ["msg-0001", "msg-0000", "msg-0002"]
    assert [hit.as_dict()["all_words"] for hit in hits] == [True, False, False]
    assert ids(recall(folder, "deploy vault", limit=1)) == ["msg-0001"]


def test_a_question_in_a_models_words_finds_its_answer(tmp_path: Path) -> None:
    folder = archived(
        tmp_path,
        [
            "the wrapper reads configuration from /etc/app.toml at start",
            "the wrapper is a shell script",
            "we read the news",
            *filler(5),
        ],
    )
    hits = recall(folder, "how does the wrapper read the config?")
    assert ids(hits)[0] == "msg-0000" and hits[0].all_words
    assert "**wrapper** **reads** **configuration**" in hits[0].snippet


def test_stop_words_are_left_out_unless_nothing_else_is_asked(tmp_path: Path) -> None:
    assert plain_terms("how does the wrapper read the config") == [
        '"wrapper"',
        '"read"',
        '("config" OR "configuration")',
    ]
    assert plain_terms("where is it") == ['"where"', '"is"', '"it"']
    assert plain_terms('"where is it" now') == ['"where is it"', '"now"']
    assert plain_terms("file not found") == ['"file"', '"not"', '"found"']
    folder = archived(tmp_path, ["so where is it then", *filler(5)])
    assert ids(recall(folder, "where is it")) == ["msg-0000"]


def test_identifiers_are_found_whole_and_by_their_parts(tmp_path: Path) -> None:
    folder = archived(
        tmp_path,
        [
            "raise SegmentMismatchError(offset)",
            "config = read_config(path)",
            "return os.path.join(root, name)",
            "edited src/memoryd/recall_index.py",
            "server = HTTPServer(address)",
            *filler(5),
        ],
    )
    for query, expected in [
        ("SegmentMismatchError", "msg-0000"),
        ("segment mismatch error", "msg-0000"),
        ("Mismatch", "msg-0000"),
        ("read_config", "msg-0001"),
        ("readConfig", "msg-0001"),
        ("config", "msg-0001"),
        ("os.path.join", "msg-0002"),
        ("join", "msg-0002"),
        ("src/memoryd/recall_index.py", "msg-0003"),
        ("recall_index", "msg-0003"),
        ("index", "msg-0003"),
        ("HTTP server", "msg-0004"),
    ]:
        assert ids(recall(folder, query))[:1] == [expected], query


def test_an_identifier_written_whole_ranks_above_its_parts_in_a_longer_name(
    tmp_path: Path,
) -> None:
    folder = archived(
        tmp_path,
        [
            "def test_render_frame_2(fixture):\n    assert test_render_frame_2 is not None",
            "result = render_frame(frame)",
            "Render frame up to limit entries; render frame again",
        ],
    )
    hits = recall(folder, "render_frame")
    assert ids(hits)[0] == "msg-0001"
    assert hits[0].identifiers == 1 and hits[1].identifiers == 0


def test_phrases_prefixes_and_raw_syntax_still_work(tmp_path: Path) -> None:
    folder = archived(
        tmp_path,
        [
            "the deploy key lives in vault",
            "key to deploy: vault",
            "deployment of the vaulted keys",
            *filler(5),
        ],
    )
    assert ids(recall(folder, '"deploy key"')) == ["msg-0000"]
    assert set(ids(recall(folder, "depl*"))) == {"msg-0000", "msg-0001", "msg-0002"}
    assert ids(recall(folder, '"key to deploy"')) == ["msg-0001"]
    assert ids(recall(folder, "deploy NOT lives", raw=True)) == ["msg-0001"]
    assert set(ids(recall(folder, "body: vault AND key", raw=True))) == {
        "msg-0000",
        "msg-0001",
        "msg-0002",
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_a_long_task_message_ranks_first_for_its_own_issue(tmp_path: Path, shape: str) -> None:
    """A generated agent transcript, all of it archived: its task message (the issue inside
    kilobytes of standing instructions) comes first for a question about the issue in other
    words, ahead of the short messages that name the same function (indexed whole, the
    task ranked second to fifth for some of these)."""
    for seed in range(3):
        transcript = generate(shape, seed, 300)
        folder = tmp_path / f"{shape}-{seed}"
        (folder / ".memoryd" / "archive").mkdir(parents=True)
        (folder / ".memoryd" / "archive" / ARCHIVE).write_bytes(b"".join(transcript.lines))
        (folder / "conversation.jsonl").write_bytes(b"")
        issue = re.search(
            r"### (\w+) loses data on a partial (\w+)", message_text(transcript.messages[0])
        )
        assert issue is not None
        question = f"bug report: the last partial {issue[2]} goes missing in {issue[1]}"
        assert ids(recall(folder, question))[0] == transcript.messages[0]["id"]


def test_an_index_of_an_older_schema_is_rebuilt_from_the_archive(tmp_path: Path) -> None:
    folder = archived(tmp_path, ["the upload retries were exhausted", *filler(5)])
    index = folder / ".memoryd" / "index.sqlite"
    old = sqlite3.connect(index)
    old.executescript(
        "CREATE TABLE archives(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
        "size INTEGER NOT NULL, messages INTEGER NOT NULL);"
        "CREATE TABLE messages(rowid INTEGER PRIMARY KEY, message_id TEXT, role TEXT, "
        "timestamp INTEGER, archive_id INTEGER NOT NULL, byte_offset INTEGER NOT NULL, "
        "byte_length INTEGER NOT NULL);"
        "CREATE VIRTUAL TABLE bodies USING fts5(body, tokenize = 'unicode61');"
        f"PRAGMA application_id = {schema.ARCHIVE.application_id}; PRAGMA user_version = 1;"
    )
    size = (folder / ".memoryd" / "archive" / ARCHIVE).stat().st_size
    old.execute("INSERT INTO archives VALUES (1, ?, ?, 6)", (ARCHIVE, size))
    old.commit()
    old.close()
    with capture_logs() as logs:
        assert ids(recall(folder, "retry")) == ["msg-0000"]
    rebuilt = [log for log in logs if log["event"] == "index_rebuilding"]
    assert [log["reason"] for log in rebuilt] == [
        f"schema version 1, this memoryd uses {schema.ARCHIVE.version}"
    ]
    reader = sqlite3.connect(index)
    try:
        assert reader.execute("PRAGMA user_version").fetchone()[0] == schema.ARCHIVE.version
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == 6
    finally:
        reader.close()


def test_a_long_message_is_indexed_in_passages_that_point_to_it(tmp_path: Path) -> None:
    body = " ".join(f"word{n:05d}" for n in range(3000))
    folder = archived(tmp_path, [body, "short"])
    assert update_index(folder) == 2
    for n in (0, 1500, 2999):
        hits = recall(folder, f"word{n:05d}")
        assert ids(hits) == ["msg-0000"]
        line = (folder / hits[0].archive).read_bytes()[hits[0].offset :][: hits[0].length]
        assert json.loads(line)["content"] == body
    assert ids(recall(folder, '"word00999 word01000 word01001"')) == ["msg-0000"]


# ----- the pure parts ---------------------------------------------------------------------


def test_plain_terms_give_identifiers_and_abbreviations_their_other_forms() -> None:
    assert plain_terms("readConfig db") == [
        '("readConfig" OR "read Config")',
        '("db" OR "database")',
    ]
    assert plain_terms("Config config CONFIG? config") == ['("Config" OR "configuration")']
    assert identifiers("render_frame src/x.py readConfig os.path.join() plain MARKER-17") == [
        "render_frame",
        "src/x.py",
        "readConfig",
        "os.path.join",
        "MARKER-17",
    ]
    assert to_match("render_frame plain").exact == ("render_frame",)
    assert to_match("a b", raw=True).exact == ()


def test_camel_parts_and_identifier_parts() -> None:
    assert camel_parts("HTTPServerError") == ["HTTP", "Server", "Error"]
    assert camel_parts("readConfig2") == ["read", "Config", "2"]
    assert camel_parts("snake_case") == ["snake_case"]
    assert camel_parts("IDs") == ["IDs"]
    text = "raise SegmentMismatchError; SegmentMismatchError again; readConfig(x)"
    assert identifier_parts(text) == "Segment Mismatch Error\nread Config"
    assert identifier_parts("plain words only, no_camel here") == ""


def test_useful_terms_leave_out_words_in_half_the_passages_and_words_that_match_nothing() -> None:
    terms = ('"parser"', '"windows"', '"handle"', '"rare"')
    assert useful_terms(terms, [900, 400, 0, 3], 1000) == ('"windows"', '"rare"')
    assert useful_terms(terms, [900, 500, 0, 0], 1000) == ('"parser"', '"windows"')
    assert useful_terms(terms, [0, 0, 0, 0], 1000) == ()


def test_held_counts_whole_identifiers_in_any_case() -> None:
    body = "def test_render_frame_2(): return Render_Frame(x) + os.path.join(a)"
    assert held(body, ("render_frame", "os.path.join", "missing_one")) == 2
    assert held("test_render_frame_2", ("render_frame",)) == 0


@given(
    words=st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=30), max_size=800),
    separators=st.lists(st.sampled_from([" ", "\n", "  "]), min_size=1),
)
def test_passages_cover_the_text_in_order_and_never_cut_a_short_phrase(
    words: list[str], separators: list[str]
) -> None:
    text = "".join(word + separators[n % len(separators)] for n, word in enumerate(words))
    spans = passage_spans(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (start, end), (next_start, _) in itertools.pairwise(spans):
        assert start < next_start <= end, "in order, overlapping or touching"
        assert PASSAGE_CHARS // 2 < end - start <= PASSAGE_CHARS
        assert text[next_start - 1].isspace(), "a passage starts at a word"
    assert spans[-1][1] - spans[-1][0] <= PASSAGE_CHARS + PASSAGE_CHARS // 4 or len(spans) == 1
    cut = passages(text)
    for start in range(0, max(0, len(text) - 60), 37):
        phrase = text[start : start + 60]
        assert any(phrase in part for part in cut), phrase


@pytest.mark.parametrize("query", ["Timeout", "Foo", "FooBar", "timeout error"])
def test_a_snippet_is_centred_on_the_identifier_whose_parts_matched(
    tmp_path: Path, query: str
) -> None:
    """A query for part of an identifier finds the message by the identifier's parts; the
    snippet shows that identifier, whole, between ``**``, not the message's first words."""
    text = (
        " ".join(f"lead{i}" for i in range(60))
        + " then FooBarTimeoutError(limit) was raised "
        + " ".join(f"tail{i}" for i in range(40))
    )
    folder = archived(tmp_path, [text, *filler(5)])
    [hit] = recall(folder, query)
    assert "**FooBarTimeoutError**(limit)" in hit.snippet
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert "lead0 " not in hit.snippet
    assert len(hit.snippet.split()) <= 16


def test_identifier_snippet_marks_only_an_identifier_with_the_matched_parts() -> None:
    body = "short text with ReadConfigError and readConfig here"
    marked = "Read \x02Config\x03 Error\nread \x02Config\x03"
    assert identifier_snippet(body, marked, 16) == (
        "short text with **ReadConfigError** and readConfig here"
    )
    assert identifier_snippet(body, "\x02Timeout\x03", 16) == ""
    assert identifier_snippet(body, "Read Config Error", 16) == ""
    assert identifier_snippet(body, "read \x02Config\x03", 3) == "…and **readConfig** here"
