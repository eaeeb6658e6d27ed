"""Conversations shaped like real agents' for split and job tests: an autonomous tool loop
(one task, then only tool calls and their results), an interactive session (user turns now
and then, hook messages, long tool outputs) and a text-mode agent (commands in code fences,
their output as the next user message). Hypothesis draws their sizes and details."""

from __future__ import annotations

from typing import Any

from conftest import make_message
from hypothesis import strategies as st

TASK = "Task: make `parse_config` in src/app/config.py accept a missing [server] table."
SHAPES = ("loop", "interactive", "text")


def _call(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": command}}


def _result(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": output}


def _thought(step: int, size: int) -> dict[str, Any]:
    text = f"Step {step}: looking at src/app/module_{step}.py next. " + "reasoning " * size
    return {"type": "text", "text": text}


def _output(step: int, size: int) -> str:
    return f"src/app/module_{step}.py:{step + 10}: ok\n" + "output line\n" * size


def tool_loop(
    steps: int,
    size: int,
    *,
    parallel: frozenset[int] = frozenset(),
    interjections: frozenset[int] = frozenset(),
    running: bool = False,
) -> list[dict[str, Any]]:
    """A task, then ``steps`` assistant tool calls each answered by a tool result; steps
    in ``parallel`` make two calls at once, steps in ``interjections`` are followed by a
    user turn (an interactive session); with ``running`` the last call has no result yet."""
    messages = [make_message(0, "user", TASK)]
    for step in range(steps):
        ids = [f"call-{step}-{k}" for k in range(2 if step in parallel else 1)]
        blocks = [_thought(step, size), *(_call(i, f"pytest -k case_{step}") for i in ids)]
        messages.append(make_message(len(messages), "assistant", blocks))
        if running and step == steps - 1:
            break
        results = [_result(i, _output(step, size)) for i in ids]
        messages.append(make_message(len(messages), "user", results))
        if step in interjections:
            note = f"<system-reminder>step {step} reminder</system-reminder> Also check the docs."
            messages.append(make_message(len(messages), "user", note))
    return messages


def text_agent(steps: int, size: int) -> list[dict[str, Any]]:
    """A task, then assistant text with a command in a code fence and its output pasted
    back as the next user message (plain string content)."""
    messages = [make_message(0, "user", TASK)]
    for step in range(steps):
        thought = f"Running the tests for case {step}. " + "reasoning " * size
        fence = f"```bash\npytest -k case_{step}\n```"
        messages.append(make_message(len(messages), "assistant", f"{thought}\n{fence}"))
        output = f"<returncode>1</returncode>\n{_output(step, size)}"
        messages.append(make_message(len(messages), "user", output))
    return messages


@st.composite
def agent_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A conversation of one of the three shapes, 20 to 120 messages."""
    shape = draw(st.sampled_from(SHAPES))
    steps = draw(st.integers(10, 60))
    size = draw(st.integers(5, 60))
    if shape == "text":
        return text_agent(steps, size)
    parallel = frozenset(draw(st.sets(st.integers(0, steps - 1), max_size=steps // 3)))
    interjections: frozenset[int] = frozenset()
    if shape == "interactive":
        interjections = frozenset(draw(st.sets(st.integers(0, steps - 1), max_size=4)))
    return tool_loop(
        steps, size, parallel=parallel, interjections=interjections, running=draw(st.booleans())
    )
