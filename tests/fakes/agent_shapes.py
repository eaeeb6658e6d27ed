"""Conversations shaped like real agents' for split and job tests: an autonomous tool loop
(one task, then only tool calls and their results), an interactive session (user turns now
and then, hook messages, long tool outputs), a text-mode agent (commands in code fences,
their output as the next user message) and Claude Code's shape with extended thinking (one
line per content block: a signed thinking line, a text line, a tool_use line, each result
a line of its own). Hypothesis draws their sizes and details."""

from __future__ import annotations

from typing import Any

from conftest import make_message
from hypothesis import strategies as st

TASK = "Task: make `parse_config` in src/app/config.py accept a missing [server] table."
SHAPES = ("loop", "interactive", "text", "claude-code")


def _call(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": command}}


def _result(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": output}


def _thought(step: int, size: int) -> dict[str, Any]:
    text = f"Step {step}: looking at src/app/module_{step}.py next. " + "reasoning " * size
    return {"type": "text", "text": text}


def _thinking(step: int, size: int) -> dict[str, Any]:
    thought = f"The failure in case {step} points at module_{step}. " + "considering " * size
    return {"type": "thinking", "thinking": thought, "signature": f"EqQBCkYIBxgC{step:04d}sig=="}


def has_thinking(messages: list[dict[str, Any]]) -> bool:
    """Does any message hold a thinking block (the agent sends ``thinking`` with its
    requests)?"""
    return any(
        isinstance(m["content"], list)
        and any(b.get("type") in ("thinking", "redacted_thinking") for b in m["content"])
        for m in messages
    )


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


def claude_code(
    steps: int,
    size: int,
    *,
    parallel: frozenset[int] = frozenset(),
    blanks: frozenset[int] = frozenset(),
    running: bool = False,
) -> list[dict[str, Any]]:
    """Claude Code's transcript of a tool loop with extended thinking: each response is
    written one content block per line (a signed thinking line, a text line, one line per
    tool_use) and each tool_result is a user line of its own; steps in ``blanks`` have a
    whitespace-only user line between the thinking and the call (the API view drops it,
    so the turn stays one); with ``running`` the last call has no result yet."""
    messages = [make_message(0, "user", TASK)]

    def add(role: str, content: Any) -> None:
        messages.append(make_message(len(messages), role, content))

    for step in range(steps):
        ids = [f"call-{step}-{k}" for k in range(2 if step in parallel else 1)]
        add("assistant", [_thinking(step, size)])
        if step in blanks:
            add("user", "  \n")
        add("assistant", [_thought(step, size)])
        for ident in ids:
            add("assistant", [_call(ident, f"pytest -k case_{step}")])
        if running and step == steps - 1:
            break
        for ident in ids:
            add("user", [_result(ident, _output(step, size))])
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
    """A conversation of one of the four shapes, 20 to 300 messages."""
    shape = draw(st.sampled_from(SHAPES))
    steps = draw(st.integers(10, 60))
    size = draw(st.integers(5, 60))
    if shape == "text":
        return text_agent(steps, size)
    parallel = frozenset(draw(st.sets(st.integers(0, steps - 1), max_size=steps // 3)))
    if shape == "claude-code":
        blanks = frozenset(draw(st.sets(st.integers(0, steps - 1), max_size=4)))
        return claude_code(
            steps, size, parallel=parallel, blanks=blanks, running=draw(st.booleans())
        )
    interjections: frozenset[int] = frozenset()
    if shape == "interactive":
        interjections = frozenset(draw(st.sets(st.integers(0, steps - 1), max_size=4)))
    return tool_loop(
        steps, size, parallel=parallel, interjections=interjections, running=draw(st.booleans())
    )
