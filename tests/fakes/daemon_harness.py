"""Run ``memoryd run`` as a real subprocess, for the end-to-end tests and the benchmarks.

:class:`Daemon` starts the daemon in its own session with a clean environment (PATH,
HOME and XDG_CONFIG_HOME in the test's folder, no ANTHROPIC_*), reads its JSON log lines
from stdout in a thread (each stamped with the time it arrived), optionally listens on a
``NOTIFY_SOCKET`` of its own, and offers wait-for helpers with bounded timeouts.
``kill_all`` SIGKILLs every process still in the daemon's process group (the daemon, its
forkserver, resource tracker and workers, orphans included), by pid, and is safe to call
twice. :class:`Writer` runs ``tests/fakes/writers.py``. :func:`wait_until` is the one polling
helper of the tests and of ``bench/``. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

FAKES = Path(__file__).resolve().parent
REPO = FAKES.parents[1]
WRITERS = FAKES / "writers.py"
API_KEY = "sk-ant-test-QUOKKA7-zebrafish-4411"
"""A distinctive key: tests grep the logs for it."""


def wait_until(
    condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.02
) -> Any:
    """Poll ``condition`` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def clean_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """PATH, HOME and XDG_CONFIG_HOME in ``home``, unbuffered output, plus ``extra``.

    PYTHONPATH names this checkout, so the daemon runs the code under test (not whatever
    copy of memoryd the interpreter has installed).
    """
    config_home = home / ".config"
    config_home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(config_home),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(REPO),
        "LANG": "C.UTF-8",
    }
    env.update(extra or {})
    return env


def llm_env(base_url: str, **settings: str) -> dict[str, str]:
    """MEMORYD_* variables pointing the anthropic backend at a fake server."""
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "anthropic",
        "MEMORYD_ANTHROPIC__BASE_URL": base_url,
        "MEMORYD_ANTHROPIC__API_KEY": API_KEY,
        "MEMORYD_ANTHROPIC__TIMEOUT": "20",
        "MEMORYD_ANTHROPIC__MAX_RETRIES": "0",
    }
    env.update({f"MEMORYD_{key.upper()}": value for key, value in settings.items()})
    return env


def group_members(pgid: int) -> list[int]:
    """The pids of the live processes whose process group is ``pgid`` (from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces): state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def children(pid: int) -> list[int]:
    """The child pids of ``pid`` (from /proc/<pid>/task/*/children)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(x) for x in (task / "children").read_text().split()]
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def pool_workers(daemon_pid: int) -> list[int]:
    """The worker processes of a daemon's pool: the children of its forkserver."""
    workers: list[int] = []
    for child in children(daemon_pid):
        if "multiprocessing.forkserver" in cmdline(child):
            workers += children(child)
    return workers


def _socket_inodes(port: int) -> set[str]:
    """Inodes of TCP sockets whose remote port is ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                cols = row.split()
                if int(cols[2].rsplit(":", 1)[1], 16) == port:
                    inodes.add(cols[9])
    return inodes


def pid_talking_to(port: int, pids: Sequence[int]) -> int | None:
    """The one of ``pids`` holding a TCP connection to ``port`` (the worker in an LLM call)."""
    inodes = _socket_inodes(port)
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        return pid
    return None


@dataclass(frozen=True, slots=True)
class LogLine:
    """One JSON log record of the daemon and when the harness read it."""

    at: float
    """``time.perf_counter()`` when the line arrived."""
    record: dict[str, Any]


class Daemon:
    """``python -m memoryd run`` in its own session, its stdout parsed line by line.

    With ``notify``, the daemon's ``NOTIFY_SOCKET`` is a datagram socket in ``home`` that
    the harness reads: ``notes`` has every message with its arrival time, ``ready_at``
    the arrival of ``READY=1``. A ``with`` block starts the daemon and stops it (:meth:`stop`).
    """

    def __init__(
        self,
        roots: Sequence[Path],
        home: Path,
        env: Mapping[str, str] | None = None,
        config: Path | None = None,
        notify: bool = False,
    ) -> None:
        self.roots = list(roots)
        self.home = home
        self.env = clean_env(home, env)
        self.config = config
        self.notify = notify
        self.process: subprocess.Popen[bytes] | None = None
        self.lines: list[str] = []
        self.history: list[LogLine] = []
        """Every JSON record with its arrival time, oldest first."""
        self.notes: list[tuple[float, str]] = []
        self.started_at = 0.0
        """``time.perf_counter()`` just before the process was started."""
        self.ready_at: float | None = None
        self._stderr = bytearray()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._sock: socket.socket | None = None
        self._notify_done = threading.Event()
        self._consumed = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def stderr(self) -> bytes:
        """What the daemon wrote on stderr so far."""
        with self._lock:
            return bytes(self._stderr)

    def start(self) -> Self:
        """Start the daemon (returns at once; see :meth:`wait_ready`)."""
        argv = [sys.executable, "-m", "memoryd"]
        if self.config is not None:
            argv += ["--config", str(self.config)]
        argv.append("run")
        for root in self.roots:
            argv += ["--root", str(root)]
        readers = [self._read_stdout, self._read_stderr]
        if self.notify:
            address = self.home / "notify.sock"
            address.parent.mkdir(parents=True, exist_ok=True)
            address.unlink(missing_ok=True)
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.bind(str(address))
            self.env["NOTIFY_SOCKET"] = str(address)
            readers.append(self._read_notify)
        self.started_at = time.perf_counter()
        self.process = subprocess.Popen(
            argv,
            env=self.env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._threads = [threading.Thread(target=reader, daemon=True) for reader in readers]
        for thread in self._threads:
            thread.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            at = time.perf_counter()
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            try:
                record = json.loads(text)
            except ValueError:
                record = None
            with self._lock:
                self.lines.append(text)
                if isinstance(record, dict):
                    self.history.append(LogLine(at, record))

    def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for raw in self.process.stderr:
            with self._lock:
                self._stderr += raw

    def _read_notify(self) -> None:
        sock = self._sock
        assert sock is not None
        # A timeout, because closing a socket does not wake a thread blocked in recv().
        sock.settimeout(0.1)
        while not self._notify_done.is_set():
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            at = time.perf_counter()
            text = data.decode(errors="replace")
            self.notes.append((at, text))
            if self.ready_at is None and "READY=1" in text.split("\n"):
                self.ready_at = at

    # ----- the log ----------------------------------------------------------------------

    def logged(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        """The log records of ``event`` whose fields equal ``fields``, oldest first."""
        return [line.record for line in self.stamped(event, **fields)]

    def stamped(self, event: str, **fields: Any) -> list[LogLine]:
        """:meth:`logged`, each record with the time it arrived."""
        with self._lock:
            history = list(self.history)
        return [
            line
            for line in history
            if line.record.get("event") == event
            and all(line.record.get(k) == v for k, v in fields.items())
        ]

    def wait_log(self, event: str, timeout: float = 20, count: int = 1, **fields: Any) -> Any:
        """Wait until ``event`` (with ``fields``) was logged ``count`` times; the last one.

        Fails at once, with the log's tail, when the daemon exits without logging it.
        """
        process = self.process
        assert process is not None

        def seen() -> Any:
            exited = process.poll() is not None
            if exited:
                self._threads[0].join(timeout=5)  # the reader takes the last lines
            found = self.logged(event, **fields)
            if len(found) >= count:
                return found[count - 1]
            if exited:
                raise AssertionError(
                    f"the daemon exited ({process.returncode}) before logging {event} "
                    f"x{count} {fields or ''}; stderr: {self.stderr[-2000:]!r}; last lines:\n"
                    + "\n".join(self.lines[-15:])
                )
            return None

        return wait_until(seen, timeout, f"log event {event} x{count} {fields or ''}")

    def wait_ready(self, timeout: float = 30) -> Any:
        return self.wait_log("daemon_ready", timeout)

    def next_log(self, event: str, timeout: float) -> LogLine:
        """The next ``event`` record after those this method already returned (or skipped).

        For a caller that follows the log as a stream: each record is returned once.
        """
        process = self.process
        assert process is not None

        def found() -> LogLine | None:
            exited = process.poll() is not None
            with self._lock:
                pending = self.history[self._consumed :]
            for offset, line in enumerate(pending, start=1):
                if line.record.get("event") == event:
                    self._consumed += offset
                    return line
            self._consumed += len(pending)
            if exited:
                raise AssertionError(f"the daemon exited ({process.returncode}) before {event}")
            return None

        line: LogLine = wait_until(found, timeout, f"log event {event}", interval=0.005)
        return line

    def wait_notify_ready(self, timeout: float = 30) -> float:
        """Seconds from the start to the arrival of ``READY=1`` (needs ``notify``)."""
        assert self.notify, "READY=1 is only seen with notify=True"
        ready: float = wait_until(lambda: self.ready_at, timeout, "READY=1 on NOTIFY_SOCKET")
        return ready - self.started_at

    # ----- signals and exit -------------------------------------------------------------

    def send(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the daemon to exit; its exit code (AssertionError after ``timeout``)."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon did not exit within {timeout:g} s") from None
        self._threads[1].join(timeout=5)
        return code

    def kill_all(self) -> None:
        """SIGKILL the daemon and every process left in its group; reap; stop the readers."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            if self.process.poll() is None:
                self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        deadline = time.monotonic() + 10
        while (members := group_members(self.pid)) and time.monotonic() < deadline:
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        self._notify_done.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            (self.home / "notify.sock").unlink(missing_ok=True)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM, wait up to ``timeout`` for a clean exit, then :meth:`kill_all`."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self.kill_all()

    def log_text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)


class Writer:
    """``tests/fakes/writers.py WS ID COUNT``: an agent appending lines, locked or not."""

    def __init__(
        self, workspace: Path, writer_id: str, count: int, delay: float, lock: bool = True
    ) -> None:
        argv = [sys.executable, str(WRITERS), str(workspace), writer_id, str(count)]
        argv += ["--delay", str(delay)]
        if not lock:
            argv.append("--no-lock")
        self.writer_id = writer_id
        self.count = count
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"writer {self.writer_id} did not finish") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


class Processes:
    """Every daemon and writer a test started; ``cleanup`` kills what is still running."""

    def __init__(self) -> None:
        self.daemons: list[Daemon] = []
        self.writers: list[Writer] = []

    def daemon(
        self,
        roots: Sequence[Path],
        home: Path,
        env: Mapping[str, str] | None = None,
        config: Path | None = None,
    ) -> Daemon:
        """A started daemon (not yet READY)."""
        daemon = Daemon(roots, home, env, config)
        self.daemons.append(daemon)
        return daemon.start()

    def writer(
        self, workspace: Path, writer_id: str, count: int, delay: float = 0.0, lock: bool = True
    ) -> Writer:
        """A started writers.py process."""
        writer = Writer(workspace, writer_id, count, delay, lock)
        self.writers.append(writer)
        return writer

    def cleanup(self) -> None:
        for writer in self.writers:
            writer.kill()
        for daemon in self.daemons:
            daemon.kill_all()


def workspace_lines(workspace: Path) -> tuple[list[bytes], list[bytes]]:
    """(every line of the archives, oldest archive first; every line of the live file)."""
    archived: list[bytes] = []
    archive_dir = workspace / ".memoryd" / "archive"
    if archive_dir.is_dir():
        for path in sorted(archive_dir.glob("conversation-*.jsonl")):
            archived += path.read_bytes().splitlines()
    return archived, (workspace / "conversation.jsonl").read_bytes().splitlines()


def writer_ids(lines: Sequence[bytes]) -> Iterator[str]:
    """The ids of the lines that writers.py wrote (summaries and others left out)."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and not record.get("isSummary") and "id" in record:
            yield str(record["id"])


def read_heartbeat(workspace: Path) -> dict[str, str]:
    """The front matter of HEARTBEAT.md as strings ({} when missing or mid-rewrite)."""
    try:
        text = (workspace / "HEARTBEAT.md").read_text()
    except OSError:
        return {}
    lines = text.splitlines()
    if not lines or lines[0] != "---" or "---" not in lines[1:]:
        return {}
    values = {}
    for line in lines[1 : lines.index("---", 1)]:
        key, _, value = line.partition(":")
        values[key.strip()] = value.strip().strip('"')
    return values


def read_events(workspace: Path) -> list[dict[str, Any]]:
    """The workspace's events.jsonl, oldest first."""
    path = workspace / ".memoryd" / "events.jsonl"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def read_state(workspace: Path) -> dict[str, Any] | None:
    """The workspace's state.json, or None."""
    try:
        value = json.loads((workspace / ".memoryd" / "state.json").read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
