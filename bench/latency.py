"""Daemon latency from the append that crosses the trigger to HEARTBEAT.md ``active``.

One root holds ``--trials`` workspaces, each a conversation just below the trigger
(token_limit 10,000, summarize_at 0.80, offline extractive backend). The daemon starts
on the root; once it is READY and has tidied every HEARTBEAT.md, each trial appends one
~1 KB message to the next workspace (under the writers' lock, like ``memoryd append``,
without the fsync) and polls that workspace's HEARTBEAT.md (a 0.2 ms sleep between
reads) until it says ``status: active``. The interval is ``time.perf_counter()`` just
before the ``write()`` to the first read that sees ``active``. The bench then waits for
that job's ``job_finished`` and a random 0.2 to 0.5 s pause, so trials do not overlap.

With ``--from-zero`` the daemon runs with ``worker_idle_timeout`` 1 s and each trial
first waits until the pool has no worker and no forkserver left, so every trial is a
first job after the pool shrank to zero: the daemon starts a forkserver and forks a
worker from it.

Targets: p50 <= 50 ms, p99 <= 250 ms (both ways).

    python bench/latency.py [--trials 120] [--from-zero]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import sys
import time
from pathlib import Path

import _common as common
from daemon_harness import children, cmdline, pool_workers

from memoryd.tokens import estimate_message_tokens

TOKEN_LIMIT = 10_000
SUMMARIZE_AT = 0.80


def forkservers(pid: int) -> list[int]:
    return [child for child in children(pid) if "forkserver" in cmdline(child)]


def tokens_of(line: bytes) -> int:
    return estimate_message_tokens(json.loads(line))


def below_trigger(path: Path, crossing: bytes) -> None:
    """A conversation whose tokens are below the trigger, and above it after ``crossing``."""
    trigger = SUMMARIZE_AT * TOKEN_LIMIT
    lines: list[bytes] = []
    total = 0
    index = 0
    while True:
        line = common.message_line(index, 400)
        if total + tokens_of(line) > trigger - 20:
            break
        lines.append(line)
        total += tokens_of(line)
        index += 1
    # The crossing message follows the last line, whatever its role: make that assistant.
    if json.loads(lines[-1])["role"] != "assistant":
        total -= tokens_of(lines.pop())
    assert total <= trigger < total + tokens_of(crossing)
    path.write_bytes(b"".join(lines))


def append_locked(workspace: Path, line: bytes) -> float:
    """Append ``line`` under the writers' lock; returns perf_counter() before the write."""
    lock_path = workspace / ".memoryd" / "lock"
    lock_path.parent.mkdir(exist_ok=True)
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fd = os.open(workspace / "conversation.jsonl", os.O_WRONLY | os.O_APPEND)
        try:
            start = time.perf_counter()
            os.write(fd, line)
        finally:
            os.close(fd)
    finally:
        os.close(lock)
    return start


def status_of(workspace: Path) -> str | None:
    return common.read_heartbeat(workspace).get("status")


def wait_ready_and_tidied(daemon: common.Daemon, workspaces: list[Path]) -> None:
    """READY, then every HEARTBEAT.md tidied to idle, then a second of quiet."""
    daemon.wait_ready(60)
    common.wait_until(
        lambda: all(status_of(w) == "idle" for w in workspaces),
        30,
        "every HEARTBEAT.md tidied to idle",
        interval=0.05,
    )
    time.sleep(1.0)  # a second of quiet before the first trial, not a wait for an event


def wait_active(workspace: Path, timeout: float) -> float:
    """perf_counter() at the first read of HEARTBEAT.md that says ``active``."""
    seen: float = common.wait_until(
        lambda: status_of(workspace) == "active" and time.perf_counter(),
        timeout,
        f"{workspace}: HEARTBEAT.md active",
        interval=0.0002,
    )
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=120)
    parser.add_argument("--from-zero", action="store_true")
    args = parser.parse_args(argv)
    common.install_exit_handlers()
    rng = random.Random(7)

    crossing = common.message_line(10**6, 1024, role="user")
    latencies_ms: list[float] = []
    dispatch_ms: list[float] = []
    outcomes: dict[str, int] = {}
    with common.scratch("latency") as folder:
        root = folder / "root"
        workspaces = [root / f"ws{i:04d}" for i in range(args.trials)]
        for workspace in workspaces:
            workspace.mkdir(parents=True)
            below_trigger(workspace / "conversation.jsonl", crossing)
        env = {
            "MEMORYD_TOKEN_LIMIT": str(TOKEN_LIMIT),
            "MEMORYD_SUMMARIZE_AT": str(SUMMARIZE_AT),
            "MEMORYD_SUMMARIZER__BACKEND": "extractive",
            "XDG_CONFIG_HOME": str(folder / "xdg"),
        }
        if args.from_zero:
            env["MEMORYD_WORKER_IDLE_TIMEOUT"] = "1"
        workers_before: list[int] = []
        with common.Daemon(root, env) as daemon:
            wait_ready_and_tidied(daemon, workspaces)
            for i, workspace in enumerate(workspaces):
                time.sleep(rng.uniform(0.2, 0.5))
                if args.from_zero:
                    assert daemon.process is not None
                    pid = daemon.process.pid
                    deadline = time.monotonic() + 30
                    while forkservers(pid) and time.monotonic() < deadline:
                        time.sleep(0.01)
                    workers_before.append(len(pool_workers(pid)) + len(forkservers(pid)))
                start = append_locked(workspace, crossing)
                seen = wait_active(workspace, 10)
                latencies_ms.append((seen - start) * 1000)
                finished = None
                while finished is None:
                    item = daemon.next_log("job_finished", 30)
                    if item.record.get("workspace") == str(workspace):
                        finished = item
                outcome = str(finished.record.get("outcome"))
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                dispatched = daemon.stamped("summarize_dispatched", workspace=str(workspace))
                if dispatched:
                    dispatch_ms.append((dispatched[-1].at - start) * 1000)
                if (i + 1) % 20 == 0:
                    print(f"  {i + 1} trials, last {latencies_ms[-1]:.1f} ms", file=sys.stderr)

    p50 = common.percentile(latencies_ms, 50)
    p99 = common.percentile(latencies_ms, 99)
    print(
        common.table(
            ("measure", "p50 ms", "p90 ms", "p99 ms", "max ms", "target", "met"),
            [
                (
                    "append -> HEARTBEAT active",
                    p50,
                    common.percentile(latencies_ms, 90),
                    p99,
                    max(latencies_ms),
                    "p50<=50, p99<=250",
                    p50 <= 50 and p99 <= 250,
                ),
                (
                    "append -> summarize_dispatched read from stdout",
                    common.percentile(dispatch_ms, 50),
                    common.percentile(dispatch_ms, 90),
                    common.percentile(dispatch_ms, 99),
                    max(dispatch_ms),
                    "",
                    "",
                ),
            ],
        )
    )
    zero = f", each with {set(workers_before)} pool processes before" if args.from_zero else ""
    print(f"\n{len(latencies_ms)} trials{zero}; job outcomes: {outcomes}")
    out = common.save(
        "latency-from-zero" if args.from_zero else "latency",
        {
            "from_zero": args.from_zero,
            "trials": len(latencies_ms),
            "latencies_ms": latencies_ms,
            "dispatch_log_ms": dispatch_ms,
            "p50_ms": p50,
            "p90_ms": common.percentile(latencies_ms, 90),
            "p99_ms": p99,
            "max_ms": max(latencies_ms),
            "job_outcomes": outcomes,
            "targets": {"p50_ms": 50, "p99_ms": 250},
            "met": {"p50": p50 <= 50, "p99": p99 <= 250},
        },
    )
    print(f"results: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
