"""Workspaces for the daemon's end-to-end tests: writing lines, reading what the daemon
wrote, waiting until a workspace has settled, and checking that no line was lost."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon_harness import (
    read_events,
    read_heartbeat,
    read_state,
    wait_until,
    workspace_lines,
    writer_ids,
)
from writers import line_bytes

TRIGGER = 0.80


def write_lines(workspace: Path, writer: str, count: int, start: int = 0) -> None:
    """Write ``count`` writers.py-style lines into a new conversation.jsonl."""
    workspace.mkdir(parents=True, exist_ok=True)
    data = b"".join(line_bytes(writer, n) for n in range(start, start + count))
    (workspace / "conversation.jsonl").write_bytes(data)


def append_lines(workspace: Path, writer: str, start: int, count: int) -> None:
    """Append lines ``start`` .. ``start + count - 1`` of ``writer`` to the conversation."""
    with (workspace / "conversation.jsonl").open("ab") as file:
        file.write(b"".join(line_bytes(writer, n) for n in range(start, start + count)))


def complete_lines(workspace: Path) -> int:
    return (workspace / "conversation.jsonl").read_bytes().count(b"\n")


def types(workspace: Path, *wanted: str) -> list[str]:
    return [e["type"] for e in read_events(workspace) if not wanted or e["type"] in wanted]


def state_is(workspace: Path, key: str, value: object) -> Callable[[], bool]:
    """A condition: state.json has ``key`` equal to ``value``."""
    return lambda: (read_state(workspace) or {}).get(key) == value


def event_seen(workspace: Path, type_: str) -> Callable[[], bool]:
    """A condition: events.jsonl holds an event of ``type_``."""
    return lambda: type_ in types(workspace)


def event_time(event: dict[str, Any]) -> float:
    moment = datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return moment.timestamp()


def settled(workspace: Path, token_limit: int, paired: bool = True) -> bool:
    """No job running or due: the numbers match the file and usage is below the trigger;
    with ``paired``, every summarize_started event has its completed or failed one."""
    state = read_state(workspace)
    if state is None or state["summarizing"]:
        return False
    if state["messages"] != complete_lines(workspace):
        return False
    if state["tokens"] > TRIGGER * token_limit:
        return False
    if read_heartbeat(workspace).get("status") in ("active", None):
        return False
    events = read_events(workspace)
    kinds = Counter(e["type"] for e in events)
    # A job's one outcome: completed, failed, or ineffective after its commit (with an
    # archive; an ineffective job that did nothing never started).
    committed_ineffective = sum(
        1 for e in events if e["type"] == "summarize_ineffective" and "archive" in e
    )
    ended = kinds["summarize_completed"] + kinds["summarize_failed"] + committed_ineffective
    return not paired or kinds["summarize_started"] == ended


def wait_settled(
    workspace: Path, token_limit: int, timeout: float = 30, paired: bool = True
) -> None:
    """Wait until :func:`settled` holds for half a second in a row."""
    since: list[float] = []

    def steady() -> bool:
        if not settled(workspace, token_limit, paired):
            since.clear()
            return False
        since.append(time.monotonic())
        return since[-1] - since[0] >= 0.5

    try:
        wait_until(steady, timeout, f"{workspace.name} to settle", interval=0.05)
    except AssertionError as exc:
        state = read_state(workspace)
        kinds = Counter(types(workspace))
        raise AssertionError(
            f"{exc}: state {state}, {complete_lines(workspace)} lines, events {dict(kinds)}, "
            f"heartbeat {read_heartbeat(workspace)}"
        ) from None


def assert_each_line_once(
    workspace: Path, expected: dict[str, int], ordered: bool
) -> tuple[list[bytes], list[bytes]]:
    """Every line writer W wrote (``expected[W]`` of them) is in the live file or the
    archive exactly once; with ``ordered``, in the order W wrote them within each (a
    pinned line, such as the task, stays live while later ones are archived)."""
    archived, live = workspace_lines(workspace)
    for line in archived + live:
        assert isinstance(json.loads(line), dict), f"not one JSON object: {line[:80]!r}"
    ids = list(writer_ids(archived + live))
    counts = Counter(ids)
    duplicated = {i: c for i, c in counts.items() if c > 1}
    assert not duplicated, f"duplicated lines: {sorted(duplicated)[:10]}"
    for writer, count in expected.items():
        wanted = [f"{writer}-{n}" for n in range(count)]
        missing = [i for i in wanted if i not in counts]
        assert not missing, f"lost lines of {writer}: {missing[:10]} ({len(missing)} in all)"
        if ordered:
            for part in (archived, live):
                mine = [
                    int(i.rsplit("-", 1)[1])
                    for i in writer_ids(part)
                    if i.rsplit("-", 1)[0] == writer
                ]
                assert mine == sorted(mine), f"{writer}'s lines are out of order"
    return archived, live


def stray_files(workspace: Path) -> list[str]:
    """memoryd temp files and pending archives anywhere in the workspace."""
    return sorted(
        str(p.relative_to(workspace))
        for p in workspace.rglob("*")
        if ".memoryd-tmp-" in p.name or p.name.endswith(".pending")
    )
