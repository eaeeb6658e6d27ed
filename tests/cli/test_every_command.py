"""Every command against a hostile workspace: read-only, on a full disk, with a symlinked
``.memoryd``, with FIFOs where its files belong, with deeply nested and non-finite JSON
in them. No traceback ever, and no wait on a FIFO; a command that fails says so in one
line with exit 1 or 2; nothing is written outside the workspace; a failed command leaves
the conversation as it was.

Table-driven: a new command is one line in ``ONE_SHOT``. Each one-shot command runs
through ``memoryd.cli.main`` in this process, on a scene built once and rebuilt only when a
command changed it; one command per scene runs as a real ``python -m memoryd`` process, and
must give what main() gives in process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from conftest import encode_lines, generated_messages
from daemon_harness import Processes, clean_env, wait_until
from fs_helpers import fill_up, make_read_only, small_tmpfs, tree
from in_process import Ran, run_in_process
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent

from memoryd.demo import prepare_demo

SMALL_BUDGET = {"MEMORYD_TOKEN_LIMIT": "4000", "MEMORYD_SUMMARIZER__BACKEND": "extractive"}
BIG_ENTRY = json.dumps({"t": "y" * 10_000})


@dataclass(frozen=True, slots=True)
class OneShot:
    """A command line (``{ws}``: the workspace, ``{root}``: the folder holding it)."""

    argv: tuple[str, ...]
    writes: bool
    """It must write in the workspace to do its job (so it must fail where it cannot)."""


ONE_SHOT: dict[str, OneShot] = {
    "summarize": OneShot(("summarize", "{ws}"), writes=True),
    "summarize --dry-run": OneShot(("summarize", "--dry-run", "{ws}"), writes=False),
    "status": OneShot(("status", "{ws}"), writes=False),
    "status (root)": OneShot(("status", "--json", "{root}"), writes=False),
    # 10 KB: more than the slack of a file's last page, so a full disk cannot take it.
    "append": OneShot(("append", "{ws}", "--role", "user", "--content", "x" * 10_000), True),
    "heartbeat show": OneShot(("heartbeat", "{ws}", "show"), writes=False),
    "heartbeat start": OneShot(("heartbeat", "{ws}", "start", "a task"), writes=True),
    "heartbeat checkin": OneShot(("heartbeat", "{ws}", "checkin"), writes=True),
    "heartbeat complete": OneShot(("heartbeat", "{ws}", "complete", "--result", "ok"), True),
    "heartbeat fail": OneShot(("heartbeat", "{ws}", "fail", "broken"), writes=True),
    "heartbeat pause": OneShot(("heartbeat", "{ws}", "pause", "--notes", "later"), True),
    "heartbeat reset": OneShot(("heartbeat", "{ws}", "reset"), writes=True),
    "memory write": OneShot(
        ("memory", "write", "--workspace", "{ws}", "--store", "todos", "--entry", BIG_ENTRY),
        writes=True,
    ),
    "memory read": OneShot(("memory", "read", "--workspace", "{ws}", "--store", "todos"), False),
    "memory compact": OneShot(
        ("memory", "compact", "--workspace", "{ws}", "--store", "bookmarks", "--threshold", "1"),
        writes=True,
    ),
    "config": OneShot(("config",), writes=False),
    "recall": OneShot(("recall", "{ws}", "alpha"), writes=False),
    "expand": OneShot(("expand", "{ws}", "msg-0001"), writes=False),
    "messages": OneShot(("messages", "{ws}"), writes=False),
    "history": OneShot(("history", "{ws}"), writes=False),
}


@dataclass(slots=True)
class Scene:
    """A workspace in a hostile state, and what must not change."""

    root: Path
    ws: Path
    outside: Path
    """A folder outside the workspace that nothing may write to."""
    kind: str

    def argv(self, template: tuple[str, ...]) -> list[str]:
        return [a.replace("{ws}", str(self.ws)).replace("{root}", str(self.root)) for a in template]


def _populate(ws: Path) -> None:
    """A busy workspace with every file memoryd keeps: .memoryd, a heartbeat, stores, an
    archive (one summarize), so each command has something to read and to change."""
    ws.mkdir(parents=True)
    (ws / "conversation.jsonl").write_bytes(encode_lines(generated_messages(40, 520)))
    assert run_in_process(["summarize", str(ws)], ws, SMALL_BUDGET).returncode == 0
    with (ws / "conversation.jsonl").open("ab") as conversation:
        conversation.write(encode_lines(generated_messages(40, 520)))
    assert run_in_process(["heartbeat", str(ws), "start", "seeded"], ws).returncode == 0
    memory = ws / "memory"
    memory.mkdir(exist_ok=True)
    bookmarks = [{"task": f"t{i}", "timestamp": "2026-01-01T00:00:00Z"} for i in range(30)]
    (memory / "bookmarks.jsonl").write_bytes(encode_lines(bookmarks))
    (memory / "todos.jsonl").write_bytes(encode_lines([{"t": 0}]))


FIFOS = (
    "HEARTBEAT.md",
    ".memoryd/state.json",
    ".memoryd/events.jsonl",
    ".memoryd/receipts.jsonl",
    ".memoryd/monitors/agent.json",
    "checkpoint.json",
    "memory/todos.jsonl",
)
"""Where the FIFO scene puts a FIFO (no writer ever comes): every file a command reads."""
DEEP = b"[" * 100_000
NESTED_EVENT = b'{"type":"salvaged_lines","lines":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
NOT_FINITE = b'{"job":"x","cost_usd":Infinity,"tokens_before":1e400,"before":NaN}'
SCENES = ("read-only", "full disk", "symlinked .memoryd", "FIFOs", "deep JSON")


def _make_fifos(ws: Path) -> None:
    for name in FIFOS:
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.mkfifo(path)


def _nest_json(ws: Path) -> None:
    """Deeply nested and non-finite JSON in every JSON file a command reads; a deep line
    and a NaN line in the conversation and a store (malformed lines, kept as they are)."""
    meta = ws / ".memoryd"
    for name in ("state.json", "monitors/agent.json"):
        (meta / name).parent.mkdir(parents=True, exist_ok=True)
        (meta / name).write_bytes(DEEP)
    (ws / "checkpoint.json").write_bytes(DEEP)
    for path, extra in (
        (meta / "events.jsonl", (NESTED_EVENT, NOT_FINITE, DEEP)),
        (meta / "receipts.jsonl", (DEEP, NOT_FINITE, NESTED_EVENT)),
        (ws / "memory" / "todos.jsonl", (DEEP, NOT_FINITE)),
        (ws / "conversation.jsonl", (DEEP, b'{"role":"user","content":NaN}')),
    ):
        with path.open("ab") as file:
            file.write(b"".join(line + b"\n" for line in extra))


def build_scene(kind: str, base: Path, stack: ExitStack) -> Scene:
    """(a) a read-only file system, (b) a full 2 MB tmpfs, (c) ``.memoryd`` a symlink to a
    folder elsewhere (which then holds what .memoryd held), (d) FIFOs with no writer at
    every file a command reads, (e) deeply nested, NaN and 1e400 JSON in them; in ``base``
    (a tmpfs is unmounted when ``stack`` closes)."""
    outside = base / "outside"
    outside.mkdir()
    (outside / "state.json").write_text("VICTIM\n")
    if kind in ("FIFOs", "deep JSON"):
        root = base / "r"
        _populate(root / "ws")
        (_make_fifos if kind == "FIFOs" else _nest_json)(root / "ws")
        return Scene(root, root / "ws", outside, kind)
    if kind == "symlinked .memoryd":
        root = base / "r"
        ws = root / "ws"
        _populate(ws)
        meta = ws / ".memoryd"
        for entry in meta.iterdir():
            entry.rename(outside / entry.name)
        meta.rmdir()
        meta.symlink_to(outside)
        return Scene(root, ws, outside, kind)
    mnt = stack.enter_context(small_tmpfs(base / "mnt", "2m"))
    root = mnt / "r"
    _populate(root / "ws")
    (mnt / "spare").mkdir()
    if kind == "read-only":
        make_read_only(mnt)
    else:
        fill_up(mnt)
    return Scene(root, root / "ws", outside, kind)


@pytest.fixture(params=SCENES)
def scene(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Scene]:
    """A fresh scene of each kind (see :func:`build_scene`) for one test."""
    with ExitStack() as stack:
        yield build_scene(str(request.param), tmp_path, stack)


class Stage:
    """A scene of one kind, built once for many commands: :meth:`fresh` hands it out as
    built, building it again (in a new folder) only when the last command changed it."""

    def __init__(self, kind: str, factory: pytest.TempPathFactory) -> None:
        self.kind = kind
        self.factory = factory
        self.stack = ExitStack()
        self.builds = 0
        self.scene = self._build()

    def _build(self) -> Scene:
        self.stack.close()
        self.builds += 1
        scene = build_scene(self.kind, self.factory.mktemp("scene"), self.stack)
        self.built = (tree(scene.ws), tree(scene.outside))
        return scene

    def fresh(self) -> Scene:
        """The scene exactly as built: every entry and every byte below the workspace and
        the outside folder compared with the build's."""
        if (tree(self.scene.ws), tree(self.scene.outside)) != self.built:
            self.scene = self._build()
        return self.scene

    def close(self) -> None:
        self.stack.close()


@pytest.fixture(scope="class", params=SCENES)
def stage(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    """One :class:`Stage` per kind of scene, for every command of the class."""
    built = Stage(str(request.param), tmp_path_factory)
    try:
        yield built
    finally:
        built.close()


def memoryd(*argv: str, cwd: Path | None = None) -> Ran:
    """``python -m memoryd ARGV``: the real entry point, a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **SMALL_BUDGET},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def _log_lines(stderr: str) -> list[str]:
    """The JSON log lines among stderr's lines (warnings a command may log on its way)."""
    found = []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" in record:
            found.append(line)
    return found


def _problems(stderr: str) -> list[str]:
    """The lines of stderr that are not JSON log lines: what the command said is wrong."""
    logged = _log_lines(stderr)
    return [line for line in stderr.splitlines() if line not in logged]


def check_one_shot(scene: Scene, command: str, run: Callable[[list[str], Path], Ran]) -> Ran:
    """Run ``command`` (a key of ``ONE_SHOT``) in ``scene`` with ``run`` and check it: no
    traceback; exit 0, or exit 1/2 with one line (a command that must write where it
    cannot has to fail); nothing outside the workspace changes; a failed command leaves
    the conversation as it was, and one that only reads leaves the whole workspace so."""
    spec = ONE_SHOT[command]
    outside_before = tree(scene.outside)
    workspace_before = tree(scene.ws)
    conversation_before = (scene.ws / "conversation.jsonl").read_bytes()

    result = run(scene.argv(spec.argv), scene.ws)

    assert "Traceback" not in result.stderr, result.stderr
    assert tree(scene.outside) == outside_before
    if spec.writes and scene.kind in ("read-only", "full disk", "symlinked .memoryd"):
        assert result.returncode in (1, 2), (result.returncode, result.stdout, result.stderr)
    if result.returncode != 0:
        assert result.returncode in (1, 2), result.stderr
        problems = _problems(result.stderr)
        assert len(problems) == 1 and problems[0].startswith("memoryd: "), result.stderr
        assert (scene.ws / "conversation.jsonl").read_bytes() == conversation_before
        if not spec.writes:
            assert tree(scene.ws) == workspace_before
    if spec.writes and (scene.ws / ".memoryd").is_symlink():
        # The symlinked .memoryd: refused as such, in words.
        assert "symlink" in result.stderr
    if scene.kind == "FIFOs" and result.returncode != 0:
        assert "is not a regular file" in result.stderr, result.stderr
    return result


def _here(argv: list[str], cwd: Path) -> Ran:
    return run_in_process(argv, cwd, SMALL_BUDGET)


def _as_process(argv: list[str], cwd: Path) -> Ran:
    return memoryd(*argv, cwd=cwd)


class TestOneShotCommands:
    """Every one-shot command in every scene, through main() in this process."""

    @pytest.mark.parametrize("command", sorted(ONE_SHOT))
    def test_one_shot_command_in_a_hostile_workspace(self, stage: Stage, command: str) -> None:
        """See :func:`check_one_shot`; the command finds the scene exactly as built."""
        check_one_shot(stage.fresh(), command, _here)

    @pytest.mark.slow
    def test_the_command_as_a_process_in_a_hostile_workspace(self, stage: Stage) -> None:
        """``python -m memoryd summarize`` as a process of its own passes the same checks,
        with the exit code and the one line of main() in process: what the in-process runs
        prove holds for the installed command."""
        process = check_one_shot(stage.fresh(), "summarize", _as_process)
        process_root = str(stage.scene.root)
        here = check_one_shot(stage.fresh(), "summarize", _here)
        here_root = str(stage.scene.root)
        assert here.returncode == process.returncode, (here, process)
        said = [line.replace(process_root, "ROOT") for line in _problems(process.stderr)]
        assert [line.replace(here_root, "ROOT") for line in _problems(here.stderr)] == said


# ----- the long-running commands: run, demo, mcp --------------------------------------------


def _naming(lines: list[str], folder: Path) -> list[str]:
    """The log lines that name ``folder`` (a workspace) at warning level or above."""
    found = []
    for line in _log_lines("\n".join(lines)):
        record = json.loads(line)
        if str(folder) in line and record.get("level") in ("warning", "error", "critical"):
            found.append(line)
    return found


@pytest.mark.slow
def test_run_carries_on_past_a_hostile_workspace(
    scene: Scene, procs: Processes, tmp_path: Path
) -> None:
    """The daemon stays up, summarizes the healthy workspace, says a few words (not a
    flood) about the hostile one, writes nothing outside, and exits 0 on SIGTERM."""
    healthy = tmp_path / "healthy" / "ok"
    healthy.mkdir(parents=True)
    (healthy / "conversation.jsonl").write_bytes(encode_lines(generated_messages(40, 520)))
    outside_before = tree(scene.outside)

    daemon = procs.daemon([scene.root, healthy.parent], tmp_path / "home", SMALL_BUDGET)
    daemon.wait_ready(60)
    daemon.wait_log("job_finished", 60, workspace=str(healthy), outcome="completed")
    # The hostile workspace was looked at too (it is over its trigger): some word of it.
    wait_until(lambda: any(str(scene.ws) in line for line in daemon.lines), 30, "a word about it")
    assert daemon.process is not None and daemon.process.poll() is None

    daemon.send(signal.SIGTERM)
    assert daemon.wait_exit(35) == 0
    daemon.kill_all()
    assert "Traceback" not in daemon.log_text()
    assert b"Traceback" not in daemon.stderr, daemon.stderr[-2000:]
    assert len(_naming(daemon.lines, scene.ws)) <= 5, "\n".join(daemon.lines)
    assert tree(scene.outside) == outside_before


def _demo_folder(scene: Scene, tmp_path: Path) -> Path:
    """The folder to give ``memoryd demo`` in this scene: an empty folder on the read-only
    or full filesystem, or an earlier demo's folder whose workspace has a symlinked
    ``.memoryd``."""
    if (scene.ws / ".memoryd").is_symlink():
        folder = tmp_path / "demo"
        prepare_demo(folder)
        shutil.rmtree(folder / "example-agent" / ".memoryd")
        (folder / "example-agent" / ".memoryd").symlink_to(scene.outside)
        return folder
    return scene.root.parent / "spare"


@pytest.mark.slow
@pytest.mark.parametrize("scene", SCENES[:3], indirect=True)
def test_demo_in_a_hostile_folder(scene: Scene, tmp_path: Path) -> None:
    """``memoryd demo`` refuses in one line (exit 1 or 2) or runs; either way no traceback
    and nothing written outside; a running demo stops on SIGINT with exit 0."""
    folder = _demo_folder(scene, tmp_path)
    outside_before = tree(scene.outside)
    home = tmp_path / "home"
    stderr_path = tmp_path / "demo.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "demo", str(folder)],
            env=clean_env(home),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.append(raw.decode(errors="replace"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: process.poll() is not None or any("job_finished" in x for x in lines),
            90,
            "the demo to exit or to summarize",
        )
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        code = process.wait(35)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        reader.join(10)
        assert process.stdout is not None
        process.stdout.close()
    err = stderr_path.read_text(errors="replace")
    assert "Traceback" not in err and not any("Traceback" in x for x in lines), err
    assert tree(scene.outside) == outside_before
    if code != 0:
        assert code in (1, 2), (code, err)
        problems = [line for line in err.splitlines() if line not in _log_lines(err)]
        assert len(problems) == 1 and problems[0].startswith("memoryd: "), err


@pytest.mark.slow
def test_mcp_serves_a_hostile_workspace(scene: Scene, tmp_path: Path) -> None:
    """Over the SDK's stdio client: every tool answers or returns a tool error; the server
    does not crash, print a traceback, or write outside the workspace."""
    outside_before = tree(scene.outside)
    stderr_path = tmp_path / "mcp.stderr"
    home = tmp_path / "home"
    shell = 'exec "$0" "$@" 2>>"$MCP_STDERR"'
    server = [sys.executable, "-m", "memoryd", "mcp", "--workspace", str(scene.ws)]
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", shell, *server],
        env={**clean_env(home), "MCP_STDERR": str(stderr_path)},
        cwd=str(tmp_path),
    )
    answers: dict[str, str | None] = {}

    async def session() -> None:
        with anyio.fail_after(60):
            async with Client(params) as client:
                calls: dict[str, dict[str, object]] = {
                    "context_status": {"workspace": str(scene.ws)},
                    "recall": {"query": "alpha"},
                    "expand": {"id": "msg-0001"},
                    "conversation_messages": {},
                    "memory_read": {"workspace": str(scene.ws), "store": "todos"},
                    "memory_write": {
                        "workspace": str(scene.ws),
                        "store": "todos",
                        "entry": {"t": "y" * 10_000},
                    },
                }
                for name, arguments in calls.items():
                    result = await client.call_tool(name, arguments)
                    answers[name] = None
                    if result.is_error:
                        first = result.content[0]
                        assert isinstance(first, TextContent), (name, first)
                        answers[name] = first.text
                        assert answers[name], name

    anyio.run(session)
    err = stderr_path.read_text(errors="replace") if stderr_path.exists() else ""
    assert "Traceback" not in err, err
    assert tree(scene.outside) == outside_before
    # Reading is served in every scene; the write has nowhere to go.
    refused = {name: text for name, text in answers.items() if text is not None}
    if scene.kind == "FIFOs":
        # HEARTBEAT.md and the todos store are FIFOs: refused in words, never waited on.
        assert set(refused) == {"context_status", "memory_read", "memory_write"}, answers
        assert all("is not a regular file" in text for text in refused.values()), refused
    elif scene.kind == "deep JSON":
        # What cannot be read is left out: every tool answers.
        assert refused == {}, (refused, err)
    elif (scene.ws / ".memoryd").is_symlink():
        # What .memoryd holds is outside the workspace: refused, in words.
        assert "memory_write" in refused, answers
        assert all("symlink" in text for text in refused.values()), refused
    else:
        # Reading is served on a read-only or full filesystem; the write has nowhere to go.
        assert set(refused) == {"memory_write"}, (refused, err)
