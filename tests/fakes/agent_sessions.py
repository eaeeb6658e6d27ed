"""Session files of Claude Code, Codex CLI and Gemini CLI, built from their documented
formats in several versions, for the tests of ``memoryd.search.sessions`` (no third-party text).

Each builder writes one session below a home folder laid out as the agent lays it out and
returns the words it holds, by what they are (``text``, ``tool_input``, ``tool_output``,
``spilled``): every one must be found by recall.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CWD = "/home/dev/project-x"


def line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def write(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line(record) for record in records))
    return path


def _stamp(n: int) -> str:
    return f"2026-03-0{1 + n // 1000}T10:{(n // 60) % 60:02d}:{n % 60:02d}.000Z"


def tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry below ``root`` with its mode, mtime and bytes: what "unchanged" means."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(root))] = (st.st_mode, st.st_mtime_ns, data)
    return found


# --- Claude Code ------------------------------------------------------------------------


def claude_lines(session: str, words: dict[str, str], version: str = "2.0.14") -> list[Any]:
    """A Claude Code session: a question, an answer split over two lines (text, then a
    tool call sharing ``message.id``), the tool's output, and for 2.x the bookkeeping lines
    (snapshot, progress, queue operation, compaction)."""
    base = {
        "sessionId": session,
        "cwd": CWD,
        "version": version,
        "gitBranch": "main",
        "isSidechain": False,
        "userType": "external",
    }

    def entry(n: int, kind: str, message: Any, **extra: Any) -> dict[str, Any]:
        parent = f"{session[:8]}-u{n - 1}" if n else None
        return {
            **base,
            "parentUuid": parent,
            "type": kind,
            "message": message,
            "uuid": f"{session[:8]}-u{n}",
            "timestamp": _stamp(n),
            **extra,
        }

    records: list[Any] = []
    modern = not version.startswith("1.")
    if modern:
        records.append(
            {
                "type": "file-history-snapshot",
                "messageId": f"{session[:8]}-u0",
                "snapshot": {"trackedFileBackups": {}},
                "isSnapshotUpdate": False,
            }
        )
    else:
        records.append(
            {
                "type": "summary",
                "summary": "Earlier work on the parser",
                "leafUuid": f"{session[:8]}-old",
            }
        )
    user_content: Any = words["text"] if not modern else [{"type": "text", "text": words["text"]}]
    records.append(entry(0, "user", {"role": "user", "content": user_content}))
    reply = {
        "id": f"msg_{session[:6]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "stop_reason": None,
    }
    records.append(
        entry(
            1,
            "assistant",
            {**reply, "content": [{"type": "text", "text": "Let me look at that."}]},
            requestId="req_1",
        )
    )
    tool_id = f"toolu_{session[:8]}"
    records.append(
        entry(
            2,
            "assistant",
            {
                **reply,
                "content": [
                    {
                        "type": "tool_use",
                        "id": tool_id,
                        "name": "Bash",
                        "input": {"command": words["tool_input"], "description": "run it"},
                    }
                ],
            },
        )
    )
    if modern:
        records.append(
            {
                "type": "progress",
                "uuid": f"{session[:8]}-p",
                "sessionId": session,
                "data": {"type": "bash_progress", "output": "..."},
                "timestamp": _stamp(3),
            }
        )
    result_content: Any = (
        words["tool_output"] if not modern else [{"type": "text", "text": words["tool_output"]}]
    )
    records.append(
        entry(
            4,
            "user",
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool_id,
                        "content": result_content,
                        "is_error": False,
                    }
                ],
            },
            toolUseResult={"stdout": words["tool_output"], "stderr": ""},
        )
    )
    if modern:
        records.append(
            {
                "type": "queue-operation",
                "operation": "enqueue",
                "sessionId": session,
                "timestamp": _stamp(5),
                "content": "later",
            }
        )
        records.append(
            {
                **base,
                "type": "system",
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "uuid": f"{session[:8]}-u6",
                "timestamp": _stamp(6),
                "compactMetadata": {"trigger": "auto"},
            }
        )
        records.append(
            entry(
                7,
                "user",
                {"role": "user", "content": "Summary: " + words["text"]},
                isCompactSummary=True,
            )
        )
    return records


def claude_session(
    home: Path, session: str, words: dict[str, str], version: str = "2.0.14"
) -> Path:
    """Write a session (and, when ``words`` has ``spilled``, its spilled tool output and a
    subagent's file) under ``home/projects/<project>/``."""
    project = home / "projects" / CWD.replace("/", "-")
    path = write(project / f"{session}.jsonl", claude_lines(session, words, version))
    if "spilled" in words:
        spill = project / session / "tool-results" / f"toolu_{session[:8]}-big.txt"
        spill.parent.mkdir(parents=True, exist_ok=True)
        spill.write_text(("filler line\n" * 50) + words["spilled"] + "\n")
        agent = project / session / "subagents" / "agent-a1b2c3.jsonl"
        write(agent, claude_lines(session, {k: f"sub{v}" for k, v in words.items()}, version)[1:3])
    return path


# --- Codex CLI --------------------------------------------------------------------------


def codex_items(
    words: dict[str, str], output_shape: str = "string", tag: str = ""
) -> list[dict[str, Any]]:
    output: Any = words["tool_output"]
    if output_shape == "object":
        output = {"content": words["tool_output"], "success": True}
    return [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "<environment_context>cwd</environment_context>"}
            ],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": words["text"]}],
        },
        {
            "type": "reasoning",
            "id": "rs_1" + tag,
            "summary": [{"type": "summary_text", "text": "**Planning**"}],
            "content": None,
            "encrypted_content": "gAAAAB" + "x" * 40,
        },
        {
            "type": "function_call",
            "id": "fc_1" + tag,
            "name": "shell",
            "call_id": "call_1" + tag,
            "arguments": json.dumps(
                {"command": ["bash", "-lc", words["tool_input"]], "timeout_ms": 1000}
            ),
        },
        {"type": "function_call_output", "call_id": "call_1" + tag, "output": output},
        {
            "type": "message",
            "id": "msg_2" + tag,
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done, all good."}],
        },
    ]


def codex_session(home: Path, session: str, words: dict[str, str], version: str = "0.46.0") -> Path:
    """A rollout in the layout of ``version``: ``0.1`` bare items after a bare meta line,
    ``0.2`` wrapped lines with tool output as an object, later wrapped with a string."""
    name = f"rollout-2026-03-01T10-00-00-{session}.jsonl"
    path = home / "sessions" / "2026" / "03" / "01" / name
    if version.startswith("0.1."):
        items = codex_items(words, tag=session[:8])
        records: list[Any] = [
            {
                "id": session,
                "timestamp": "2026-03-01T10:00:00.000Z",
                "instructions": None,
                "git": {"branch": "main"},
            }
        ]
        for item in items:
            records += [item, {"record_type": "state"}]
        return write(path, records)
    shape = "object" if version.startswith("0.2") else "string"
    stamp = "2026-03-01T10:00:00.000Z"
    records = [
        {
            "timestamp": stamp,
            "type": "session_meta",
            "payload": {
                "id": session,
                "timestamp": stamp,
                "cwd": CWD,
                "originator": "codex_cli_rs",
                "cli_version": version,
                "instructions": None,
                "git": {"branch": "main"},
            },
        }
    ]
    records.append(
        {
            "timestamp": stamp,
            "type": "turn_context",
            "payload": {"cwd": CWD, "approval_policy": "on-request", "model": "gpt-5-codex"},
        }
    )
    for item in codex_items(words, shape, session[:8]):
        records.append({"timestamp": stamp, "type": "response_item", "payload": item})
        if item.get("role") == "user":
            records.append(
                {
                    "timestamp": stamp,
                    "type": "event_msg",
                    "payload": {
                        "type": "user_message",
                        "message": item["content"][0]["text"],
                        "kind": "plain",
                    },
                }
            )
    records.append(
        {
            "timestamp": stamp,
            "type": "response_item",
            "payload": {
                "type": "custom_tool_call",
                "call_id": "call_2" + session[:8],
                "name": "apply_patch",
                "input": "*** Begin Patch\n*** End Patch\n",
                "status": "completed",
            },
        }
    )
    records.append(
        {"timestamp": stamp, "type": "event_msg", "payload": {"type": "token_count", "info": None}}
    )
    if not version.startswith("0.2"):
        records.append(
            {
                "timestamp": stamp,
                "type": "compacted",
                "payload": {"message": "Compacted: worked on " + words["text"]},
            }
        )
    return write(path, records)


# --- Gemini CLI -------------------------------------------------------------------------


def gemini_messages(words: dict[str, str], prefix: str = "") -> list[dict[str, Any]]:
    return [
        {
            "id": prefix + "m1",
            "timestamp": "2026-03-01T10:00:00.000Z",
            "type": "user",
            "content": [{"text": words["text"]}],
        },
        {
            "id": prefix + "m2",
            "timestamp": "2026-03-01T10:00:01.000Z",
            "type": "gemini",
            "content": [{"text": "Running the command."}],
            "thoughts": [
                {
                    "subject": "Plan",
                    "description": "Check the tree",
                    "timestamp": "2026-03-01T10:00:01.000Z",
                }
            ],
            "toolCalls": [
                {
                    "id": "run_shell_command-1",
                    "name": "run_shell_command",
                    "args": {"command": words["tool_input"]},
                    "result": [
                        {
                            "functionResponse": {
                                "id": "run_shell_command-1",
                                "name": "run_shell_command",
                                "response": {"output": words["tool_output"]},
                            }
                        }
                    ],
                    "status": "success",
                    "timestamp": "2026-03-01T10:00:02.000Z",
                    "resultDisplay": "ok",
                }
            ],
            "tokens": {"input": 10, "output": 5, "cached": 0, "total": 15},
            "model": "gemini-2.5-pro",
        },
    ]


def gemini_session(home: Path, session: str, words: dict[str, str], version: str = "jsonl") -> Path:
    """A chat in ``~/.gemini/tmp/<project>/chats/``: ``json`` writes the whole document
    (earlier versions), ``jsonl`` the records, with an update of m2 re-appended (last
    wins), a rewound message and a metadata ``$set``."""
    chats = home / "tmp" / "a3f9c0ffee" / "chats"
    meta = {
        "sessionId": session,
        "projectHash": "a3f9c0ffee",
        "startTime": "2026-03-01T10:00:00.000Z",
        "lastUpdated": "2026-03-01T10:05:00.000Z",
    }
    prefix = "" if session.startswith("eeee") else session[:8]
    messages = gemini_messages(words, prefix)
    if version == "json":
        path = chats / f"session-2026-03-01T10-00-{session[:8]}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**meta, "messages": messages}, indent=2))
        return path
    first = dict(messages[1], content=[{"text": "Draft answer that was replaced"}], toolCalls=[])
    rewound = {
        "id": prefix + "m3",
        "timestamp": "2026-03-01T10:00:03.000Z",
        "type": "user",
        "content": [{"text": "a rewound question about zeppelins"}],
    }
    records: list[Any] = [
        {**meta, "kind": "main", "directories": [CWD]},
        messages[0],
        first,
        messages[1],
        rewound,
        {"$rewindTo": prefix + "m3"},
        {"$set": {"lastUpdated": "2026-03-01T10:06:00.000Z", "summary": "s"}},
    ]
    return write(chats / f"session-2026-03-01T10-00-{session[:8]}.jsonl", records)


def words_for(tag: str) -> dict[str, str]:
    """Distinct searchable words for one session."""
    return {
        "text": f"question{tag} about the flaky importer",
        "tool_input": f"grep -rn inputword{tag} src/",
        "tool_output": f"src/app.py:12: outputword{tag} = load()",
        "spilled": f"spilledword{tag} at the end of a long output",
    }
