"""A real llama.cpp ``llama-server`` in the loop: what memoryd does against it, end to end.

Given a ``llama-server`` binary and a GGUF model (environment variables
``MEMORYD_LLAMA_SERVER`` and ``MEMORYD_LLAMA_GGUF``, or ``--server`` / ``--gguf``), each
scenario starts the server on 127.0.0.1 with a small context and 1 or 4 slots, runs
foreground jobs (``run_job``, what ``memoryd summarize`` runs) through
``backend = "openai"``, and reports the requests sent, each job's outcome and whether
every line of the conversation is still in the file or its archive (lossless):

1. ``summary``: one summary end to end, ``-c 4096``, 1 slot, ``context_window = 4096``.
2. ``learned-overflow``: ``-c 2048``, no ``context_window``: the first request overflows,
   the context is learned from llama.cpp's ``n_ctx`` and the input re-chunked.
3. ``shared-cache``: three workspaces at once on ``-c 4096`` shared by 4 slots
   (``--kv-unified``) with ``context_window = 4096``: a full cache is retried, never
   learned as a small context, and the server is then sent one request at a time; a job
   that failed (its deadline passed while the three shared one CPU thread) runs once more,
   as the daemon runs a failed job again after its back-off. As designed: nothing lost,
   nothing learned, and each job completed or failed for want of time (to be run again),
   never for a context too small.
4. ``length-cut``: ``-c 2048``, ``max_summary_tokens = 24``: an answer cut at
   ``max_tokens`` (or by the context) is a failed attempt, never a summary; when every
   answer is cut, the offline items are the head ("llm gave no summary").
5. ``restart``: the server killed after the job's first request and started again 3 s
   later: the job's retries carry it through.

Every scenario must end completed (with the model's summary or, when it gave none, the
offline items), with 0 lines lost; ``length-cut`` may also fail with the cut as its reason.

    MEMORYD_LLAMA_SERVER=/path/llama-server MEMORYD_LLAMA_GGUF=/path/model.gguf \\
        python bench/real_server.py [--only NAME] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _common as common

from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import load_settings
from memoryd.daemon.logs import configure_logging
from memoryd.llm import limits
from memoryd.llm.openai_compat import OpenAICompatBackend

SERVER_ENV = "MEMORYD_LLAMA_SERVER"
GGUF_ENV = "MEMORYD_LLAMA_GGUF"
MODEL = "local-model"
STARTUP_S = 120.0


@dataclass
class Row:
    """One scenario's figures."""

    name: str
    server: str
    requests: int = 0
    outcomes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    lines_lost: int = 0
    learned: list[str] = field(default_factory=list)
    seconds: float = 0.0
    as_designed: bool = False
    first_round: list[str] = field(default_factory=list)
    """shared-cache: the outcomes of the three jobs at once, before any ran again."""
    retried: int = 0
    """shared-cache: the jobs that failed and ran again."""


class RequestCount:
    """Requests the OpenAI-compatible backend sends, counted at its one send method."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._original: Callable[..., Any] = OpenAICompatBackend._send

    def __enter__(self) -> RequestCount:
        original = self._original

        def counted(backend: OpenAICompatBackend, *args: Any) -> Any:
            with self._lock:
                self.count += 1
            return original(backend, *args)

        OpenAICompatBackend._send = counted  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc_info: object) -> None:
        OpenAICompatBackend._send = self._original  # type: ignore[method-assign]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """``llama-server`` on 127.0.0.1: started, waited for (``/health``), stopped, killed."""

    def __init__(self, binary: Path, gguf: Path, ctx: int, slots: int, log: Path) -> None:
        self.binary, self.gguf, self.ctx, self.slots, self.log = binary, gguf, ctx, slots, log
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def label(self) -> str:
        return f"-c {self.ctx} --parallel {self.slots}"

    def start(self) -> None:
        command = [
            str(self.binary),
            "-m",
            str(self.gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(self.ctx),
            "--parallel",
            str(self.slots),
            "--threads",
            "1",
            "--alias",
            MODEL,
        ]
        if self.slots > 1:
            command.append("--kv-unified")
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.process.returncode}: see {self.log}")
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{self.port}/health"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            time.sleep(0.25)
        raise RuntimeError(f"llama-server did not become healthy in {STARTUP_S:g} s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def running(server: LlamaServer) -> Iterator[LlamaServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


def conversation(messages: int, size: int) -> bytes:
    """A user/assistant conversation of ``messages`` lines of about ``size`` bytes."""
    return b"".join(common.message_line(i, size) for i in range(messages))


def lost_lines(folder: Path, original: bytes) -> int:
    """Lines of ``original`` found neither in the conversation nor in its archives."""
    kept = set((folder / "conversation.jsonl").read_bytes().splitlines())
    for archive in (folder / ".memoryd" / "archive").glob("*.jsonl"):
        kept.update(archive.read_bytes().splitlines())
    return sum(1 for line in original.splitlines() if line not in kept)


def job(folder: Path, original: bytes, server: LlamaServer, **overrides: Any) -> JobResult:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conversation.jsonl").write_bytes(original)
    settings = load_settings(
        overrides={
            "token_limit": 2_000,
            "drain_seconds": 0,
            "index_archive": False,
            "keep_first": 0,
            "summarizer.backend": "openai",
            "openai.base_url": server.base_url,
            "openai.model": MODEL,
            "openai.timeout": 120.0,
            "openai.max_retries": 4,
            "summarizer.max_summary_tokens": 256,
            **overrides,
        },
        env={"XDG_CONFIG_HOME": str(folder.parent / "xdg")},
    ).settings
    return run_job(JobRequest(folder, settings, force=True, env={}))


def record(row: Row, folder: Path, original: bytes, result: JobResult) -> None:
    row.outcomes.append(result.outcome)
    row.reasons.append(result.reason or "")
    row.lines_lost += lost_lines(folder, original)


def learned_now() -> list[str]:
    return [limits.describe(limit) for limit in limits.learned_limits().values()]


def scenario(
    name: str, binary: Path, gguf: Path, work: Path, ctx: int, slots: int
) -> tuple[Row, LlamaServer]:
    limits.forget()  # each scenario starts knowing nothing of the servers
    server = LlamaServer(binary, gguf, ctx, slots, work / f"{name}.server.log")
    return Row(name, server.label), server


def run_summary(binary: Path, gguf: Path, work: Path) -> Row:
    row, server = scenario("summary", binary, gguf, work, 4096, 1)
    original = conversation(24, 700)
    with running(server), RequestCount() as counted:
        started = time.monotonic()
        result = job(work / "summary", original, server, **{"openai.context_window": 4096})
        row.seconds = time.monotonic() - started
    record(row, work / "summary", original, result)
    row.requests, row.learned = counted.count, learned_now()
    row.as_designed = row.outcomes == ["completed"] and row.lines_lost == 0
    return row


def run_learned_overflow(binary: Path, gguf: Path, work: Path) -> Row:
    row, server = scenario("learned-overflow", binary, gguf, work, 2048, 1)
    original = conversation(24, 700)
    with running(server), RequestCount() as counted:
        started = time.monotonic()
        result = job(work / "overflow", original, server, **{"summarizer.max_summary_tokens": 128})
        row.seconds = time.monotonic() - started
    record(row, work / "overflow", original, result)
    row.requests, row.learned = counted.count, learned_now()
    row.as_designed = row.outcomes == ["completed"] and row.lines_lost == 0 and bool(row.learned)
    return row


def run_shared_cache(binary: Path, gguf: Path, work: Path) -> Row:
    """Three jobs at once; a job that failed (nothing changed) runs again, as the daemon
    runs it again after its back-off, while the server is sent one request at a time."""
    row, server = scenario("shared-cache", binary, gguf, work, 4096, 4)
    originals = [conversation(24, 700 + 10 * i) for i in range(3)]
    results: list[JobResult | None] = [None, None, None]

    def one(index: int) -> None:
        folder = work / f"shared-{index}"
        results[index] = job(folder, originals[index], server, **{"openai.context_window": 4096})

    with running(server), RequestCount() as counted:
        started = time.monotonic()
        for round_ in range(2):
            todo = [i for i, r in enumerate(results) if r is None or r.outcome == "failed"]
            if not todo:
                break
            if round_:
                row.retried = len(todo)
            threads = [threading.Thread(target=one, args=(i,)) for i in todo]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            row.first_round = row.first_round or [r.outcome for r in results if r is not None]
        row.seconds = time.monotonic() - started
    for index, result in enumerate(results):
        assert result is not None
        record(row, work / f"shared-{index}", originals[index], result)
    row.requests, row.learned = counted.count, learned_now()
    row.as_designed = shared_cache_as_designed(row)
    return row


def shared_cache_as_designed(row: Row) -> bool:
    """Nothing lost, no context learned from the full cache, and every job completed or
    failed for want of time (its deadline, a timeout: nothing changed, to be run again),
    never for a context too small; a job that failed at once ran again (pure)."""
    transient = ("deadline", "timed out", "stream error", "HTTP 5")
    failed_at_once = sum(outcome == "failed" for outcome in row.first_round)
    return (
        row.lines_lost == 0
        and not row.learned
        and row.retried == failed_at_once
        and all(
            outcome == "completed"
            or (outcome == "failed" and any(word in reason for word in transient))
            for outcome, reason in zip(row.outcomes, row.reasons, strict=True)
        )
    )


def run_length_cut(binary: Path, gguf: Path, work: Path) -> Row:
    row, server = scenario("length-cut", binary, gguf, work, 2048, 1)
    original = conversation(24, 700)
    with running(server), RequestCount() as counted:
        started = time.monotonic()
        result = job(work / "length", original, server, **{"summarizer.max_summary_tokens": 24})
        row.seconds = time.monotonic() - started
    record(row, work / "length", original, result)
    row.requests, row.learned = counted.count, learned_now()
    cut = "cut at max_tokens" in row.reasons[0] or "cut by the server's context" in row.reasons[0]
    row.as_designed = row.lines_lost == 0 and (
        (row.outcomes == ["failed"] and cut) or row.outcomes == ["completed"]
    )
    return row


def run_restart(binary: Path, gguf: Path, work: Path) -> Row:
    row, server = scenario("restart", binary, gguf, work, 4096, 1)
    original = conversation(24, 700)
    outcome: list[JobResult] = []
    with running(server), RequestCount() as counted:
        started = time.monotonic()
        worker = threading.Thread(
            target=lambda: outcome.append(
                job(
                    work / "restart",
                    original,
                    server,
                    **{"openai.context_window": 4096, "openai.max_retries": 8},
                )
            )
        )
        worker.start()
        common.wait_until(lambda: counted.count >= 1, 120, "the job's first request")
        server.kill()
        time.sleep(3)
        server.start()
        worker.join()
        row.seconds = time.monotonic() - started
    record(row, work / "restart", original, outcome[0])
    row.requests, row.learned = counted.count, learned_now()
    row.as_designed = row.outcomes == ["completed"] and row.lines_lost == 0
    return row


SCENARIOS: dict[str, Callable[[Path, Path, Path], Row]] = {
    "summary": run_summary,
    "learned-overflow": run_learned_overflow,
    "shared-cache": run_shared_cache,
    "length-cut": run_length_cut,
    "restart": run_restart,
}


def paths(server: str | None, gguf: str | None) -> tuple[Path, Path] | str:
    """The binary and the model, or why they cannot be used (one line)."""
    binary = server or os.environ.get(SERVER_ENV)
    model = gguf or os.environ.get(GGUF_ENV)
    if not binary or not model:
        return f"no llama-server binary or GGUF given (set {SERVER_ENV} and {GGUF_ENV})"
    if not os.access(binary, os.X_OK):
        return f"{binary}: not an executable file"
    if not Path(model).is_file():
        return f"{model}: no such file"
    return Path(binary), Path(model)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--server", help=f"the llama-server binary (default ${SERVER_ENV})")
    parser.add_argument("--gguf", help=f"the GGUF model (default ${GGUF_ENV})")
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    found = paths(args.server, args.gguf)
    if isinstance(found, str):
        print(f"real_server: {found}", file=sys.stderr)
        return 2
    binary, gguf = found
    # The log to stderr: stdout holds the table (or the JSON) alone.
    configure_logging("console", "info", sys.stderr)
    common.install_exit_handlers()
    rows: list[Row] = []
    with common.scratch("real-server") as work:
        for name in args.only or list(SCENARIOS):
            rows.append(SCENARIOS[name](binary, gguf, work))
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
    else:
        print(
            common.table(
                ["scenario", "server", "requests", "outcomes", "lines lost", "s", "as designed"],
                [
                    (
                        r.name,
                        r.server,
                        r.requests,
                        ", ".join(r.outcomes),
                        r.lines_lost,
                        round(r.seconds, 1),
                        r.as_designed,
                    )
                    for r in rows
                ],
            )
        )
        for row in rows:
            if row.retried:
                print(f"{row.name}: at once {', '.join(row.first_round)}; {row.retried} ran again")
            for reason in row.reasons:
                print(f"{row.name}: {reason}")
            for learned in row.learned:
                print(f"{row.name}: learned {learned}")
    common.save("real_server", {"rows": [asdict(row) for row in rows], "gguf": gguf.name})
    return 0 if all(row.as_designed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
