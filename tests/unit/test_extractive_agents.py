"""The offline summary and checkpoint of agent transcripts (tool loops, interactive
sessions, text-mode agents): one line per tool call with its outcome, the task in one
line, no tool output, no standing instruction, no raw JSON, no fragment."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_samples import STANDING, Transcript, interactive, text_mode, tool_loop
from agent_texts import RULES, WORKFLOW
from agent_transcripts import generate, write_workspace
from conftest import SettingsFactory, make_message

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.summary.checkpoint import CheckpointSummary, as_items, as_lists, render_lists
from memoryd.summary.extractive import extractive_summary
from memoryd.summary.extractive_checkpoint import extractive_checkpoint
from memoryd.summary.items import SECTIONS, parse_head
from memoryd.summary.retention import extract_details, score
from memoryd.tokens import estimate_text_tokens
from memoryd.transcript.call_lines import call_key
from memoryd.transcript.toolcalls import command_label

SEEDS = range(6)
KINDS = {"tool loop": tool_loop, "interactive": interactive, "text mode": text_mode}
NOISE = ("</IMPORTANT>", "L:  21 |", "| column |", "|---", "\t", "ok 12 -", "<returncode>")


def transcripts() -> list[Transcript]:
    return [make(seed) for make in KINDS.values() for seed in SEEDS]


def items(summary: str) -> list[str]:
    """The summary's task line and items, without bullets, section titles or the ids of
    their messages."""
    head = parse_head(summary)
    return [*([f"Task: {head.task}"] if head.task else []), *(i.text for i in head.items)]


@pytest.mark.parametrize("style", ["narrative", "rolling"])
@pytest.mark.parametrize("make", KINDS.values(), ids=KINDS.keys())
def test_each_tool_call_is_one_line_with_its_command_and_outcome(
    make: Callable[[int], Transcript], style: str
) -> None:
    for seed in SEEDS:
        transcript = make(seed)
        summary = extractive_summary(transcript.messages, None, 1024, style)
        for command, exception in zip(
            transcript.commands, transcript.exceptions[: len(transcript.commands)], strict=True
        ):
            label = command_label(command)
            [line] = [item for item in items(summary) if f"`{label}`" in item]
            assert "exit 1" in line, line
            assert exception in line, line


@pytest.mark.parametrize("transcript", transcripts())
def test_no_item_is_raw_json_tool_output_markup_or_a_fragment(transcript: Transcript) -> None:
    for style in ("narrative", "rolling"):
        summary = extractive_summary(transcript.messages, None, 1024, style)
        for item in items(summary):
            assert len(item.strip()) >= 2
            assert not item.lstrip().startswith(("{", "["))
            assert not any(noise in item for noise in NOISE), item


@pytest.mark.parametrize("transcript", transcripts())
def test_standing_instructions_are_not_copied(transcript: Transcript) -> None:
    summary = extractive_summary(transcript.messages, None, 1024).casefold()
    assert "never modify the files under tests/" not in summary
    assert "you must submit" not in summary
    for line in STANDING:
        assert line.casefold() not in summary


@pytest.mark.parametrize("transcript", transcripts())
def test_the_task_is_stated_once_in_one_line_and_not_what_surrounds_its_block(
    transcript: Transcript,
) -> None:
    summary = extractive_summary(transcript.messages, None, 1024)
    [task] = [item for item in items(summary) if item.startswith("Task:")]
    assert task == f"Task: {transcript.task}"
    assert items(summary)[0] == task
    assert summary.count(transcript.task) == 1
    assert "ask questions" not in summary


def test_the_task_line_skips_the_introduction_of_a_task_block() -> None:
    task = (
        "<pr_description>\nConsider the following PR description:\n"
        "admin_views.test_multidb fails with persistent test SQLite database.\n"
        "I tried --keepdb.\n</pr_description>\n<instructions>Make the change.</instructions>"
    )
    messages = [
        make_message(0, "user", task),
        make_message(1, "assistant", "Let me look at the tests first."),
    ]
    summary = extractive_summary(messages, None, 1024)
    [line] = [item for item in items(summary) if item.startswith("Task:")]
    assert line == "Task: admin_views.test_multidb fails with persistent test SQLite database."


def test_a_call_line_names_the_places_its_output_named() -> None:
    def ran(index: int, command: str, output: str) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": f"t{index}", "name": "bash", "input": {"command": command}}
        result = {"type": "tool_result", "tool_use_id": f"t{index}", "content": output}
        return [make_message(index, "assistant", [use]), make_message(index + 1, "user", [result])]

    trace = (
        'Traceback (most recent call last):\n  File "/testbed/src/x.py", line 20, in run\n'
        "    go()\nValueError: bad\nexit code 1"
    )
    messages = [
        make_message(0, "user", "Fix the loader: it drops the id of every record."),
        *ran(1, "find src -name '*.py'", "src/pkg/a.py\nsrc/pkg/b.py"),
        *ran(3, "python run.py", trace),
    ]
    lines = items(extractive_summary(messages, None, 1024))
    assert "Ran `find src -name '*.py'` → names src/pkg/a.py, src/pkg/b.py" in lines
    assert "Ran `python run.py` → exit 1, ValueError: bad; at /testbed/src/x.py line 20" in lines


def test_the_task_line_survives_folding_into_a_later_summary() -> None:
    transcript = tool_loop(3, rounds=8)
    first = extractive_summary(transcript.messages[:9], None, 1024)
    second = extractive_summary(transcript.messages[9:], first, 1024)
    assert [item for item in items(second) if item.startswith("Task:")] == [
        f"Task: {transcript.task}"
    ]


def test_a_tight_budget_keeps_the_task_and_the_failing_commands_first() -> None:
    transcript = tool_loop(4, rounds=30)
    summary = extractive_summary(transcript.messages, None, 200)
    assert items(summary)[0] == f"Task: {transcript.task}"
    ran = [item for item in items(summary) if item.startswith("Ran `")]
    assert ran and all("exit 1" in item for item in ran)
    assert not any(item.startswith("Read ") for item in items(summary))


def test_text_mode_commands_come_from_their_code_fence_and_outputs_are_not_statements() -> None:
    transcript = text_mode(2)
    summary = extractive_summary(transcript.messages, None, 1024)
    assert "```" not in summary
    assert "THOUGHT" not in summary
    assert "Traceback" not in summary
    assert not [item for item in items(summary) if item.startswith("User:")]


def test_interactive_hooks_and_long_outputs_are_left_out_and_user_turns_kept() -> None:
    transcript = interactive(1)
    summary = extractive_summary(transcript.messages, None, 1024)
    assert "todo" not in summary.casefold()
    assert "User: Please use pnpm instead of npm from now on." in items(summary)
    assert "E501" in summary
    assert any(re.fullmatch(r"Edit src/\w+/cli\.ts", item) for item in items(summary))


def test_commands_and_exceptions_of_the_summarized_part_are_in_the_summary() -> None:
    """Across the generated transcripts every command run and every exception seen is in
    the summary, and the retention check finds nothing missing."""
    commands = exceptions = kept_commands = kept_exceptions = 0
    for transcript in transcripts():
        summary = extractive_summary(transcript.messages, None, 1024)
        commands += len(transcript.commands)
        exceptions += len(transcript.exceptions)
        kept_commands += sum(command_label(c) in summary for c in transcript.commands)
        kept_exceptions += sum(name in summary for name in transcript.exceptions)
        assert score(extract_details(transcript.messages), summary).missing == ()
    assert (kept_commands, kept_exceptions) == (commands, exceptions)


@pytest.mark.parametrize("transcript", transcripts())
def test_checkpoint_lists_hold_what_the_agent_did_and_reported_never_instructions(
    transcript: Transcript,
) -> None:
    lists = as_lists(extractive_checkpoint((), transcript.messages, 1024))
    every = [x for name in SECTIONS for x in getattr(lists, name)]
    reports = [x for x in lists.completed if call_key(x) is None]
    assert reports and all(x.startswith(("I fixed", "Done:")) for x in reports)
    for command in transcript.commands:
        assert f"`{command_label(command)}`" in "\n".join(lists.completed + lists.blockers)
    for item in every:
        assert len(item) >= 2 and not item.lstrip().startswith(("{", "["))
        assert "submit your changes" not in item and "MUST" not in item
        assert not any(noise in item for noise in NOISE), item
    assert transcript.task not in every


def test_extractive_checkpoint_lists_what_the_agent_reported_not_what_it_was_told() -> None:
    """A user's instruction ("When you have completed…, submit") and tool output are
    never work done or to do; the agent's own reports and plans are."""
    messages = [
        make_message(0, "user", "Fix the flaky upload test. Then the docs need to be updated."),
        make_message(
            1,
            "assistant",
            [
                {"type": "text", "text": "I will run the tests first."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest"}},
            ],
        ),
        make_message(
            2,
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": '{"status": "done", "fixed": true}\nAll checks completed.',
                },
                {
                    "type": "text",
                    "text": "When you have completed your work, you must submit it.",
                },
            ],
        ),
        make_message(3, "assistant", "I fixed the race in the upload test. Next I will submit."),
    ]
    lists = as_lists(extractive_checkpoint((), messages, 1024))
    assert lists.completed == ["`pytest`", "I fixed the race in the upload test."]
    assert lists.pending == ["Next I will submit."]
    everything = json.dumps(lists.model_dump())
    for text in ("docs need", "run the tests first", "completed your work", "status", "checks"):
        assert text not in everything


@pytest.mark.parametrize("seed", range(3))
def test_the_checkpoint_of_a_generated_tool_loop_reads_like_an_engineers_notes(
    seed: int, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """An autonomous loop of 150 messages, checkpointed offline as the daemon would: the
    lists hold the calls with their outcomes, the last step and the last failure, never
    the harness's instructions; every command run and exception seen is still there,
    and the whole fits ``max_summary_tokens``."""
    transcript = generate("autonomous", seed, 150)
    folder = write_workspace(tmp_path / "ws", transcript)
    settings = make_settings(
        strategy="checkpoint",
        token_limit=int(transcript.tokens / 0.95),
        summarizer__backend="extractive",
        keep_first=1,
    )
    assert run_job(JobRequest(folder, settings)).outcome == "completed"
    head = json.loads((folder / "conversation.jsonl").read_text().splitlines()[0])
    saved = head["checkpoint"]
    lists = CheckpointSummary(**{name: saved[name] for name in SECTIONS})
    assert lists.completed and lists.in_progress and lists.in_progress[0].startswith("Last step: ")
    failed_runs = [
        x for x in lists.completed if re.match(r"`python reproduce_\w+\.py`: \w+Error", x)
    ]
    test_runs = [x for x in lists.completed if re.match(r"`python -m pytest tests/\S+\.py.*`", x)]
    assert failed_runs and any(
        re.search(r" at [\w/.]+\.py line \d+ in \w+", x) for x in failed_runs
    )
    assert any(re.search(r": \d+ failed: test_\w+", x) for x in test_runs + lists.blockers)
    said = [x for x in lists.completed + lists.pending if call_key(x) is None]
    task_lines = [x.strip("- ") for x in transcript.messages[0]["content"].splitlines()]
    for line in [*RULES, *WORKFLOW, *(x for x in task_lines if len(x) >= 24)]:
        assert not any(line in item for item in said), line
    for item in (x for name in SECTIONS for x in getattr(lists, name)):
        assert not item.lstrip().startswith(("{", "[")) and '"tool_use"' not in item
    details = [
        d for d in extract_details(transcript.messages[1:]) if d.kind in ("command", "error")
    ]
    assert score(details, head["content"]).missing == ()
    section = "Details kept verbatim: " + "; ".join(saved["details"])
    assert estimate_text_tokens(f"{render_lists(as_items(lists))}\n{section}") <= 1024
