"""A minimal tool-calling agent whose conversation memoryd keeps within its budget.

Each turn it asks memoryd for the API view of its workspace (the conversation as a valid
Messages-API request: the summary as a user turn, memoryd's own fields left out), sends it
with the official SDK, appends the model's answer and the results of the tools it called
through memoryd's API (under the writers' lock), and goes again until the model stops
calling tools. The daemon, watching the workspace, compacts the file underneath whenever
it crosses its trigger; the agent never has to know.

    memoryd run --root ~/agents &                  # or the systemd user service
    python examples/agent_loop.py ~/agents/fix-bug "Make the test suite pass." --turns 50
    python examples/agent_loop.py ~/agents/try-it "Count the files." --offline --turns 20 \
        --token-limit 4000

``--token-limit`` gives a new workspace its own budget (``.memoryd/config.toml``, which the
daemon reads): the scripted model's 20 turns come to ~12,000 tokens, a few times a
4,000-token budget, so the run shows the daemon compacting; the daemon's default budget
(100,000 tokens) takes a long real session to cross.

Reads ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL, for any Anthropic-compatible server)
from the environment, as the SDK does. With --offline no key and no network are needed: a
scripted model answers each request with a shell command to run, after checking the
request as the API would (the first turn the user's, roles alternating, every tool_result
right after its tool_use), so the whole loop runs on any machine while the daemon
compacts the workspace underneath.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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


class RequestRefused(Exception):
    """The scripted model found a request the Messages API would refuse."""


def check_request(messages: list[dict[str, Any]]) -> None:
    """Refuse what the Messages API refuses in a tool loop: no first user turn, two turns of
    one role in a row, a tool_result not right after its tool_use, a tool_use whose result
    is missing from the next turn, fields other than role and content."""
    if not messages or messages[0]["role"] != "user":
        raise RequestRefused("the first message must be the user's")
    for index, message in enumerate(messages):
        if set(message) != {"role", "content"}:
            raise RequestRefused(f"messages.{index}: fields {sorted(message)}")
        if index and message["role"] == messages[index - 1]["role"]:
            raise RequestRefused(f"messages.{index}: two {message['role']} turns in a row")
        calls = tool_ids(message, "tool_use", "id")
        following = messages[index + 1] if index + 1 < len(messages) else None
        if following is not None and not set(calls) <= set(tool_ids(following, "tool_result")):
            raise RequestRefused(f"messages.{index}: tool_use without its tool_result next")
        results = tool_ids(message, "tool_result")
        before = tool_ids(messages[index - 1], "tool_use", "id") if index else []
        if not set(results) <= set(before):
            raise RequestRefused(f"messages.{index}: tool_result without its tool_use before")


def tool_ids(message: dict[str, Any], kind: str, field: str = "tool_use_id") -> list[str]:
    content = message["content"]
    blocks = content if isinstance(content, list) else []
    return [block[field] for block in blocks if block.get("type") == kind]


class ScriptedMessages:
    """Stands in for ``client.messages`` with --offline: checks each request, then asks for
    the next command of a fixed script, some of whose output is long, so that the
    conversation grows the way a real agent's does."""

    SCRIPT = ("ls -la", "echo step {step}; seq 1 1500", "wc -c conversation.jsonl", "date -u")

    def __init__(self, latency: float = 0.0) -> None:
        self.requests = 0
        self.latency = latency
        # Tool ids are unique, as the API's are: a second run on the same workspace must
        # not reuse the first run's.
        self.run_tag = os.urandom(4).hex()

    def create(self, *, messages: list[dict[str, Any]], **_: Any) -> SimpleNamespace:
        check_request(messages)
        time.sleep(self.latency)  # a model takes a moment: the daemon compacts meanwhile
        self.requests += 1
        command = self.SCRIPT[self.requests % len(self.SCRIPT)].format(step=self.requests)
        return SimpleNamespace(
            content=[
                Block(type="text", text=f"Step {self.requests}: running `{command}`."),
                Block(
                    type="tool_use",
                    id=f"toolu_{self.run_tag}{self.requests:06d}",
                    name="bash",
                    input={"command": command},
                ),
            ]
        )


class Block(SimpleNamespace):
    """A content block as the SDK returns one: attributes, and ``model_dump``."""

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(vars(self))


class ScriptedClient:
    """The scripted model, shaped like ``anthropic.Anthropic`` as far as ``turn`` uses it."""

    def __init__(self, latency: float = 0.0) -> None:
        self.messages = ScriptedMessages(latency)

    def __enter__(self) -> ScriptedClient:
        return self

    def __exit__(self, *_: object) -> None:
        return None


def turn(client: Any, workspace: Path, model: str) -> bool:
    """One request and its tool calls; False once the model answered without a tool call.
    ``client`` is an ``anthropic.Anthropic`` or, offline, a ``ScriptedClient``."""
    reply = client.messages.create(
        model=model,
        max_tokens=4096,
        tools=TOOLS,
        messages=memoryd.messages_for_api(workspace),
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
    parser.add_argument(
        "--offline", action="store_true", help="a scripted model: no API key, no network"
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=0.3,
        help="seconds the scripted model takes to answer (--offline; default 0.3)",
    )
    parser.add_argument(
        "--token-limit",
        type=int,
        help="a new workspace's budget in tokens (its .memoryd/config.toml); else the daemon's",
    )
    args = parser.parse_args(argv)
    workspace: Path = args.workspace
    if not args.offline and not os.environ.get("ANTHROPIC_API_KEY"):
        parser.error("set ANTHROPIC_API_KEY, or pass --offline for a scripted model")
    if args.token_limit is not None and args.token_limit < 1:
        parser.error("--token-limit must be 1 or more")
    workspace.mkdir(parents=True, exist_ok=True)
    if not (workspace / "conversation.jsonl").exists():
        if not args.task:
            parser.error("a new workspace needs a task")
        if args.token_limit is not None:
            # Before the first message: the daemon reads it when it finds the workspace.
            config = workspace / ".memoryd" / "config.toml"
            config.parent.mkdir(exist_ok=True)
            config.write_text(f"token_limit = {args.token_limit}\n")
            print(f"agent_loop: a budget of {args.token_limit:,} tokens ({config})")
        memoryd.append_message(workspace, "user", args.task)
    if args.offline:
        client: Any = ScriptedClient(max(0.0, args.latency))
    else:
        import anthropic  # only with a key: the offline mode needs no SDK

        client = anthropic.Anthropic()
    done = 0
    with client:
        for _ in range(args.turns):
            try:
                going = turn(client, workspace, args.model)
            except RequestRefused as refused:
                print(f"agent_loop: the request was refused: {refused}", file=sys.stderr)
                return 1
            done += 1
            if not going:
                break
    view = memoryd.messages_for_api(workspace)
    archive = workspace / ".memoryd" / "archive"
    jobs = len(list(archive.glob("*.jsonl"))) if archive.is_dir() else 0  # one per compaction
    print(
        f"agent_loop: {done} turns; the API view now holds {len(view)} messages; the daemon "
        f"compacted the conversation {jobs} times so far (memoryd history {workspace})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
