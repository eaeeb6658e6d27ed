"""Outcomes read in the runner's own words (memoryd/transcript/outcomes.py): real outputs
of public agent transcripts (tests/fakes/real_outputs.py) make failure and change items, never
routine ones, through masking, summarizing and 50 folds; counts of zero, a file shown and
a search's hits are not failures; every edit form changes files; a placeholder carries
its first error line and at most three ``line N``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import SettingsFactory, encode_lines, make_message
from hypothesis import given, settings
from hypothesis import strategies as st
from real_outputs import CHANGES, FAILURES, QUOTED, REAL_OUTPUTS, ROUTINE, RealOutput

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.compaction.masking.decide import plan_masking
from memoryd.compaction.masking.placeholders import MAX_LINE_REFERENCES, placeholder_text
from memoryd.conversation.lines import Line, split_lines
from memoryd.summary.extractive import extractive_summary, new_items
from memoryd.summary.items import HeadItem, classify, parse_head
from memoryd.summary.prompts import render_transcript
from memoryd.transcript.outcomes import (
    Failure,
    changes_files,
    edit_form,
    exit_status,
    read_failure,
    shows_only,
)
from memoryd.transcript.toolcalls import command_label, outcome_of, shell_call, tool_use_call

TASK = "Fix the failing build and keep the edits small."
SUMMARY_TOKENS = 1_024
NO_FAILURE = Failure("", "")
PASSING = "\n".join(f"tests/misc/test_line_{n}.py::test_case_{n} PASSED" for n in range(30))


def call_messages(start: int, fixture: RealOutput) -> list[dict[str, Any]]:
    """The two messages of one call of ``fixture``, as its agent wrote them."""
    if fixture.mode == "text":
        said = f"Running it.\n\n```bash\n{fixture.command}\n```"
        return [
            make_message(start, "assistant", said),
            make_message(start + 1, "user", fixture.output),
        ]
    use_id = f"toolu_{start:04d}"
    arguments = (
        {"input": fixture.command} if "patch" in fixture.tool else {"command": fixture.command}
    )
    use = {"type": "tool_use", "id": use_id, "name": fixture.tool, "input": arguments}
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id}
    result["content"] = fixture.output
    if fixture.is_error:
        result["is_error"] = True
    return [
        make_message(start, "assistant", [{"type": "text", "text": "Next."}, use]),
        make_message(start + 1, "user", [result]),
    ]


def routine_messages(start: int, round_: int) -> list[dict[str, Any]]:
    """A passing test run of its own module: a routine call."""
    noise = RealOutput(
        "noise", "routine", "pytest", "Bash", "tool_use",
        f"pytest tests/misc/test_mod_{round_}.py", f"{PASSING}\n{30 + round_} passed in 1.2s",
        False, "", "",
    )  # fmt: skip
    return call_messages(start, noise)


def conversation(fixtures: list[RealOutput], noise: int) -> list[dict[str, Any]]:
    messages = [make_message(0, "user", f"<task>{TASK}</task>")]
    for k in range(noise):
        messages += routine_messages(len(messages), k)
    for fixture in fixtures:
        messages += call_messages(len(messages), fixture)
    return messages


def call_key(fixture: RealOutput) -> str:
    """What a summary line of the fixture's call names."""
    if "patch" in fixture.tool:
        return fixture.tool
    return command_label(fixture.command)


def item_of(items: list[HeadItem] | tuple[HeadItem, ...], fixture: RealOutput) -> HeadItem:
    key = call_key(fixture).casefold()
    found = [item for item in items if key in item.text.casefold()]
    assert found, (fixture.name, [item.text for item in items])
    return found[-1]


def lines_of(messages: list[dict[str, Any]]) -> list[Line]:
    return list(split_lines(encode_lines(messages), 1 << 24))


RUNNERS = ("pytest", "unittest", "jest", "vitest", "mocha", "go test", "cargo test", "rspec")
COMPILERS = ("gcc", "tsc", "make")
EDIT_FORMS = (
    "sed -i", "perl -pi", "patch", "apply_patch", "git apply", "git mv", "git rm", "tee",
    "mv", "cp", "rm",
)  # fmt: skip
RUNNERS_ONLY_QUOTED = ("rspec",)
"""Runners no public agent transcript searched shows failing (bench/README.md, "The
classifier on real outputs"): their fixture is the runner's output pasted in an issue."""


def test_the_corpus_covers_eight_runners_and_six_edit_forms_with_sources() -> None:
    """At least eight ways of saying a failure and six edit forms, each with its source
    and licence, and real outputs that say no failure beside them."""
    assert len({f.phrasing for f in FAILURES}) >= 8
    assert len({f.phrasing for f in CHANGES}) >= 6
    assert ROUTINE
    for fixture in REAL_OUTPUTS:
        assert " @ " in fixture.source and fixture.licence, fixture.name
        assert fixture.origin in ("agent transcript", QUOTED), fixture.name
        assert fixture.licence.startswith(("MIT", "ISC", "none stated")), fixture.name
        assert len(fixture.output) <= 1_500, fixture.name


def test_each_runner_compiler_and_edit_form_has_a_real_fixture() -> None:
    """Every runner and compiler the classifier names has a real failing output from an
    agent transcript (rspec only as pasted into a public issue), and every edit form a
    real command an agent ran."""
    origins: dict[str, set[str]] = {}
    for fixture in FAILURES:
        origins.setdefault(fixture.phrasing.split(":")[0], set()).add(fixture.origin)
    for runner in (*RUNNERS, *COMPILERS):
        assert runner in origins, runner
        found = "agent transcript" in origins[runner]
        assert found != (runner in RUNNERS_ONLY_QUOTED), runner
    forms: dict[str, set[str]] = {}
    for fixture in CHANGES:
        forms.setdefault(fixture.phrasing, set()).add(fixture.origin)
    for form in EDIT_FORMS:
        assert forms.get(form) == {"agent transcript"}, form


@pytest.mark.parametrize("fixture", REAL_OUTPUTS, ids=lambda f: f.name)
def test_each_real_call_makes_an_item_of_its_kind(fixture: RealOutput) -> None:
    """Summarized alone, each real call is one item of the kind it is: a failure when its
    output says so in its tool's words, a change when it edits, else routine."""
    _, items = new_items(conversation([fixture], 0), None, "narrative")
    assert item_of(items, fixture).kind == fixture.expected


@pytest.mark.parametrize("fixture", FAILURES, ids=lambda f: f.name)
def test_a_failure_is_read_in_its_tools_words_without_the_error_flag(fixture: RealOutput) -> None:
    """The output alone says the call failed, with a line of the output itself: no
    ``is_error`` and no exit status needed."""
    command = None if fixture.mode == "tool_use" and "patch" in fixture.tool else fixture.command
    failure = read_failure(fixture.output, command)
    assert failure is not None, fixture.name
    assert failure.line.split()[0] in fixture.output


@pytest.mark.parametrize("fixture", CHANGES, ids=lambda f: f.name)
def test_an_edit_changes_files(fixture: RealOutput) -> None:
    """Every edit form of the corpus is read as changing files, whatever it printed."""
    if "patch" in fixture.tool:
        use = {"type": "tool_use", "id": "t", "name": fixture.tool, "input": {"input": "x"}}
        assert tool_use_call(0, use).edits
    else:
        assert changes_files(fixture.command), fixture.name
        assert read_failure(fixture.output, fixture.command) is None, fixture.name


@pytest.mark.parametrize("fixture", ROUTINE, ids=lambda f: f.name)
def test_a_real_passing_run_is_no_failure(fixture: RealOutput) -> None:
    assert read_failure(fixture.output, fixture.command) is None
    assert not changes_files(fixture.command)


@pytest.mark.parametrize(
    ("output", "command"),
    [
        ("===== 12 passed, 0 failed in 0.31s =====", "pytest"),
        ("Ran 4 tests in 0.002s\n\nOK (errors=0)", "python -m unittest"),
        ("test result: ok. 5 passed; 0 failed; 0 ignored", "cargo test"),
        ("Tests:       0 failed, 12 passed, 12 total", "npx jest"),
        ("src/log.py:12:  log.error('boom')\nsrc/a.py:40:raise ValueError('x')", "grep -rn error"),
        ("FAILED tests/a.py::test_x - AssertionError\nTraceback (most recent call last):", "cat x"),
        ("Process exited with code 0\nOutput:\n", "true"),
        ("exit code 0", "make"),
        ("2 xfailed, 10 passed in 0.2s", "pytest"),
    ],
)  # fmt: skip
def test_what_is_no_failure(output: str, command: str) -> None:
    """Counts of zero, a search's hits and a file shown (its content is not the tool
    speaking), and a zero exit status are not failures."""
    assert read_failure(output, command) is None


@pytest.mark.parametrize(
    ("output", "kind"),
    [
        ("FAILED tests/pay/test_ledger.py::test_reconcile_batch - FooBarTimeoutError: q", "pytest"),
        ("1 failed, 59 passed in 41.20s", "pytest"),
        ("ERROR tests/test_x.py - ImportError: no module", "pytest"),
        ("FAILED (failures=1)", "unittest"),
        ("FAIL src/a.test.js\n  ✕ adds (3 ms)", "jest"),
        (" \u00d7 src/sum.test.ts > sum > adds", "jest"),
        ("Tests:       1 failed, 3 passed, 4 total", "jest"),
        ("  2 failing", "mocha"),
        ("=== RUN   TestAdd\n--- FAIL: TestAdd (0.00s)\nFAIL", "go test"),
        ("FAIL\tgithub.com/x/a\t0.1s", "go test"),
        ("test result: FAILED. 5 passed; 1 failed", "cargo test"),
        ("thread 'main' panicked at src/lib.rs:3:5:", "cargo test"),
        ("3 examples, 1 failure", "rspec"),
        ("src/a.ts(3,5): error TS2322: Type 'x'", "compiler"),
        ("main.c:3:5: error: expected ';'", "compiler"),
        ("error[E0425]: cannot find value `x`", "compiler"),
        ("src/a.py:12:80: E501 Line too long (95 > 88)", "linter"),
        ("make: *** [Makefile:3: all] Error 1", "make"),
        ("npm ERR! code ELIFECYCLE", "npm"),
        ("bash: pytets: command not found", "shell"),
        ("Traceback (most recent call last):\n  File \"a.py\", line 1", "traceback"),
        ("<returncode>2</returncode>\n<output>\n</output>", "exit status"),
        ("Exit: 1", "exit status"),
        ("ERROR zanzibar16 rounding drift", "error line"),
    ],
)  # fmt: skip
def test_each_runners_phrase_is_a_failure(output: str, kind: str) -> None:
    """Each tool's own phrase, as the issue lists them, is read as its kind of failure."""
    failure = read_failure(output, "run")
    assert failure is not None and failure.kind == kind


@pytest.mark.parametrize(
    ("command", "form"),
    [
        ("sed -i 's/a/b/' src/x.py", "sed -i"),
        ("sed -i.bak -e 's/a/b/' x", "sed -i"),
        ("perl -pi -e 's/a/b/' src/x.pl", "perl -pi"),
        ("patch -p1 < fix.diff", "patch"),
        ("apply_patch <<'EOF'\n*** Begin Patch\nEOF", "apply_patch"),
        ("git apply fix.patch", "git apply"),
        ("git mv src/a.py src/b.py", "git mv"),
        ("git rm -r old/", "git rm"),
        ("echo x > notes.txt", "redirect"),
        ("echo x >> notes.txt", "redirect"),
        ("pytest 2>&1 | tee run.log", "tee"),
        ("cat > a.py <<'EOF'\nprint(1 > 0)\nEOF", "heredoc"),
        ("cd /repo && mv a.py b.py", "mv"),
        ("cp a.py b.py", "cp"),
        ("rm build/out.o", "rm"),
        ("edit 3:5\nx = 1\nend_of_edit", "editor"),
    ],
)  # fmt: skip
def test_each_edit_form_changes_files(command: str, form: str) -> None:
    assert edit_form(command) == form


@pytest.mark.parametrize(
    "command",
    [
        "pytest -x 2>&1",
        "ls > /dev/null 2>&1",
        'grep -rn "a > b" src',
        "python - <<'EOF'\nprint(1)\nEOF",
        "git diff HEAD~1",
        "cat src/app.py",
        "rm",
    ],
)
def test_what_changes_no_file(command: str) -> None:
    assert edit_form(command) is None


def test_a_command_that_only_shows_is_told_from_one_that_runs() -> None:
    assert shows_only("cd /repo && sed -n 1,20p src/a.py")
    assert shows_only("grep -rn FAILED logs | head -5")
    assert not shows_only("pytest -q | tail -5")
    assert not shows_only("cat a.py > b.py")


def test_an_exit_status_is_read_in_every_form() -> None:
    assert exit_status("<returncode>1</returncode>") == 1
    assert exit_status("Exit: 3") == 3
    assert exit_status("Process exited with code 0") == 0
    assert exit_status("all good") is None


def test_a_masked_placeholder_carries_the_first_error_line_and_three_line_references() -> None:
    """The first error line, as the tool wrote it, survives masking, with at most three
    ``line N``; the placeholder reads back as that failure."""
    output = "ERROR zanzibar16 rounding drift\n" + "\n".join(
        f"  checked ledger row at line {n}: drift 0.0{n}" for n in range(1, 40)
    )
    call = shell_call(3, "Bash", "python tools/reconcile.py --all")
    assert call is not None
    text = placeholder_text(call, output, False, "msg-0004")
    assert "ERROR zanzibar16 rounding drift" in text
    assert text.count("line ") <= MAX_LINE_REFERENCES
    back = read_failure(text)
    assert back is not None and back.line == "ERROR zanzibar16 rounding drift"


@pytest.mark.parametrize("fixture", FAILURES, ids=lambda f: f.name)
def test_a_real_failures_placeholder_says_its_first_error_line(fixture: RealOutput) -> None:
    """Masked, each real failing run's placeholder quotes the line its output says it
    failed with, reads back as that same failure, and names at most three ``line N``."""
    expected = read_failure(fixture.output, fixture.command)
    assert expected is not None, fixture.name
    call = shell_call(0, "Bash", fixture.command)
    text = placeholder_text(call, fixture.output, fixture.is_error, "msg-0001")
    assert f"failure: {expected.line}" in text, text
    assert text.count("line ") <= MAX_LINE_REFERENCES
    back = read_failure(text)
    assert back is not None and back.line == expected.line, (fixture.name, text)


def test_a_later_passing_run_of_the_same_test_resolves_a_real_failure() -> None:
    """The bun test run that failed, run again with no failure, is resolved, not routine."""
    [failing] = [f for f in FAILURES if f.name == "bun-test-failed"]
    passing = RealOutput(
        "again", "routine", "", failing.tool, failing.mode, failing.command,
        "bun test v1.2.10\n\n 2 pass\n 0 fail\nRan 2 tests across 1 files.", False, "", "",
    )  # fmt: skip
    messages = conversation([failing], 0)
    messages += call_messages(len(messages), passing)
    _, items = new_items(messages, None, "narrative")
    item = item_of(items, failing)
    assert item.kind == "failure" and item.resolved is not None


def test_an_llm_heads_call_line_with_an_edit_is_a_change() -> None:
    """A head without sections is read line by line: a call whose command edits is a
    change there too."""
    assert classify("Ran `sed -i 's/a/b/' src/pay/ledger.py`") == "change"
    assert classify("Ran `pytest tests/pay`") == "routine"
    # Codex's patch tool, as a head names it when it is read back without its section
    assert classify("The assistant used apply_patch (#msg-0013)") == "change"
    assert classify("The assistant used dispatch_agent (#msg-0013)") == "routine"


@settings(max_examples=12, deadline=None)
@given(
    chosen=st.lists(
        st.sampled_from([*FAILURES, *CHANGES]), min_size=1, max_size=6, unique_by=lambda f: f.name
    ),
    noise=st.integers(min_value=0, max_value=4),
    style=st.sampled_from(["narrative", "rolling"]),
)
def test_no_failure_or_edit_is_ever_routine_through_masking_summarizing_and_50_folds(
    chosen: list[RealOutput], noise: int, style: str
) -> None:
    """Real failures and edits, their outputs masked first, summarized, then folded 50
    times with a round of routine calls each: each is still there, of its kind."""
    messages = conversation(chosen, noise)
    lines = lines_of(messages)
    masking = plan_masking(lines, 0, frozenset({0}))
    masked = [line.message for line in masking.applied(lines) if line.message is not None]
    summary = extractive_summary(masked, None, SUMMARY_TOKENS, style)
    for round_ in range(50):
        fresh = routine_messages(len(messages) + 2 * round_, noise + round_)
        summary = extractive_summary(fresh, summary, SUMMARY_TOKENS, style)
    items = parse_head(summary).items
    for fixture in chosen:
        item = item_of(items, fixture)
        assert item.kind == fixture.expected, (fixture.name, item)


@pytest.mark.parametrize("style", ["narrative", "rolling"])
def test_every_real_failure_and_edit_is_still_itself_after_masking_summarizing_and_50_folds(
    style: str,
) -> None:
    """Not a sample: every real failure and edit of the corpus, six calls to a
    conversation, masked, summarized and folded 50 times with routine calls between
    folds, is still an item of its own kind in the last head."""
    chosen = [*FAILURES, *CHANGES]
    for start in range(0, len(chosen), 6):
        group = chosen[start : start + 6]
        messages = conversation(group, 2)
        lines = lines_of(messages)
        masking = plan_masking(lines, 0, frozenset({0}))
        masked = [line.message for line in masking.applied(lines) if line.message is not None]
        summary = extractive_summary(masked, None, SUMMARY_TOKENS, style)
        for round_ in range(50):
            fresh = routine_messages(len(messages) + 2 * round_, 2 + round_)
            summary = extractive_summary(fresh, summary, SUMMARY_TOKENS, style)
        items = parse_head(summary).items
        for fixture in group:
            assert item_of(items, fixture).kind == fixture.expected, (fixture.name, style)


def test_a_mini_swe_agent_command_is_a_call_and_its_sed_an_edit() -> None:
    """mini-swe-agent fences its command as ``mswea_bash_command``: it is read as a shell
    call, and the ``sed -i`` of its real run (tests/fakes/real_outputs.py) as a change."""
    [fixture] = [f for f in CHANGES if f.name == "sed-in-place-mini"]
    said = f"Let me fix the file:\n\n```mswea_bash_command\n{fixture.command}\n```"
    messages = [
        make_message(0, "user", f"<task>{TASK}</task>"),
        make_message(1, "assistant", said),
        make_message(2, "user", fixture.output),
    ]
    _, items = new_items(messages, None, "narrative")
    assert item_of(items, fixture).kind == "change"


def test_the_error_line_is_the_first_line_that_says_the_call_failed() -> None:
    """go test's ``--- FAIL: TestAdd``, not its closing ``FAIL``, is the call's error line."""
    output = "=== RUN   TestAdd\n--- FAIL: TestAdd (0.00s)\n    add_test.go:9: want 3\nFAIL"
    outcome = outcome_of(output, command="go test ./...")
    assert outcome.failed and outcome.error_line == "--- FAIL: TestAdd (0.00s)"


def test_a_patch_tool_edits_and_a_dispatch_tool_does_not() -> None:
    """Codex's ``apply_patch`` (its input the patch, or an object holding it) changes
    files; a tool whose name only contains the letters (``dispatch_agent``) does not;
    a command given as an argument list is read as the shell command it runs."""
    patch = "*** Begin Patch\n*** Update File: a.py\n*** End Patch"
    assert tool_use_call(0, {"name": "apply_patch", "input": patch}).edits
    assert tool_use_call(0, {"name": "apply_patch", "input": {"input": patch}}).edits
    assert not tool_use_call(0, {"name": "dispatch_agent", "input": {"prompt": "x"}}).edits
    call = tool_use_call(0, {"name": "shell", "input": {"command": ["bash", "-lc", "rm a.py"]}})
    assert call.command == "rm a.py" and call.edits


def test_a_job_masks_real_failures_and_edits_then_summarizes_them_as_such(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """In a real workspace, a job over budget masks the real outputs first and then
    summarizes: each real failure is in the head's Failures, each edit in its Changes,
    and every placeholder of a failure says its first error line."""
    chosen = [f for f in REAL_OUTPUTS if f.expected != "routine" and f.mode == "tool_use"][:10]
    messages = conversation(chosen, 0)
    for round_ in range(30):
        messages += routine_messages(len(messages), round_)
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "conversation.jsonl").write_bytes(encode_lines(messages))
    tokens = sum(line.tokens for line in lines_of(messages))
    config = make_settings(
        keep_first=1,
        token_limit=int(tokens / 0.95),
        **{"masking.enabled": True, "masking.target": 0.2, "summarizer.backend": "extractive"},
    )
    result = run_job(JobRequest(folder, config, reason="trigger"))
    assert result.outcome == "completed", result.reason
    assert result.masked_messages > 0
    live = [json.loads(x) for x in (folder / "conversation.jsonl").read_bytes().splitlines()]
    [summary] = [m for m in live if m.get("isSummary")]
    items = parse_head(str(summary["content"]).split("\n\n", 1)[-1]).items
    kept = {m["id"] for m in live}
    summarized = [f for k, f in enumerate(chosen) if f"msg-{1 + 2 * k:04d}" not in kept]
    assert len(summarized) == len(chosen)
    for fixture in summarized:
        assert item_of(items, fixture).kind == fixture.expected, fixture.name


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(st.sampled_from(["ok", "12 passed in 0.2s", "0 failed", "errors=0"])),
    after=st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40)),
    fixture=st.sampled_from(
        [f for f in FAILURES if (read_failure(f.output) or NO_FAILURE).kind != "exit status"]
    ),
)
def test_the_first_failure_is_a_line_of_the_output_whatever_surrounds_it(
    before: list[str], after: list[str], fixture: RealOutput
) -> None:
    """Passing lines before a real failure phrase do not hide it or change which line says
    it, whatever follows (an exit status alone gives way to a phrase after it: those are
    left out); the line read is one of the output's own lines."""
    alone = read_failure(fixture.output)
    assert alone is not None
    output = "\n".join([*before, fixture.output, *after])
    found = read_failure(output)
    assert found is not None and found.line == alone.line
    lines = {" ".join(line.split()) for line in output.splitlines()}
    assert found.line.removesuffix("…") in lines or any(
        line.startswith(found.line.removesuffix("…")) for line in lines
    )


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_reading_any_text_or_command_never_fails(text: str) -> None:
    """Any output and any command are read without an error."""
    read_failure(text, text)
    edit_form(text)
    shows_only(text)


def test_a_deep_tracebacks_placeholder_names_three_lines_at_most() -> None:
    """Frames, where it was raised and the output's own ``line N`` share the three."""
    frames = "\n".join(
        f'  File "/repo/src/pkg/mod_{n}.py", line {10 + n}, in step_{n}\n    step_{n + 1}()'
        for n in range(12)
    )
    output = f"Traceback (most recent call last):\n{frames}\nKeyError: 'server'\n" * 3
    call = shell_call(1, "Bash", "python -m pkg.run")
    assert call is not None
    text = placeholder_text(call, output, False, "msg-0002")
    assert len(re.findall(r"\bline \d+", text)) <= MAX_LINE_REFERENCES
    assert "KeyError" in text


def test_an_llm_is_shown_which_calls_failed_and_which_changed_files() -> None:
    """The transcript an LLM summarizes labels a result whose output says it failed with
    that line (no error flag needed) and a shell command that edits as changing files;
    a passing run and a file shown keep the plain label."""
    [failing] = [f for f in FAILURES if f.name == "exunit-failure-tally"]
    [edit] = [f for f in CHANGES if f.name == "git-rm"]
    [passing] = [f for f in ROUTINE if f.name == "mix-test-passing"]
    messages = conversation([failing, edit, passing], 0)
    text = render_transcript(messages)
    failure = read_failure(failing.output, failing.command)
    assert failure is not None
    assert f"tool_result (failed: {failure.line})" in text
    assert "tool_use Bash (changes files): git rm -r transcripts/" in text
    assert text.count("tool_result (failed") == 1


def test_a_programs_own_error_line_is_the_first_failure_before_makes() -> None:
    """In a real SWE-agent run, ``./configure`` said ``configure: error: …`` before make
    gave up: that line, in the program's own words, is the call's first error line."""
    [fixture] = [f for f in FAILURES if f.name == "make-error-swe-agent"]
    failure = read_failure(fixture.output, fixture.command)
    assert failure is not None and failure.kind == "error line"
    assert failure.line.startswith("configure: error: select TLS backend(s)")
    assert read_failure("argparse.py: error: unrecognized arguments: -x") is not None
    assert read_failure("note: see configure.ac: errors are fine") is None
