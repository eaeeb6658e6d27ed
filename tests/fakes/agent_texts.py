"""The prose of made-up agent conversations: tasks with their standing instructions,
thoughts, follow-up requests, hook and reminder messages (standard library only, seeded).

Written for these tests; modelled on the shape of public agent templates (an issue inside
tags, then kilobytes of rules that repeat themselves), not on their text.
"""

from __future__ import annotations

import random

from agent_outputs import NOUNS, OBJECTS, VERBS, Function, Module, Project

RULES = (
    "Work only inside the repository; never touch files outside it.",
    "Do not modify the existing tests unless the task asks for it; add new tests instead.",
    "Every command runs in a fresh shell: a `cd` or an exported variable does not carry over.",
    "Prefer small, reviewable edits over rewriting whole files.",
    "Read a file before you edit it, and view the lines again after the edit.",
    "Run the relevant tests after each change and read their output in full.",
    "Never use interactive programs (editors, pagers, prompts); pass non-interactive flags.",
    "If a command produces a very long output, narrow it with head, tail, sed or grep.",
    "Keep the public interface backwards compatible unless the task says otherwise.",
    "When you are done, show the final diff and stop; do not start unrelated work.",
)
WORKFLOW = (
    "Find the code the issue is about: list the folders, grep for the names it mentions.",
    "Write a short script that reproduces the problem and run it to see it fail.",
    "Change the source so that the script passes, touching as little as possible.",
    "Run the script again, then the test files of every module you changed.",
    "Think about edge cases (empty input, the largest values, repeated calls) and try them.",
    "Review the diff once more before you finish.",
)


def standing_instructions(rng: random.Random, project: Project, text_mode: bool) -> str:
    """Kilobytes of rules a harness puts around every task, key rules said twice."""
    rules = list(RULES)
    rng.shuffle(rules)
    parts = [
        "<instructions>",
        "# How to work on this task",
        "",
        f"You are working in a checkout of `{project.package}` at {project.root}. You act "
        "only through the tools you are given; a person reads your work afterwards and "
        "expects every change to be explained by the issue.",
        "",
        "## Workflow",
        *[f"{n}. {step}" for n, step in enumerate(WORKFLOW, 1)],
        "",
        "## Rules",
        *[f"- {rule}" for rule in rules],
        "",
    ]
    if text_mode:
        parts += [
            "## Format of every reply",
            "Start with a line `THOUGHT:` and your reasoning, then exactly one fenced block "
            "marked `bash` holding one command (join several with && if you must). The "
            "command's output comes back as the next message, with its return code in "
            "<returncode> tags and its text in <output> tags. A reply with no block, or with "
            "two, is refused and you will be asked again.",
            "",
            "Examples of useful commands:",
            "```bash",
            f"nl -ba src/{project.package}/{project.modules[0].name}.py | sed -n '10,40p'",
            "```",
            "```bash",
            "grep -rn 'def ' src | head -40",
            "```",
            "",
        ]
    parts += [
        "## Finishing",
        "When the fix is complete and the tests pass, print the diff with `git diff` and "
        "reply that you are done. Do not commit. Do not delete the reproduction script "
        "before the diff has been shown.",
        "",
        "## Reminders",
        *[f"- {rule}" for rule in rules[:4]],
        "- Again: one change at a time, and read the whole output of each command.",
        "</instructions>",
    ]
    return "\n".join(parts)


def problem(
    rng: random.Random, project: Project, module: Module, function: Function
) -> tuple[str, str]:
    """An issue about ``function``, and the distinctive phrase that names it."""
    obj, flag, number = rng.choice(OBJECTS), f"{rng.choice(VERBS)}_every", rng.randint(3, 97)
    phrase = f"the last partial {obj} is dropped when {flag} is {number}"
    text = "\n".join(
        [
            f"### {function.name} loses data on a partial {obj}",
            "",
            f"When the exporter runs with `{flag}={number}`, {phrase}. With any other value "
            "the output is complete. It started after the last release; the changelog "
            f"mentions a rewrite of `{function.name}` in `{module.path}`.",
            "",
            "Steps to reproduce:",
            "```",
            f"from {project.package}.{module.name} import {function.name}",
            f"print(len({function.name}(load_fixture('{rng.choice(NOUNS)}'), limit={number})))",
            "```",
            f"Expected {number + 1}, got {number}. No error is raised, which is the worst "
            "part: downstream totals are silently short.",
        ]
    )
    return text, phrase


def task_message(rng: random.Random, project: Project, issue: str, text_mode: bool) -> str:
    """The one genuine user message of an autonomous run: the issue inside its template."""
    intro = (
        f"<repository>\n{project.root}\n</repository>\n"
        f"A Python repository is checked out at {project.root}. Resolve the issue below "
        "by changing non-test files.\n\n"
    )
    rules = standing_instructions(rng, project, text_mode)
    return f"{intro}<issue>\n{issue}\n</issue>\n\n{rules}"


def project_memory(rng: random.Random, project: Project) -> str:
    """What an interactive CLI prepends from the project's memory file."""
    return "\n".join(
        [
            "<system-reminder>",
            "As you answer the user's questions, you can use the following context:",
            "# Project notes",
            f"- Package `{project.package}`; sources in src/, tests in tests/.",
            "- Run the tests with `python -m pytest -q`; lint with `ruff check src tests`.",
            "- Type hints everywhere; no new dependencies without asking.",
            f"- The {rng.choice(OBJECTS)} format is documented in docs/format.md.",
            *[f"- {rule}" for rule in RULES[:5]],
            "This context may or may not be relevant to the task.",
            "</system-reminder>",
        ]
    )


def thought(rng: random.Random, kind: str, module: Module, function: Function) -> str:
    """A short thought before an action of ``kind``."""
    options = {
        "list": ["Let me see how the repository is laid out.", "First, the folder layout."],
        "find": ["Which Python files are there?", "Let me list the source files."],
        "grep": [
            f"Where is `{function.name}` defined and called?",
            f"I'll search for `{function.name}` across the sources.",
        ],
        "view": [
            f"Let me read `{function.name}` in {module.path}.",
            f"I need to see how {module.path} handles the {rng.choice(OBJECTS)}.",
        ],
        "create": ["I'll write a script that reproduces the issue."],
        "run": ["Now run the reproduction script.", "Let me run it to see the failure."],
        "edit": [
            f"The {rng.choice(OBJECTS)} is not carried over in `{function.name}`; I'll fix it.",
            f"I'll change the loop in `{function.name}` so the partial one is kept.",
        ],
        "test": [f"Now the tests of {module.name}.", "Let me run the related tests."],
        "diff": ["Let me review the diff so far."],
        "report": ["A quick size report of the modules to see what else is involved."],
        "markup": ["Let me check what the service renders now."],
        "junit": ["The CI report has the failing case; let me read it."],
    }
    return rng.choice(options[kind])


def finding(rng: random.Random, facts: list[tuple[str, str]]) -> str:
    """A sentence restating what the last output showed (an agent's note to itself)."""
    found = dict(facts)
    if "exception" in found and "line" in found:
        return (
            f"The traceback ends in {found['exception']} at {found['line']} of "
            f"{found.get('path', 'the module')}, inside `{found.get('identifier', '?')}`."
        )
    failing = [text for kind, text in facts if kind == "identifier" and text.startswith("test_")]
    if failing:
        return f"`{failing[0]}` fails" + (f", and {len(failing) - 1} more." if failing[1:] else ".")
    return rng.choice(["Nothing unexpected there.", "That matches what I thought.", "OK."])


def follow_up(rng: random.Random, module: Module, function: Function) -> str:
    """A later request from the user of an interactive session."""
    return rng.choice(
        [
            f"Thanks. Can you also make `{function.name}` log how many entries it skipped?",
            f"Good. Now add a test in tests/test_{module.name}.py for a limit of 0.",
            f"Hm, {module.path} still looks off to me. Check the {rng.choice(OBJECTS)} "
            "handling there as well?",
            f"Please rename the helper in {module.path} so it says what it does, and rerun "
            "the tests.",
            "Before we go on: run the whole suite and tell me what fails.",
        ]
    )


def final_answer(rng: random.Random, module: Module, function: Function) -> str:
    """The assistant's closing text of a turn."""
    return rng.choice(
        [
            f"Done. `{function.name}` in {module.path} now keeps the partial entry; the "
            "tests of that module pass.",
            f"I changed {module.path} and added a test. Everything passes except one "
            "unrelated flaky test.",
            f"Fixed. The cause was the early `return` in `{function.name}`.",
        ]
    )


def hook_message(rng: random.Random, module: Module) -> str:
    """A hook's feedback, delivered as a user message."""
    return rng.choice(
        [
            f"Stop hook feedback:\n[.hooks/lint.sh]: ruff found 2 problems in {module.path}",
            f"PostToolUse hook: formatted {module.path} (1 file reformatted)",
            "<system-reminder>\nThe todo list is empty. If the work has several steps, "
            "consider writing them down first. Do not mention this reminder to the user.\n"
            "</system-reminder>",
        ]
    )
