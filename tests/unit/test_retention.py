"""The retention check: details found without an LLM, matched on normalised forms, and
the verbatim section that puts back what a summary lost, within the summary's cap."""

from __future__ import annotations

from typing import Any

from agent_samples import interactive, text_mode, tool_loop
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.summary.retention import VERBATIM_HEADER, Beside, Detail, extract_details, score
from memoryd.summary.verbatim import (
    by_priority,
    fit,
    render_section,
    with_free_room,
    with_verbatim_section,
    without_idle_sentences,
)
from memoryd.tokens import estimate_text_tokens
from memoryd.transcript.toolcalls import command_label, label_key

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


def test_room_is_made_by_taking_out_whole_list_items_never_the_header() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    keeps = "- Ran `find . -name config.py` → names src/memoryd/config.py"
    summary = f"Key points:\n- Ran `ls .` → exit 0. Nothing else.\n{keeps}"
    kept = [d for d in details if d not in score(details, summary).missing]
    assert without_idle_sentences(summary, kept, 1) == f"Key points:\n{keeps}"


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


def test_commands_exception_names_and_the_task_are_details() -> None:
    transcript = tool_loop(2)
    details = extract_details(transcript.messages)
    kinds = _kinds(details)
    assert kinds["command"] == {label_key(command_label(c)) for c in transcript.commands}
    assert kinds["error"] == {name.casefold() for name in transcript.exceptions}
    [task] = [d for d in details if d.kind == "task"]
    assert task.text == f"Task: {transcript.task}"


def test_text_mode_commands_and_lint_codes_are_details() -> None:
    fenced = text_mode(1)
    assert _kinds(extract_details(fenced.messages))["command"] == {
        label_key(command) for command in fenced.commands
    }
    session = interactive(1)
    assert {"e501", session.exceptions[0].casefold()} <= _kinds(extract_details(session.messages))[
        "error"
    ]


def test_tool_output_gives_error_names_and_nothing_else() -> None:
    """A file read in a tool result is not what the conversation said: its paths,
    versions, links and cue sentences are not details; the exception it reports is."""
    output = (
        "We decided to use v2.4.1 from https://example.com/x, see src/other/file.py.\n"
        "    raise ValueError('bad')\n"
        "KeyError: 'missing'\n"
    )
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Read the guide and fix what it says."},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "docs/guide.md"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": output}],
        },
    ]
    kinds = _kinds(extract_details(messages))
    assert kinds.pop("path") == {"docs/guide.md"}
    assert kinds.pop("error") == {"keyerror"}
    assert set(kinds) == {"task"}


def test_a_code_detail_needs_two_letters_or_digits() -> None:
    details = extract_details([{"role": "user", "content": 'Use `a`, `""`, `[]`, `{}` and `ls`.'}])
    assert _kinds(details) == {"code": {"ls"}}


def test_markup_alone_is_not_a_code_detail() -> None:
    text = "The row is `<td></td>` in `<tr>`, rendered by `render_row(<td>)`."
    details = extract_details([{"role": "user", "content": text}])
    assert _kinds(details) == {"code": {"render_row(<td>)"}}


def test_standing_instructions_are_not_details() -> None:
    standing = "Always run the full test suite before you submit anything."
    messages = [
        {"role": "user", "content": f"Fix the login redirect.\n{standing}"},
        {"role": "assistant", "content": "Looking."},
        {"role": "user", "content": f"Carry on.\n{standing}"},
    ]
    assert "preference" not in _kinds(extract_details(messages))


def test_details_kept_beside_the_summary_count_as_kept() -> None:
    details = extract_details([{"role": "user", "content": PLANTED}])
    beside = Beside([{"role": "user", "content": "src/memoryd/config.py is unchanged"}], details)
    alone = score(details, "A fluent summary.")
    together = score(details, "A fluent summary.", beside)
    assert together.total == alone.total
    assert [d.key for d in alone.missing if d not in together.missing] == ["src/memoryd/config.py"]


def test_the_verbatim_section_puts_the_task_first_and_lists_commands_and_errors() -> None:
    transcript = tool_loop(5)
    details = extract_details(transcript.messages)
    section = with_verbatim_section("", score(details, "").missing, 1024)
    lines = section.splitlines()
    assert lines[:2] == [VERBATIM_HEADER, f"- Task: {transcript.task}"]
    [commands] = [line for line in lines if line.startswith("- Commands: ")]
    assert all(f"`{command_label(c)}`" in commands for c in transcript.commands)
    [errors] = [line for line in lines if line.startswith("- Errors: ")]
    assert all(name in errors for name in transcript.exceptions)
    for line in lines[1:]:
        for item in line.split(": ", 1)[1].split("; "):
            assert len(item.strip()) >= 2
