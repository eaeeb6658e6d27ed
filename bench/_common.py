"""Shared helpers of the benchmarks: conversations, results, tables, process figures.

Not a benchmark itself; each ``bench/NAME.py`` imports it (``bench/`` is on sys.path
when a script there runs). The daemon subprocess, :func:`wait_until` and the
HEARTBEAT.md reader are the tests' own (``tests/fakes/daemon_harness.py``), so the benchmarks
drive the daemon exactly as the end-to-end tests do.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
TMP = RESULTS / "tmp"
FAKE_ANTHROPIC = REPO / "tests" / "fakes" / "fake_anthropic.py"
FAKE_OPENAI = REPO / "tests" / "fakes" / "fake_openai.py"

sys.path.insert(0, str(REPO / "tests"))  # conftest
sys.path.insert(0, str(REPO / "tests" / "fakes"))
# Found through the lines above; re-exported ("as"), so that scripts say common.wait_until.
import daemon_harness as harness  # noqa: E402
from daemon_harness import LogLine as LogLine  # noqa: E402
from daemon_harness import cmdline as cmdline  # noqa: E402
from daemon_harness import read_events as read_events  # noqa: E402
from daemon_harness import read_heartbeat as read_heartbeat  # noqa: E402
from daemon_harness import wait_until as wait_until  # noqa: E402

SENTENCE = (
    "we decided to keep the parser small and move the cache into the loader because the "
    "benchmark showed that most time went into json decoding while the tests kept failing "
    "on windows paths so the user prefers pathlib everywhere and asked for a retry budget"
)
WORDS = tuple(SENTENCE.split())


def message_line(index: int, size: int = 1024, role: str | None = None) -> bytes:
    """One conversation line of about ``size`` bytes (a user/assistant alternation)."""
    role = role or ("user" if index % 2 == 0 else "assistant")
    head = {"id": f"m{index:09d}", "role": role, "content": "", "timestamp": 1_700_000_000_000}
    overhead = len(json.dumps(head, separators=(",", ":"))) + 1
    words: list[str] = []
    length = 0
    k = index
    while length < size - overhead:
        word = WORDS[k % len(WORDS)]
        words.append(word)
        length += len(word) + 1
        k += 7
    text = " ".join(words)[: max(0, size - overhead)]
    head["content"] = text
    return json.dumps(head, separators=(",", ":")).encode() + b"\n"


def write_conversation(path: Path, total_bytes: int, line_size: int = 1024) -> int:
    """Write a conversation of about ``total_bytes``; returns the number of lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = 0
    written = 0
    batch: list[bytes] = []
    with path.open("wb") as out:
        while written < total_bytes:
            line = message_line(lines, line_size)
            batch.append(line)
            written += len(line)
            lines += 1
            if len(batch) >= 4096:
                out.write(b"".join(batch))
                batch.clear()
        out.write(b"".join(batch))
    return lines


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), nearest-rank on the sorted values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_mb": mem_kb // 1024,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def save(name: str, results: Mapping[str, Any]) -> Path:
    """Write ``bench/results/NAME.json`` with the machine and the command line."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "bench": name,
        "command": " ".join(["python", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        **results,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table."""
    cells = [[str(h) for h in headers], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if value == 0 or abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@contextlib.contextmanager
def scratch(name: str, under: Path | None = None) -> Iterator[Path]:
    """A fresh folder under bench/results/tmp (same filesystem as the repo), or under
    ``under``, removed after."""
    folder = (under or TMP) / f"{name}-{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            TMP.rmdir()


# ----- processes ------------------------------------------------------------------------


class Daemon(harness.Daemon):
    """The tests' daemon harness on one root, its home folder beside the root."""

    def __init__(self, root: Path, env: Mapping[str, str], notify: bool = False) -> None:
        super().__init__([root], root.parent / "home", env, notify=notify)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (forkserver workers are grandchildren)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in harness.children(stack.pop()):
            found.append(child)
            stack.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pss_mb(pid: int) -> float:
    """Pss of ``pid`` in MB (shared pages split between the processes that map them)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def role_of(pid: int, daemon: int) -> str:
    """forkserver, resource_tracker or worker (a child of the forkserver)."""
    text = cmdline(pid)
    if "resource_tracker" in text:
        return "resource_tracker"
    with contextlib.suppress(OSError):
        if parent_of(pid) != daemon:
            return "worker"
    return "forkserver" if "forkserver" in text else "other"


@contextlib.contextmanager
def fake_anthropic(latency: float, reply: Sequence[str] = ("--echo",)) -> Iterator[str]:
    """The fake Messages API as a subprocess (``reply``: its answer flags); yields its URL."""
    with fake_server(FAKE_ANTHROPIC, ["--latency", str(latency), *reply]) as url:
        yield url


@contextlib.contextmanager
def fake_openai(latency: float, extra: Sequence[str] = ("--echo",)) -> Iterator[str]:
    """The fake OpenAI-compatible server as a subprocess; yields its URL (ending in /v1)."""
    with fake_server(FAKE_OPENAI, ["--latency", str(latency), *extra]) as url:
        yield url


@contextlib.contextmanager
def fake_server(script: Path, args: Sequence[str]) -> Iterator[str]:
    """``script --port 0 ARGS`` as a subprocess that prints its URL first; yields it."""
    process = subprocess.Popen(
        [sys.executable, str(script), "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"fake server did not start: {url!r}")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def install_exit_handlers() -> None:
    """SIGTERM/SIGHUP end a bench like Ctrl-C does, so every ``finally`` runs."""

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
