"""The offline checkpoint of a tool loop: one line per distinct call with its outcome,
the step the agent was on, the last failure it did not get past, all within the lists'
budget (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import make_message
from hypothesis import given
from hypothesis import strategies as st

from memoryd.summary.checkpoint import CheckpointSummary, as_items, as_lists, render_lists
from memoryd.summary.extractive_checkpoint import LAST_STEP, extractive_checkpoint
from memoryd.summary.items import SECTIONS
from memoryd.tokens import estimate_text_tokens
from memoryd.transcript.call_lines import (
    call_key,
    call_line,
    call_name,
    outcome_phrase,
)
from memoryd.transcript.output_places import definitions
from memoryd.transcript.toolcalls import ToolCall, outcome_of, tool_use_call

FAILED_RUN = (
    "tests/test_a.py F.F\n"
    "E       AssertionError: assert 1 == 2\n"
    "=================== short test summary info ===================\n"
    "FAILED tests/test_a.py::test_load - AssertionError\n"
    "FAILED tests/test_a.py::TestSave::test_save[x] - AssertionError\n"
    "=============== 2 failed, 1 passed in 0.21s ===============\n"
)
PASSED_RUN = "tests/test_a.py ...\n=============== 3 passed in 0.20s ===============\n"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/repo/run.py", line 3, in <module>\n'
    "    main()\n"
    '  File "/repo/src/app/load.py", line 12, in load\n'
    "    rows[key]\n"
    "KeyError: 'id'\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/repo/src/app/load.py", line 14, in load\n'
    "    raise LoadError(key)\n"
    "app.errors.LoadError: no id\n"
    "exit code 1"
)
LISTING = (
    "Lines 1-9 of /repo/src/app/load.py:\n"
    "     1\timport json\n"
    "     2\t\n"
    "     3\tdef load(path):\n"
    "     4\t    return json.loads(path.read_text())\n"
    "     5\t\n"
    "     6\tclass Loader:\n"
    "     7\t    def __init__(self):\n"
    "     8\t        pass\n"
)


def call(name: str, **given: Any) -> ToolCall:
    """The call a ``tool_use`` block of ``name`` with input ``given`` makes."""
    return tool_use_call(1, {"type": "tool_use", "id": "t", "name": name, "input": given})


def settled(made: ToolCall, output: str, failed: bool = False) -> ToolCall:
    """``made`` with the outcome of ``output``."""
    outcome = outcome_of(output, failed, shell=made.command is not None)
    return ToolCall(
        made.position, made.name, made.label, made.command, outcome, made.edits, made.action
    )


def test_a_failing_test_run_is_its_failing_tests_and_briefly_their_count() -> None:
    outcome = outcome_of(FAILED_RUN)
    assert outcome.failures == ("test_load", "test_save[x]")
    assert outcome_phrase(outcome) == "2 failed: test_load, test_save[x]"
    assert outcome_phrase(outcome, brief=True) == "2 failed"
    assert outcome_phrase(outcome_of(PASSED_RUN)) == "3 passed"
    assert outcome_phrase(outcome_of(PASSED_RUN), brief=True) == ""


def test_a_traceback_is_its_last_exception_what_it_followed_and_where_it_was_raised() -> None:
    outcome = outcome_of(TRACEBACK)
    assert outcome.location == ("/repo/src/app/load.py", "14", "load")
    assert outcome_phrase(outcome) == "LoadError (after KeyError) at load.py line 14 in load"
    assert outcome_phrase(outcome, brief=True) == "LoadError (after KeyError)"


def test_an_exception_far_below_any_frame_has_no_place() -> None:
    output = '  File "/repo/a.py", line 3, in f\n' + "log line\n" * 8 + "ValueError: bad\n"
    assert outcome_of(output).location is None
    assert outcome_phrase(outcome_of(output)) == "ValueError"


def test_a_file_shown_tells_the_names_it_defines_and_an_edit_does_not() -> None:
    assert definitions(LISTING) == ("load", "Loader", "__init__")
    assert definitions("def load(path):\n    class Loader: pass\n") == ("load", "Loader")
    assert definitions("x = 1  # def load(path)\nprint('class Loader')\n") == ()
    view = settled(call("editor", command="view", path="/repo/src/app/load.py"), LISTING)
    assert call_line([view]) == "viewed /repo/src/app/load.py: load, Loader, __init__"
    assert call_line([view], brief=True) == "viewed /repo/src/app/load.py"
    edit = settled(call("Edit", file_path="/repo/src/app/load.py", old_string="a"), LISTING)
    assert call_line([edit]) == "edited /repo/src/app/load.py"


@pytest.mark.parametrize(
    ("name", "given", "shown"),
    [
        ("Bash", {"command": "cd /repo && pytest -x"}, "`pytest -x`"),
        ("Edit", {"file_path": "a.py", "old_string": "x"}, "edited a.py"),
        ("Write", {"file_path": "a.py", "content": "x"}, "wrote a.py"),
        ("MultiEdit", {"file_path": "a.py", "edits": [{"old_string": "x"}]}, "edited a.py"),
        ("Read", {"file_path": "a.py"}, "read a.py"),
        ("Grep", {"pattern": "def load", "path": "src"}, "searched for def load"),
        ("WebFetch", {"url": "https://x.io", "prompt": "?"}, "fetched https://x.io"),
        ("editor", {"command": "view", "path": "/r/a.py"}, "viewed /r/a.py"),
        ("editor", {"command": "create", "path": "/r/b.py", "file_text": "x"}, "created /r/b.py"),
        ("TodoWrite", {"todos": [{"content": "x"}]}, "TodoWrite"),
    ],
)  # fmt: skip
def test_a_call_is_named_by_its_command_or_by_what_the_tool_did(
    name: str, given: dict[str, Any], shown: str
) -> None:
    assert call_name(call(name, **given)) == shown


def test_runs_of_one_call_are_one_line_with_the_first_and_the_last_outcome() -> None:
    test = call("Bash", command="pytest -q")
    runs = [settled(test, FAILED_RUN), settled(test, PASSED_RUN)]
    assert call_line(runs) == "`pytest -q` (2x): 2 failed: test_load, test_save[x], last: 3 passed"
    assert call_line(runs, named=True) == f"{call_line(runs)}; names tests/test_a.py"
    script = call("Bash", command="python run.py")
    runs = [settled(script, TRACEBACK), settled(script, "ValueError: bad\nexit code 1")]
    assert call_line(runs) == "`python run.py` (2x): LoadError (after KeyError), last: ValueError"
    third = settled(script, TRACEBACK.replace("LoadError", "SettingsError"))
    assert call_line([*runs, third]) == (
        "`python run.py` (3x): LoadError (after KeyError), last: SettingsError (after KeyError)"
        " (earlier ValueError) at load.py line 14 in load"
    )
    assert call_line([*runs, third], named=True) == (
        "`python run.py` (3x): LoadError (after KeyError), last: SettingsError (after KeyError)"
        " (earlier ValueError) at /repo/src/app/load.py line 14 in load; via /repo/run.py line 3"
    )


@given(
    st.text(st.characters(blacklist_characters="`\n\r", blacklist_categories=["Cs"]), min_size=1),
    st.text(
        st.characters(whitelist_categories=["L", "N"], whitelist_characters="/._-"), min_size=1
    ),
    st.integers(min_value=1, max_value=3),
)
def test_property_a_call_line_names_the_call_it_stands_for(
    command: str, path: str, runs: int
) -> None:
    """A later checkpoint knows which call a line of an earlier one stands for: any
    command, any file path without a colon or a blank."""
    made = call("Bash", command=command)
    if made.command is not None:  # else nothing but blanks: not a command
        assert call_key(call_line([settled(made, TRACEBACK)] * runs)) == call_name(made)
    edit = call("Edit", file_path=path, old_string="x")
    assert call_key(call_line([edit] * runs)) == call_name(edit)


def turn(index: int, text: str, command: str, output: str) -> list[dict[str, Any]]:
    """An assistant message saying ``text`` and running ``command``, then its result."""
    tool_id = f"t{index}"
    blocks = [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": command}}]
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": output}
    return [
        make_message(index, "assistant", [{"type": "text", "text": text}, *blocks]),
        make_message(index + 1, "user", [result]),
    ]


TASK = make_message(
    0,
    "user",
    "<task>Fix the loader: it drops the id.</task>\n"
    "When you are done, run the tests and you must submit the fix. Next, update the docs.",
)


def loop(*turns: tuple[str, str, str]) -> list[dict[str, Any]]:
    """The task, then one turn per (text, command, output)."""
    messages = [TASK]
    for text, command, output in turns:
        messages += turn(len(messages), text, command, output)
    return messages


def everything(lists: CheckpointSummary) -> list[str]:
    return [item for name in SECTIONS for item in getattr(lists, name)]


def test_the_lists_of_a_loop_are_its_calls_its_last_step_and_its_last_failure() -> None:
    messages = loop(
        ("Let me reproduce it.", "python run.py", TRACEBACK),
        ("Now the tests.", "pytest -q", FAILED_RUN),
        ("I'll read the loader.", "nl -ba src/app/load.py", LISTING),
    )
    lists = as_lists(extractive_checkpoint((), messages, 1024))
    assert lists.completed == [
        "`python run.py`: LoadError (after KeyError) at /repo/src/app/load.py line 14 in load;"
        " via /repo/run.py line 3",
    ]
    assert lists.blockers == [
        "`pytest -q`: 2 failed: test_load, test_save[x]; names tests/test_a.py"
    ]
    assert lists.in_progress == [
        f"{LAST_STEP}I'll read the loader.",
        "`nl -ba src/app/load.py`: load, Loader, __init__",
    ]
    assert lists.pending == [] and lists.decisions == []
    for said in ("submit", "run the tests", "update the docs", "drops the id"):
        assert not any(said in item for item in everything(lists))


def test_a_failure_run_again_with_success_or_reported_fixed_blocks_nothing() -> None:
    again = loop(
        ("Now the tests.", "pytest -q", FAILED_RUN),
        ("And again.", "pytest -q", PASSED_RUN),
    )
    assert as_lists(extractive_checkpoint((), again, 1024)).blockers == []
    reported = loop(("Now the tests.", "pytest -q", FAILED_RUN))
    reported.append(make_message(3, "assistant", "I fixed the loader; all tests pass."))
    lists = as_lists(extractive_checkpoint((), reported, 1024))
    assert lists.blockers == [] and lists.in_progress == []
    assert lists.completed == [
        "`pytest -q`: 2 failed: test_load, test_save[x]; names tests/test_a.py",
        "I fixed the loader; all tests pass.",
    ]


def test_a_later_checkpoint_moves_the_last_step_on_and_tells_a_call_made_again_once() -> None:
    first = as_lists(
        extractive_checkpoint(
            (),
            loop(
                ("Let me reproduce it.", "python run.py", TRACEBACK),
                ("Now the tests.", "pytest -q", FAILED_RUN),
            ),
            1024,
        )
    )
    assert first.blockers == [
        "`pytest -q`: 2 failed: test_load, test_save[x]; names tests/test_a.py"
    ]
    later = [
        *turn(5, "Next, the listing.", "ls src", "load.py\n[exit code 0]"),
        *turn(7, "The tests once more.", "python run.py", "ValueError: bad\nexit code 1"),
    ]
    second = as_lists(extractive_checkpoint(as_items(first), later, 1024))
    assert second.completed == [
        "`pytest -q`: 2 failed: test_load, test_save[x]; names tests/test_a.py",
        "`ls src`",
    ]
    assert second.blockers == ["`python run.py`: ValueError"]
    assert second.in_progress == [f"{LAST_STEP}The tests once more."]


def test_the_lists_fit_their_budget_and_tell_the_latest_calls_in_full_first() -> None:
    """As the budget grows the lists name more of the commands, first briefly, and the
    most recent are told in full before the older ones."""
    turns = [(f"Run {n}.", f"python run_{n}.py", TRACEBACK) for n in range(40)]
    messages = loop(*turns, ("Let me check the tree.", "git status", "clean\n[exit code 0]"))
    listed_before, told_all_briefly = 0, False
    for budget in range(40, 1600, 40):
        lists = as_lists(extractive_checkpoint((), messages, budget))
        assert estimate_text_tokens(render_lists(as_items(lists))) <= budget
        listed = [x for x in lists.completed if x.startswith("`python run_")]
        assert len(listed) >= listed_before
        listed_before = len(listed)
        full = [
            " at /repo/src/app/load.py line 14 in load; via /repo/run.py line 3" in x
            for x in listed
        ]
        if len(listed) == 39 and not all(full):  # the 40th is the blocker
            told_all_briefly = True
            assert full == sorted(full), budget  # the full ones are the latest
    assert told_all_briefly and listed_before == 39


def test_the_places_an_output_names_come_only_in_the_room_every_full_line_leaves() -> None:
    listed = "\n".join(f"src/pkg/module_{n}.py" for n in range(6))
    messages = loop(
        ("Search.", "grep -rl load src", listed),
        ("Run it.", "python run.py", TRACEBACK),
        ("Check.", "git status", "clean"),
    )
    search = settled(call("Bash", command="grep -rl load src"), listed)
    failing = settled(call("Bash", command="python run.py"), TRACEBACK)
    roomy = as_lists(extractive_checkpoint((), messages, 1024))
    assert roomy.completed == [call_line([search], named=True)]
    assert roomy.completed[0].startswith("`grep -rl load src`: names src/pkg/module_0.py, ")
    assert roomy.blockers == [call_line([failing], named=True)]
    spare = len(roomy.completed[0]) - len(call_line([search]))
    tight_budget = (len(render_lists(as_items(roomy))) - spare) // 4
    tight = as_lists(extractive_checkpoint((), messages, tight_budget))
    assert tight.completed == [call_line([search])]
    assert tight.blockers == roomy.blockers
