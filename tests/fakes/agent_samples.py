"""Agent transcripts for the summary tests, written for them: a tool loop, an interactive
session and a text-mode agent, each generated from a seed, with the facts a summary of
them must keep (the commands run, the exceptions seen, the task)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

STANDING = (
    "Remember: never modify the files under tests/, and keep every change minimal.",
    "When you've completed your work, you MUST submit your changes with the submit tool.",
)
"""Standing instructions, repeated in the task and in later user turns."""
MODULES = ("exporter", "importer", "scheduler", "billing", "reports", "mailer")
EXCEPTIONS = ("ModuleNotFoundError", "KeyError", "AttributeError", "ValueError", "TypeError")


@dataclass
class Transcript:
    """Messages, and what a summary of them must keep."""

    messages: list[dict[str, Any]]
    task: str
    commands: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)


def _message(index: int, role: str, content: Any) -> dict[str, Any]:
    return {
        "id": f"m{index:04d}",
        "role": role,
        "content": content,
        "timestamp": 1_800_000_000_000 + index * 1000,
    }


def _traceback(name: str, module: str) -> str:
    detail = {
        "ModuleNotFoundError": f"No module named '{module}_helpers'",
        "KeyError": "'delimiter'",
        "AttributeError": f"'Row' object has no attribute '{module}_id'",
        "ValueError": "too many values to unpack (expected 2)",
        "TypeError": "write() argument must be str, not bytes",
    }[name]
    return (
        "Traceback (most recent call last):\n"
        f'  File "/repo/src/{module}/main.py", line 42, in run\n'
        f"    rows = load_{module}(path)\n"
        f"{name}: {detail}\n"
    )


def _listing(module: str, start: int) -> str:
    """A file view, numbered like an agent's file tool shows it: never a fact."""
    lines = [
        "def write_rows(rows, out):",
        '    """Write rows as CSV."""',
        "    for row in rows:",
        "        out.write(','.join(row))",
        "</IMPORTANT>",
        "L:  21 | P:   9 | L060 | line too long",
        "| column | type | nullable |",
        "|--------|------|----------|",
    ]
    return "\n".join(f"{start + i:6d}\t{line}" for i, line in enumerate(lines)) + (
        f"\n# end of src/{module}/csv_out.py"
    )


def tool_loop(seed: int, rounds: int = 6) -> Transcript:
    """An autonomous tool loop: one task, then tool calls and results, standing
    instructions repeated in the task and in a reminder block of later turns."""
    rng = random.Random(seed)
    module = rng.choice(MODULES)
    task = f"Fix the CSV export of the {module} module: quoted fields that hold a comma are split."
    first = (
        f"{STANDING[0]}\n{STANDING[1]}\n\n<task>\n{task}\nThe bug report is attached below.\n"
        f"</task>\n\n<IMPORTANT>\nDo not ask questions; work on your own.\n</IMPORTANT>"
    )
    messages = [_message(0, "user", first)]
    transcript = Transcript(messages, task)
    for turn in range(rounds):
        index = len(messages)
        call_id = f"toolu_{seed}_{turn}"
        name = rng.choice(EXCEPTIONS)
        if turn % 3 == 1:
            path = f"src/{module}/csv_out.py"
            blocks: list[dict[str, Any]] = [
                {"type": "text", "text": "Let me look at the writer."},
                {"type": "tool_use", "id": call_id, "name": "Read", "input": {"file_path": path}},
            ]
            output: Any = _listing(module, 10 * turn + 1)
            failed = False
        else:
            command = (
                rng.choice(
                    [
                        f"python -m pytest tests/test_{module}.py -x -q",
                        f"python -m {module}.cli export --out /tmp/out_{turn}.csv",
                        f"ruff check src/{module}",
                        f"grep -rn split_row src/{module}",
                    ]
                )
                + f" --seed {seed * 10 + turn}"
            )
            transcript.commands.append(command)
            blocks = [
                {
                    "type": "text",
                    "text": f"I found that the {module} writer joins fields without quoting. "
                    "Next I will rerun the check.",
                },
                {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}},
            ]
            output = [
                {"type": "text", "text": _traceback(name, module) + "\nExit code: 1"},
            ]
            transcript.exceptions.append(name)
            failed = True
        messages.append(_message(index, "assistant", blocks))
        result: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": call_id, "content": output, "is_error": failed}
        ]
        if turn % 2 == 0:
            result.append({"type": "text", "text": f"{STANDING[0]}\n{STANDING[1]}"})
        messages.append(_message(index + 1, "user", result))
    index = len(messages)
    messages.append(
        _message(
            index,
            "assistant",
            f"I fixed the quoting in src/{module}/csv_out.py and all tests pass now. "
            "Next I will submit the change.",
        )
    )
    return transcript


def interactive(seed: int) -> Transcript:
    """A session with user turns now and then, hook reminders and long tool output."""
    rng = random.Random(seed)
    module = rng.choice(MODULES)
    name = rng.choice(EXCEPTIONS)
    task = f"Add a --dry-run flag to the {module} command so it prints what it would send."
    command = f"npm run test -- {module} --runInBand --seed {seed}"
    second = f"pnpm lint --filter {module}-{seed}"
    reminder = "<system-reminder>\nThe todo list is empty. Use the todo tool.\n</system-reminder>"
    long_output = "\n".join(f"  ok {i} - {module} case {i}" for i in range(300))
    messages = [
        _message(0, "user", f"{reminder}\n{task}"),
        _message(
            1,
            "assistant",
            [
                {"type": "text", "text": "I'll run the tests first."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": command}},
            ],
        ),
        _message(
            2,
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": f"{long_output}\n{name}: flag parsing failed\nexit code 1",
                }
            ],
        ),
        _message(
            3,
            "assistant",
            f"The {name} comes from the option parser: it rejects unknown flags. "
            "We decided to register the flag in the parser instead of stripping it.",
        ),
        _message(4, "user", f"{reminder}\nPlease use pnpm instead of npm from now on."),
        _message(
            5,
            "assistant",
            [
                {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": second}},
                {
                    "type": "tool_use",
                    "id": "t3",
                    "name": "Edit",
                    "input": {
                        "file_path": f"src/{module}/cli.ts",
                        "old_string": "const flags = {}",
                        "new_string": "const flags = { dryRun: false }",
                    },
                },
            ],
        ),
        _message(
            6,
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": f"src/{module}/cli.ts:12:80: E501 line too long\nexit code 1",
                },
                {"type": "tool_result", "tool_use_id": "t3", "content": "File edited."},
            ],
        ),
        _message(7, "assistant", "Done: the flag is registered and the lint error is fixed."),
    ]
    return Transcript(messages, task, [command, second], [name, "E501"])


def text_mode(seed: int, rounds: int = 4) -> Transcript:
    """A text-mode agent: commands in bash fences, outputs pasted back as user turns."""
    rng = random.Random(seed)
    module = rng.choice(MODULES)
    task = f"The {module} report crashes on empty input; make it print an empty table."
    messages = [_message(0, "user", f"{task}\n\n{STANDING[1]}")]
    transcript = Transcript(messages, task)
    for turn in range(rounds):
        command = f"python scripts/{module}_report.py --input data/empty_{seed}_{turn}.csv"
        name = rng.choice(EXCEPTIONS)
        transcript.commands.append(command)
        transcript.exceptions.append(name)
        messages.append(
            _message(
                len(messages),
                "assistant",
                f"THOUGHT: The crash is in the {module} loader. I will run the report.\n\n"
                f"```bash\n{command}\n```",
            )
        )
        body = f"<returncode>1</returncode>\n<output>\n{_traceback(name, module)}</output>"
        if turn % 2:
            body += f"\n{STANDING[1]}"
        messages.append(_message(len(messages), "user", body))
    messages.append(
        _message(len(messages), "assistant", "I fixed the empty-input case; tests pass.")
    )
    return transcript


def as_jsonl(messages: list[dict[str, Any]]) -> str:
    """The conversation file's text."""
    return "".join(json.dumps(m, separators=(",", ":")) + "\n" for m in messages)
