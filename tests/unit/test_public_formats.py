"""tests/fakes/public_formats.py: public trajectory formats become conversation lines, with
facts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_transcripts import encode
from api_rules import request_problem
from public_formats import convert, facts, shape_of, task_phrase, transcripts

TASK = "Fix the crash in parse_header when the header is empty"


def _call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def _swe_agent_function_calling() -> str:
    history = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "A demonstration", "is_demo": True},
        {"role": "user", "content": f"Here is the issue:\n{TASK}."},
        {"role": "assistant", "content": "Look first.", "tool_calls": [_call("c1", "ls src")]},
        {"role": "tool", "content": "src/app/header.py", "tool_call_ids": ["c1"]},
        {"role": "assistant", "content": "", "tool_calls": [_call("c2", "pytest -x")]},
        {"role": "tool", "content": "ValueError at line 14", "tool_call_ids": ["c2"]},
        {"role": "assistant", "content": "Done."},
    ]
    return json.dumps({"history": history, "trajectory": [], "info": {}})


def _mini_text_mode() -> str:
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": f"Please solve this issue:\n{TASK}"},
        {"role": "assistant", "content": "THOUGHT: look.\n\n```bash\ncat src/app/header.py\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\ndef parse_header(raw):"},
        {"role": "assistant", "content": "THOUGHT: test.\n\n```bash\npython -m pytest\n```"},
        {"role": "user", "content": "<returncode>1</returncode>\nKeyError: 'name'"},
        {"role": "exit", "content": ""},
    ]
    return json.dumps({"messages": messages, "trajectory_format": "mini-swe-agent-1"})


def _openhands_events() -> str:
    def action(call_id: str, response: str, **args: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"function_name": "execute_bash", "tool_call_id": call_id}
        meta["model_response"] = {"id": response}
        return {"source": "agent", "action": "run", "args": args, "tool_call_metadata": meta}

    def observation(call_id: str, text: str) -> dict[str, Any]:
        meta = {"function_name": "execute_bash", "tool_call_id": call_id}
        return {
            "source": "agent",
            "observation": "run",
            "content": text,
            "tool_call_metadata": meta,
        }

    events = [
        {"source": "environment", "observation": "agent_state_changed", "content": ""},
        {"source": "user", "action": "message", "message": TASK, "args": {"content": TASK}},
        action("t1", "r1", command="ls", thought="Two looks at once."),
        action("t2", "r1", command="git status"),
        observation("t1", "README.md"),
        observation("t2", "clean"),
        {"source": "agent", "action": "message", "message": "All done.", "args": {}},
    ]
    return json.dumps(events)


def _claude_code_session() -> str:
    def line(kind: str, content: Any, message_id: str | None = None, **extra: Any) -> str:
        message: dict[str, Any] = {"role": kind, "content": content}
        if message_id is not None:
            message["id"] = message_id
        return json.dumps({"type": kind, "message": message, "isSidechain": False, **extra})

    read = {"type": "tool_use", "id": "u1", "name": "Read", "input": {"file_path": "a/b.py"}}
    grep = {"type": "tool_use", "id": "u2", "name": "Grep", "input": {"pattern": "x"}}
    lines = [
        json.dumps({"type": "file-history-snapshot", "snapshot": {}}),
        line("user", TASK),
        line("assistant", [{"type": "text", "text": "Reading `parse_header`."}], "m1"),
        line("assistant", [read], "m1"),
        line("assistant", [grep], "m1"),
        json.dumps({"type": "progress", "data": {}}),
        line("user", [{"type": "tool_result", "tool_use_id": "u1", "content": "1 x"}]),
        line("user", [{"type": "tool_result", "tool_use_id": "u2", "content": "a/b.py:1"}]),
        line("user", "Stop hook said: fine", isMeta=True),
        line("user", "Now also update the changelog"),
        line("assistant", [{"type": "text", "text": "Updated."}], "m2"),
    ]
    return "\n".join(lines) + "\n"


def test_swe_agent_function_calls_become_tool_use_and_results_with_their_ids() -> None:
    kind, messages = convert(_swe_agent_function_calling(), "t")
    assert kind == "swe-agent"
    assert [m["role"] for m in messages] == ["user"] + ["assistant", "user"] * 2 + ["assistant"]
    assert messages[0]["content"] == f"Here is the issue:\n{TASK}."
    first_call = messages[1]["content"]
    assert first_call[0] == {"type": "text", "text": "Look first."}
    assert first_call[1] == {
        "type": "tool_use",
        "id": "c1",
        "name": "bash",
        "input": {"command": "ls src"},
    }
    assert [b["type"] for b in messages[3]["content"]] == ["tool_use"]
    assert messages[4]["content"] == [
        {"type": "tool_result", "tool_use_id": "c2", "content": "ValueError at line 14"}
    ]
    assert [m["id"] for m in messages] == [f"t-{i:05d}" for i in range(6)]
    assert shape_of(messages) == "autonomous"


def test_a_text_mode_run_stays_text_turns_and_drops_system_and_exit() -> None:
    kind, messages = convert(_mini_text_mode(), "t")
    assert kind == "mini-swe-agent"
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert all(isinstance(m["content"], str) for m in messages)
    assert shape_of(messages) == "text"


def test_openhands_calls_of_one_response_share_an_assistant_message() -> None:
    kind, messages = convert(_openhands_events(), "t")
    assert kind == "openhands"
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    calls = messages[1]["content"]
    assert calls[0] == {"type": "text", "text": "Two looks at once."}
    assert [(b["id"], b["input"]) for b in calls[1:]] == [
        ("t1", {"command": "ls"}),
        ("t2", {"command": "git status"}),
    ]
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["t1", "t2"]


def test_claude_code_lines_of_one_message_are_joined_and_hooks_stay_meta() -> None:
    kind, messages = convert(_claude_code_session(), "t")
    assert kind == "claude-code"
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "user",
        "user",
        "user",
        "assistant",
    ]
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["u1", "u2"]
    assert messages[3]["isMeta"] is True
    assert shape_of(messages) == "interactive"


@pytest.mark.parametrize(
    "raw", [_swe_agent_function_calling(), _openhands_events(), _claude_code_session()]
)
def test_a_converted_conversation_is_a_valid_messages_api_request(raw: str) -> None:
    """Every tool_use is answered in the next user turn, roles alternate once merged."""
    _, messages = convert(raw, "t")
    merged: list[dict[str, Any]] = []
    for m in messages:
        blocks = (
            m["content"]
            if isinstance(m["content"], list)
            else [{"type": "text", "text": m["content"]}]
        )
        if merged and merged[-1]["role"] == m["role"]:
            merged[-1]["content"] += blocks
        else:
            merged.append({"role": m["role"], "content": list(blocks)})
    body = {"model": "claude-haiku-4-5", "max_tokens": 10, "messages": merged}
    assert request_problem(body) is None


def test_facts_name_each_kind_once_at_the_first_message_that_holds_it() -> None:
    _, messages = convert(_swe_agent_function_calling(), "t")
    found = {(f.kind, f.text): f.index for f in facts(messages)}
    assert found[("task", TASK + ".")] == 0
    assert found[("command", "ls src")] == 1
    assert found[("path", "src/app/header.py")] == 2
    assert found[("command", "pytest -x")] == 3
    assert found[("exception", "ValueError")] == 4
    assert found[("line", "line 14")] == 4
    _, text_mode = convert(_mini_text_mode(), "t")
    found = {(f.kind, f.text): f.index for f in facts(text_mode)}
    assert found[("command", "cat src/app/header.py")] == 1
    assert found[("identifier", "parse_header")] == 2
    assert found[("exception", "KeyError")] == 4


def test_the_task_phrase_skips_introductions_and_markup() -> None:
    message = {
        "role": "user",
        "content": "<pr>\nConsider the following PR:\n**Fix** it now, the parser breaks",
    }
    assert task_phrase(message) == "Fix it now, the parser breaks"


def test_the_running_variant_withholds_the_last_tool_output() -> None:
    _, messages = convert(_swe_agent_function_calling(), "t")
    done, running = transcripts(messages, "autonomous", 3)
    assert [m["id"] for m in done.messages] == [f"t-{i:05d}" for i in range(5)]
    assert running.messages == done.messages[:-1]
    assert running.pending == done.messages[-1]
    assert all(f.index < 4 for f in running.facts)
    assert done.lines[0] == encode(messages[0])


def test_a_file_in_no_known_format_is_refused() -> None:
    with pytest.raises(ValueError, match="not a trajectory format"):
        convert(json.dumps({"rows": []}), "t")
