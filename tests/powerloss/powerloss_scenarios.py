"""The runs whose file-system ops the power-cut tests record (docs/design.md#power-cut).

Each scenario builds a workspace ``ws`` in an empty folder (everything there is then
durable), records one real run of memoryd's code on it, and notes which writes were
acknowledged: an append that returned, a job's receipt and events once the job returned,
HEARTBEAT.md once it was replaced durably.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from agent_shapes import tool_loop
from conftest import encode_lines, make_message
from crash_states import Model, materialize
from media_files import encoded, image_block, screenshot
from powerloss_checks import WORKSPACE, expectations
from powerloss_ops import Recording, Rename
from powerloss_record import Recorder, recording

from memoryd import cli
from memoryd.commit import rewrite as commit
from memoryd.commit.recovery import recover
from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings, load_settings
from memoryd.conversation.lines import append_message, split_lines
from memoryd.published.events import emit
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.published.state import build_state, write_state
from memoryd.receipts.records import append_receipt, build_receipt
from memoryd.search.archive_index import update_index
from memoryd.stores.disk import compact, write_entry
from memoryd.workspace import Workspace

CONVERSATION = f"{WORKSPACE}/conversation.jsonl"
EVENTS = f"{WORKSPACE}/.memoryd/events.jsonl"
RECEIPTS = f"{WORKSPACE}/.memoryd/receipts.jsonl"
HEARTBEAT = f"{WORKSPACE}/HEARTBEAT.md"


def is_index_file(path: str) -> bool:
    """The recall index's SQLite files: recorded as units, not op by op."""
    return path.rpartition("/")[2].startswith("index.sqlite")


def job_settings(config_home: Path, **overrides: object) -> Settings:
    """Default settings (``keep_first`` 1 included) with no drain wait and no background
    index thread: a record must not depend on thread timing."""
    flags = {"drain_seconds": 0, "index_archive": False, **overrides}
    return load_settings(overrides=flags, env={"XDG_CONFIG_HOME": str(config_home)}).settings


def message_line(index: int, size: int = 300) -> bytes:
    """One conversation line with id ``msg-<index>`` and ``size`` characters of content."""
    words = " ".join(f"w{index}-{n}" for n in range(size // 6 + 1))[:size]
    role = "user" if index % 2 == 0 else "assistant"
    message = {"id": f"msg-{index:04d}", "role": role, "content": words, "timestamp": index}
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _conversation(root: Path, settings: Settings, messages: int = 40) -> Workspace:
    """A workspace that one job has already compacted (a summary head and an archive),
    with more messages appended since."""
    ws = Workspace(root / WORKSPACE)
    ws.path.mkdir(parents=True)
    ws.conversation.write_bytes(b"".join(message_line(i) for i in range(messages)))
    run_job(JobRequest(ws.path, settings, force=True))
    with ws.conversation.open("ab") as file:
        file.write(b"".join(message_line(i) for i in range(messages, messages + 16)))
    return ws


class _InlineThread:
    """A thread that runs its target to the end when started: the drain after a commit
    then takes the same place in every record (one schedule the real thread may take)."""

    def __init__(self, target: Callable[..., object], args: tuple[object, ...], name: str) -> None:
        self.target, self.args, self.name = target, args, name

    def start(self) -> None:
        self.target(*self.args)


@contextmanager
def _job_acknowledged(rec: Recorder) -> Iterator[None]:
    """What a job wrote to its logs and HEARTBEAT.md is acknowledged once it returned.

    The job's drain runs inline (see :class:`_InlineThread`), so records repeat.
    """
    with ExitStack() as stack:
        for path in (EVENTS, RECEIPTS):
            stack.enter_context(rec.acknowledged(path))
        stack.enter_context(
            mock.patch.object(commit, "threading", SimpleNamespace(Thread=_InlineThread))
        )
        yield
    heartbeat = rec.root / HEARTBEAT
    rec.returned(HEARTBEAT, heartbeat.read_bytes(), replaced=True)


def commit_locked(root: Path, settings: Settings) -> Recording:
    """A job's commit while a writer that takes the lock appends before the lock is
    taken, then an append after it."""
    ws = _conversation(root, settings)
    with recording(root, is_index_file) as rec:

        def fault(step: str) -> None:
            if step in ("archive_written", "head_written"):
                with rec.acknowledged(CONVERSATION):
                    append_message(ws.path, "user", f"appended at {step}")

        with _job_acknowledged(rec):
            run_job(JobRequest(ws.path, settings, force=True), fault=fault)
        with rec.acknowledged(CONVERSATION):
            append_message(ws.path, "assistant", "appended after the commit")
    return rec.recording


def masking_commit(root: Path, settings: Settings) -> Recording:
    """A usage-triggered job whose masking of old tool outputs is enough (no summary),
    while a writer that takes the lock appends before the lock; then an append after it."""
    ws = Workspace(root / WORKSPACE)
    ws.path.mkdir(parents=True)
    data = encode_lines(tool_loop(24, 60))
    ws.conversation.write_bytes(data)
    tokens = sum(line.tokens for line in split_lines(data, 1 << 24))
    # Over the trigger; the agent's own words hold a third: masking alone gets below 0.75.
    masking = settings.masking.model_copy(update={"target": 0.75})
    over = settings.model_copy(update={"token_limit": int(tokens / 0.95), "masking": masking})
    with recording(root, is_index_file) as rec:

        def fault(step: str) -> None:
            if step in ("archive_written", "head_written"):
                with rec.acknowledged(CONVERSATION):
                    append_message(ws.path, "user", f"appended at {step}")

        with _job_acknowledged(rec):
            result = run_job(JobRequest(ws.path, over, reason="trigger"), fault=fault)
        assert result.masked_messages and not result.summarized_count, result.reason
        with rec.acknowledged(CONVERSATION):
            append_message(ws.path, "assistant", "appended after the commit")
    return rec.recording


def inputs_and_media() -> list[dict[str, object]]:
    """A session whose old calls wrote whole files (Write with a 3,000-character
    ``content``) and whose user pasted a screenshot every third step."""
    screen = image_block(encoded(screenshot(1382, 1090), "PNG"))
    row = "def handler(event):\n    return event.path\n"
    messages: list[dict[str, object]] = [make_message(0, "user", "Task: port the loader.")]
    for step in range(12):
        tool_input = {"file_path": f"src/m{step}.py", "content": (row * 80)[:3000]}
        call = {"type": "tool_use", "id": f"w{step}", "name": "Write", "input": tool_input}
        messages.append(make_message(len(messages), "assistant", [call]))
        done = {"type": "tool_result", "tool_use_id": f"w{step}", "content": "written"}
        messages.append(make_message(len(messages), "user", [done]))
        if step % 3 == 0:
            turn = [screen, {"type": "text", "text": f"after step {step}: see this"}]
            messages.append(make_message(len(messages), "user", turn))
            messages.append(make_message(len(messages), "assistant", "I see it."))
    return messages


def masking_inputs_commit(root: Path, settings: Settings) -> Recording:
    """A usage-triggered job whose masking of old tool inputs and pasted screenshots is
    enough, while a writer that takes the lock appends before the lock; then an append."""
    ws = Workspace(root / WORKSPACE)
    ws.path.mkdir(parents=True)
    data = encode_lines(inputs_and_media())
    ws.conversation.write_bytes(data)
    tokens = sum(line.tokens for line in split_lines(data, 1 << 24))
    masking = settings.masking.model_copy(update={"target": 0.75})
    over = settings.model_copy(update={"token_limit": int(tokens / 0.95), "masking": masking})
    with recording(root, is_index_file) as rec:

        def fault(step: str) -> None:
            if step in ("archive_written", "head_written"):
                with rec.acknowledged(CONVERSATION):
                    append_message(ws.path, "user", f"appended at {step}")

        with _job_acknowledged(rec):
            result = run_job(JobRequest(ws.path, over, reason="trigger"), fault=fault)
        masked = result.receipt.masked if result.receipt else None
        assert masked and masked.inputs and masked.media and not result.summarized_count
        with rec.acknowledged(CONVERSATION):
            append_message(ws.path, "assistant", "appended after the commit")
    return rec.recording


def commit_unlocked(root: Path, settings: Settings) -> Recording:
    """A job's commit while a writer that never locks (it fsyncs each line) appends: before
    the lock, under it (a line and half of the next), and into the replaced file after
    the rename (the rest of that line, one more); then a fresh writer after the commit."""
    ws = _conversation(root, settings)
    lines = [message_line(100 + n) for n in range(5)]
    with recording(root, is_index_file) as rec:
        writer: list[int] = []

        def write(data: bytes, acknowledged: bytes | None = None) -> None:
            os.write(writer[0], data)
            if acknowledged is not None:
                os.fsync(writer[0])
                rec.returned(CONVERSATION, acknowledged)

        def fault(step: str) -> None:
            if step == "head_written":
                writer.append(os.open(ws.conversation, os.O_WRONLY | os.O_APPEND))
                write(lines[0], lines[0])
            elif step == "locked":
                write(lines[1], lines[1])
                write(lines[2][:100])
            elif step == "renamed":
                write(lines[2][100:], lines[2])
                write(lines[3], lines[3])
                os.close(writer[0])

        with _job_acknowledged(rec):
            run_job(JobRequest(ws.path, settings, force=True), fault=fault)
        fresh = os.open(ws.conversation, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fresh, lines[4])
            os.fsync(fresh)
        finally:
            os.close(fresh)
        rec.returned(CONVERSATION, lines[4])
    return rec.recording


def append_command(root: Path, settings: Settings) -> Recording:
    """``memoryd append`` three times into a new workspace: the first one creates the
    conversation, ``.memoryd`` and the lock."""
    del settings
    ws = Workspace(root / WORKSPACE)
    ws.path.mkdir(parents=True)
    with recording(root, is_index_file) as rec:
        for n in range(3):
            with rec.acknowledged(CONVERSATION):
                argv = ["append", str(ws.path), "--role", "user", "--content", f"message {n}"]
                assert cli.main(argv, out=io.StringIO()) == 0
    return rec.recording


def memory_store(root: Path, settings: Settings) -> Recording:
    """Memory writes (the first into a new store) and a compaction of ``bookmarks``."""
    del settings
    ws = Workspace(root / WORKSPACE)
    ws.path.mkdir(parents=True)
    ws.conversation.write_bytes(message_line(0))
    for n in range(8):
        write_entry(ws.path, "bookmarks", {"task": f"task {n}", "status": "completed"}, now=n)
    store = f"{WORKSPACE}/memory/bookmarks.jsonl"
    with recording(root, is_index_file) as rec:
        with rec.acknowledged(f"{WORKSPACE}/memory/todos.jsonl"):
            write_entry(ws.path, "todos", {"title": "first todo", "done": True}, now=10)
        with rec.acknowledged(store):
            write_entry(ws.path, "bookmarks", {"task": "task 8"}, now=11)
        with rec.acknowledged(EVENTS):
            compact(ws.path, "bookmarks", threshold=3, keep_bookmarks=2, now=12, drain_seconds=0)
        with rec.acknowledged(store):
            write_entry(ws.path, "bookmarks", {"task": "task 9"}, now=13)
    return rec.recording


def receipts_and_events(root: Path, settings: Settings) -> Recording:
    """Events and receipts appended to a workspace that has neither file (nor .memoryd)."""
    ws = Workspace(root / WORKSPACE)
    ws.path.mkdir(parents=True)
    ws.conversation.write_bytes(message_line(0))
    with recording(root, is_index_file) as rec:
        for n in range(2):
            with rec.acknowledged(EVENTS):
                emit(ws, "threshold_changed", now=float(n), level="warning")
            receipt = build_receipt(
                job=f"job-{n}",
                strategy="narrative",
                started=float(n),
                finished=float(n) + 1,
                outcome="completed",
                reason="test",
                before=(10, 1000),
                after=(3, 300),
                prices=settings.prices,
            )
            with rec.acknowledged(RECEIPTS):
                append_receipt(ws, receipt)
    return rec.recording


def heartbeat_and_state(root: Path, settings: Settings) -> Recording:
    """HEARTBEAT.md's lifecycle (durable) and a reset and state.json (not fsynced)."""
    ws = Workspace(root / WORKSPACE)
    ws.path.mkdir(parents=True)
    ws.conversation.write_bytes(message_line(0))
    clock = iter(float(n) for n in range(100))
    manager = HeartbeatManager(ws, clock=lambda: next(clock))
    with recording(root, is_index_file) as rec:

        def durable(change: Callable[[], object]) -> None:
            change()
            rec.returned(HEARTBEAT, ws.heartbeat.read_bytes(), replaced=True)

        durable(lambda: manager.start_task("a task"))
        durable(manager.checkin)
        for n in (1, 2):
            state = build_state(
                ws,
                settings,
                messages=n,
                tokens=n * 100,
                summarizing=n == 1,
                last_summary_at=None,
                now=float(n),
            )
            write_state(ws, state)
        durable(lambda: manager.complete_task("done"))
        manager.reset(durable=False)
    return rec.recording


def recall_index(root: Path, settings: Settings) -> Recording:
    """A job's commit, then the index brought up to date with the new archive."""
    ws = _conversation(root, settings)
    update_index(ws.path)
    with recording(root, is_index_file) as rec:
        with _job_acknowledged(rec):
            run_job(JobRequest(ws.path, settings, force=True))
        update_index(ws.path)
        rec.unit()
    return rec.recording


def busy_workspace(root: Path, settings: Settings) -> Recording:
    """Three rounds of a busy workspace: appends through memoryd, lines from an agent that
    neither locks nor fsyncs (promised nothing, but never to be doubled or mangled),
    state.json and a non-durable HEARTBEAT.md reset, a memory write, and a job during
    whose commit lines arrive from all three kinds of writer (one of them, fsynced, into
    the replaced file after the rename); then a compaction of the memory store."""
    ws = _conversation(root, settings)
    for n in range(6):
        write_entry(ws.path, "bookmarks", {"task": f"task {n}", "status": "completed"}, now=n)
    heartbeat = HeartbeatManager(ws)
    # Longer than a sector: each of the agent's writes can be cut short by the power.
    agent_line = iter(message_line(200 + n, size=560) for n in range(100))
    with recording(root, is_index_file) as rec:

        def agent_append() -> None:
            fd = os.open(ws.conversation, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, next(agent_line))
            finally:
                os.close(fd)

        late: list[int] = []

        def fault(step: str) -> None:
            if step == "head_written":
                agent_append()
                with rec.acknowledged(CONVERSATION):
                    append_message(ws.path, "user", f"appended at {step}")
            elif step == "locked":  # a writer that never locks opens the file...
                late.append(os.open(ws.conversation, os.O_WRONLY | os.O_APPEND))
            elif step == "renamed":  # ...and writes after the rename, into the old inode
                agent_append()
                line = next(agent_line)
                os.write(late[-1], line)
                os.fsync(late[-1])
                rec.returned(CONVERSATION, line)
                os.write(late[-1], next(agent_line))  # and one more, never fsynced
                os.close(late[-1])

        for round_ in range(3):
            for n in range(2):
                with rec.acknowledged(CONVERSATION):
                    append_message(ws.path, "user", f"round {round_} message {n}")
                agent_append()
            state = build_state(
                ws,
                settings,
                messages=round_,
                tokens=round_,
                summarizing=False,
                last_summary_at=None,
                now=float(round_),
            )
            write_state(ws, state)
            heartbeat.reset(durable=False)
            with rec.acknowledged(f"{WORKSPACE}/memory/bookmarks.jsonl"):
                write_entry(ws.path, "bookmarks", {"task": f"round {round_}"}, now=10 + round_)
            with _job_acknowledged(rec):
                run_job(JobRequest(ws.path, settings, force=True), fault=fault)
        with rec.acknowledged(EVENTS):
            compact(ws.path, "bookmarks", threshold=3, keep_bookmarks=2, now=20, drain_seconds=0)
    return rec.recording


def recovery_after_a_cut(root: Path, settings: Settings) -> Recording:
    """Recovery's own writes. A power cut in :func:`commit_unlocked` left the rename on
    disk but not the archive's final name, and the drain mark holding lines past its
    offset; recovery finalises the archive and carries the lines."""
    first_root = root.with_name(f"{root.name}-commit")
    first_root.mkdir()
    try:
        first = commit_unlocked(first_root, settings)
    finally:
        shutil.rmtree(first_root)
    model = Model(first)
    cut = next(
        i
        for i, op in enumerate(first.ops)
        if isinstance(op, Rename) and op.dst.startswith(f"{WORKSPACE}/.memoryd/archive/")
    )
    state = model.build(model.least(cut))
    materialize(state, root)
    with recording(root, is_index_file) as rec:
        for home, lines in expectations(first).baseline.items():
            for line in lines:
                rec.acknowledged_before(f"{WORKSPACE}/{home}", line)
        for _, op in state.acknowledged:
            if not op.replaced:
                rec.acknowledged_before(op.path, op.data)
        recover(Workspace(root / WORKSPACE))
    return rec.recording


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named run to record; ``job``: the next commands include a job."""

    name: str
    record: Callable[[Path, Settings], Recording]


SCENARIOS = (
    Scenario("commit, locked writer", commit_locked),
    Scenario("commit, unlocked writer", commit_unlocked),
    Scenario("commit of a masking", masking_commit),
    Scenario("commit of a masking of inputs and media", masking_inputs_commit),
    Scenario("memoryd append", append_command),
    Scenario("memory store write and compaction", memory_store),
    Scenario("receipts and events", receipts_and_events),
    Scenario("HEARTBEAT.md and state.json", heartbeat_and_state),
    Scenario("recall index update", recall_index),
    Scenario("recovery after a power cut in a commit", recovery_after_a_cut),
    Scenario("a busy workspace", busy_workspace),
)
