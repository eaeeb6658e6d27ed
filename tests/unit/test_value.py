"""The value classes written out without dataclasses compare, hash and show as the
dataclasses they replace did (docs/design.md#startup)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd import strict_json
from memoryd.search.query import Query, to_match
from memoryd.search.rank import Ranked
from memoryd.search.sessions.access import Target
from memoryd.search.sessions.listing import Listing, SyncResult
from memoryd.search.sessions.search import Pick, SourceHit
from memoryd.search.sessions.store import Progress


def hit(**changes: object) -> SourceHit:
    fields: dict[str, object] = {
        "source": "codex",
        "session": "s1",
        "project": "/p",
        "id": "m1",
        "role": "user",
        "timestamp": 1,
        "file": Path("/a/b.jsonl"),
        "offset": 0,
        "length": 10,
        "snippet": "x",
        "score": 1.5,
    }
    return SourceHit(**{**fields, **changes})  # type: ignore[arg-type]


def test_equal_by_every_field_and_hashed_alike() -> None:
    assert Target(Path("/r"), "codex") == Target(Path("/r"), "codex", None)
    assert Target(Path("/r"), "codex") != Target(Path("/r"), "codex", "sub")
    assert Target(Path("/r"), "codex") != Target(Path("/r"), "gemini")
    assert hash(Target(Path("/r"), "codex")) == hash(Target(Path("/r"), "codex"))
    assert len({hit(), hit(), hit(score=2.0)}) == 2
    assert Query(('"a"',)) == to_match("a")
    assert Pick() == Pick(None, None) != Pick("s1")


def test_values_of_different_classes_are_never_equal() -> None:
    assert Pick() != Target(Path("/r"), "codex")
    assert Pick() != (None, None)
    assert Pick().__eq__((None, None)) is NotImplemented


def test_shown_with_their_class_and_fields() -> None:
    assert repr(Pick("s1")) == "Pick(file=None, session='s1')"
    assert repr(Query(("a",))) == "Query(exact=(), raw=False, terms=('a',))"


def test_a_pass_s_counts_change_and_cannot_be_hashed() -> None:
    result = SyncResult()
    result.added += 2
    result.problems.append("bad")
    assert result == SyncResult(added=2, problems=["bad"])
    assert SyncResult().problems is not SyncResult().problems
    assert Listing().changed is not Listing().changed
    with pytest.raises(TypeError):
        hash(result)


def test_a_copy_with_one_field_changed_keeps_the_others() -> None:
    first = hit()
    copied = first.with_copies((Path("/a/sub/b.jsonl"),))
    assert copied.copies == (Path("/a/sub/b.jsonl"),)
    assert copied == hit(copies=(Path("/a/sub/b.jsonl"),))
    ranked = Ranked(1, 65536, True, 2.5, 0, '"a"')
    assert ranked.replaced(identifiers=2) == Ranked(1, 65536, True, 2.5, 2, '"a"')
    assert ranked.replaced(snippet="…a…") == Ranked(1, 65536, True, 2.5, 0, '"a"', "…a…")


def test_progress_as_the_progress_file_holds_it() -> None:
    progress = Progress(True, 3, 10, 300, 1000, 5.0, 42)
    assert Progress(**strict_json.loads(strict_json.dumps(progress.as_dict()))) == progress
    with pytest.raises(TypeError):
        Progress(**{**progress.as_dict(), "unknown": 1})  # type: ignore[arg-type]
