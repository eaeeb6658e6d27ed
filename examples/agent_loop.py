"""A minimal tool-calling agent whose conversation memoryd keeps within its budget.

Each turn it asks memoryd for the API view of its workspace (the conversation as a valid
Messages-API request: the summary as a user turn, memoryd's own fields left out), sends it
with the official SDK, appends the model's answer and the results of the tools it called
through memoryd's API (under the writers' lock), and goes again until the model stops
calling tools. The daemon, watching the workspace, compacts the file underneath whenever
it crosses its trigger; the agent never has to know.

    memoryd run --root ~/agents &                  # or the systemd user service
    python examples/agent_loop.py ~/agents/fix-bug "Make the test suite pass." --turns 50

Reads ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL, for any Anthropic-compatible server)
from the environment, as the SDK does.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic

import memoryd

TOOLS: list[dict[str, Any]] = [
    {
        "name": "bash",
        "description": "Run a shell command in the workspace and return its output.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command."}},
            "required": ["command"],
        },
    }
]
OUTPUT_LIMIT = 20_000
"""Characters of a tool's output kept in the conversation (the rest is cut, and said so)."""


def run_tool(name: str, tool_input: dict[str, Any], cwd: Path) -> tuple[str, bool]:
    """Run one tool call; returns its output and whether it failed."""
    if name != "bash" or not isinstance(tool_input.get("command"), str):
        return f"unknown tool or input: {name}", True
    try:
        done = subprocess.run(
            tool_input["command"],
            shell=True,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "the command timed out after 120 s", True
    output = (done.stdout + done.stderr) or "(no output)"
    if len(output) > OUTPUT_LIMIT:
        output = output[:OUTPUT_LIMIT] + f"\n[... {len(output) - OUTPUT_LIMIT} more characters]"
    return f"exit status {done.returncode}\n{output}", done.returncode != 0


def turn(client: anthropic.Anthropic, workspace: Path, model: str) -> bool:
    """One request and its tool calls; False once the model answered without a tool call."""
    reply = client.messages.create(
        model=model,
        max_tokens=4096,
        tools=TOOLS,  # type: ignore[arg-type]  # plain dicts in the documented shape
        messages=memoryd.messages_for_api(workspace),  # type: ignore[arg-type]
    )
    blocks = [block.model_dump(mode="json", exclude_none=True) for block in reply.content]
    if not blocks:
        blocks = [{"type": "text", "text": "(no answer)"}]
    memoryd.append_message(workspace, "assistant", blocks)
    calls = [block for block in reply.content if block.type == "tool_use"]
    if not calls:
        return False
    results = []
    for call in calls:
        output, failed = run_tool(call.name, dict(call.input), workspace)
        results.append(
            {"type": "tool_result", "tool_use_id": call.id, "content": output, "is_error": failed}
        )
    memoryd.append_message(workspace, "user", results)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace", type=Path, help="the agent's workspace folder")
    parser.add_argument("task", nargs="?", help="the task (only for a new conversation)")
    parser.add_argument("--turns", type=int, default=50, help="most requests to make")
    parser.add_argument("--model", default="claude-haiku-4-5")
    args = parser.parse_args(argv)
    workspace: Path = args.workspace
    workspace.mkdir(parents=True, exist_ok=True)
    if not (workspace / "conversation.jsonl").exists():
        if not args.task:
            parser.error("a new workspace needs a task")
        memoryd.append_message(workspace, "user", args.task)
    with anthropic.Anthropic() as client:
        for _ in range(args.turns):
            if not turn(client, workspace, args.model):
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
