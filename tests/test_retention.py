"""The retention check: details found without an LLM, matched on normalised forms, and
the verbatim section that puts back what a summary lost, within the summary's cap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.retention import VERBATIM_HEADER, Detail, extract_details, score
from memoryd.tokens import estimate_text_tokens
from memoryd.verbatim import by_priority, fit, render_section, with_free_room, with_verbatim_section

PLANTED = (
    "We decided to use Postgres for the event store. "
    "The config lives in src/memoryd/config.py and the docs at https://example.com/docs/setup. "
    "This fixes issue #42 and PR 17 needs review. Upgrade to v2.4.1 first. "
    "Call `rebuild_index` after the move. The timeout is 250 ms and the budget $30. "
    "The release is due 2026-03-14. I prefer tabs over spaces. "
    "We need to migrate the billing table."
)


def _kinds(details: list[Detail]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for detail in details:
        found.setdefault(detail.kind, set()).add(detail.key)
    return found


def test_every_kind_of_detail_is_found() -> None:
    kinds = _kinds(extract_details([{"role": "user", "content": PLANTED}]))
    assert kinds["path"] == {"src/memoryd/config.py"}
    assert kinds["url"] == {"https://example.com/docs/setup"}
    assert kinds["issue"] == {"#42", "#17"}
    assert kinds["version"] == {"2.4.1"}
    assert kinds["code"] == {"rebuild_index"}
    assert kinds["quantity"] == {"250 ms", "30 usd"}
    assert kinds["date"] == {"2026-03-14"}
    assert len(kinds["decision"]) == 1
    assert len(kinds["preference"]) == 1
    assert len(kinds["action"]) == 1


def test_words_that_only_look_like_paths_are_not_details() -> None:
    kinds = _kinds(
        extract_details([{"role": "user", "content": "Use red and/or blue, 3/4 of it."}])
    )
    assert "path" not in kinds


def test_an_action_item_done_later_is_no_longer_open() -> None:
    details = extract_details(
        [
            {"role": "user", "content": "We need to migrate the billing table."},
            {"role": "assistant", "content": "Finished the billing table migration."},
        ]
    )
    assert not [d for d in details if d.kind == "action"]


def test_matching_is_normalised() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    summary = (
        "Decision: use postgres as the event store. Config in SRC/memoryd/config.py; docs at "
        "https://example.com/docs/setup/. Fixes #42, pull request #17 awaits review; "
        "upgrade to 2.4.1; run rebuild_index after the move. Timeout 250ms, budget 30 USD, "
        "due March 14, 2026. The user prefers tabs to spaces. Migrate billing table (open)."
    )
    result = score(details, summary)
    assert result.missing == ()
    assert result.score == 1.0


def test_a_summary_without_details_scores_zero_and_lists_them_all() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    result = score(details, "The participants talked about their plans in a friendly way.")
    assert result.score == 0.0
    assert len(result.missing) == result.total == len(details)


def test_nothing_to_keep_is_full_retention() -> None:
    assert score([], "anything").score == 1.0


def test_details_of_the_previous_summary_must_survive_too() -> None:
    details = extract_details([], previous_summary="Earlier: deploys go through deploy/run.sh.")
    assert [d.key for d in details] == ["deploy/run.sh"]


def test_recent_and_often_mentioned_details_come_first() -> None:
    details = extract_details(
        [
            {"role": "user", "content": "Look at a/old.py and b/often.py."},
            {"role": "user", "content": "Again b/often.py."},
            {"role": "user", "content": "Now c/new.py."},
        ]
    )
    assert [d.key for d in by_priority(details)] == ["c/new.py", "b/often.py", "a/old.py"]


def test_the_verbatim_section_restores_the_missing_details() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    lossy = "A fluent summary of the discussion."
    repaired = with_verbatim_section(lossy, score(details, lossy).missing, 1024)
    assert repaired.startswith(lossy)
    assert VERBATIM_HEADER in repaired
    assert score(details, repaired).score == 1.0


def test_the_verbatim_section_is_deterministic() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    missing = score(details, "nothing").missing
    assert with_verbatim_section("x", missing, 300) == with_verbatim_section("x", missing, 300)


def test_a_full_summary_is_cut_at_a_line_to_make_room() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    full = "\n".join(f"- point number {i} of a long summary" for i in range(200))
    repaired = with_verbatim_section(full, score(details, full).missing, 400)
    assert estimate_text_tokens(repaired) <= 400
    assert VERBATIM_HEADER in repaired
    assert repaired.startswith("- point number 0 ")


def test_the_most_recent_details_win_when_the_cap_is_small() -> None:
    messages = [{"role": "user", "content": f"See docs/part{i}/notes.md."} for i in range(60)]
    details = extract_details(messages)
    repaired = with_verbatim_section("", score(details, "").missing, 60)
    assert estimate_text_tokens(repaired) <= 60
    assert "docs/part59/notes.md" in repaired
    assert "docs/part0/notes.md" not in repaired


@settings(max_examples=60, deadline=None)
@given(
    summary=st.text(alphabet=st.characters(codec="utf-8"), max_size=3000),
    paths=st.lists(st.from_regex(r"[a-z]{1,8}/[a-z]{1,8}\.py", fullmatch=True), max_size=40),
    cap=st.integers(min_value=1, max_value=600),
)
def test_the_result_never_exceeds_the_cap(summary: str, paths: list[str], cap: int) -> None:
    details = extract_details([{"role": "user", "content": " ".join(paths)}])
    result = with_verbatim_section(summary, score(details, summary).missing, cap)
    assert estimate_text_tokens(result) <= cap


def test_sentences_without_details_give_way_to_missing_ones() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    keeps = "The config lives in src/memoryd/config.py."
    idle = " ".join(f"They had a friendly chat number {'one two three'}." for _ in range(40))
    summary = f"{keeps} {idle}"
    result = score(details, summary)
    kept = [d for d in details if d not in result.missing]
    cap = estimate_text_tokens(summary)
    repaired = with_free_room(summary, result.missing, cap, kept)
    assert estimate_text_tokens(repaired) <= cap
    assert repaired.startswith(keeps)
    assert score(details, repaired).score == 1.0


def test_free_room_never_cuts_a_sentence_that_carries_a_detail() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    summary = "The config lives in src/memoryd/config.py. See https://example.com/docs/setup."
    result = score(details, summary)
    kept = [d for d in details if d not in result.missing]
    repaired = with_free_room(summary, result.missing, estimate_text_tokens(summary), kept)
    assert repaired == summary


@settings(max_examples=60, deadline=None)
@given(
    paths=st.lists(st.from_regex(r"[a-z]{1,8}/[a-z]{1,8}\.py", fullmatch=True), max_size=30),
    words=st.lists(st.sampled_from(["decided", "prefer", "need to"]), max_size=5),
    cap=st.integers(min_value=1, max_value=300),
)
def test_fit_counts_the_section_exactly(paths: list[str], words: list[str], cap: int) -> None:
    sentences = [f"We {w} keep module number {i} small." for i, w in enumerate(words)]
    details = extract_details([{"role": "user", "content": " ".join([*paths, *sentences])}])
    chosen = fit(details, cap)
    assert estimate_text_tokens(render_section(chosen)) <= cap
    rest = [d for d in by_priority(details) if d not in chosen]
    if rest:
        # The first detail left out (by priority) would not have fitted.
        assert estimate_text_tokens(render_section([*chosen, rest[0]])) > cap
