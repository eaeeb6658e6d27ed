"""Makespan: 200 workspaces crossing the trigger at once, fake LLM at a fixed latency.

The fake Messages API (``tests/fakes/fake_anthropic.py --latency L --lossy 0``: a summary
that keeps every detail, so the retention check passes and a job makes one request; with
``--echo`` it makes two, the second a repair) runs as a subprocess; the daemon uses the
``anthropic`` backend pointed at it with ``anthropic.max_concurrent_requests`` 16 and its
default ``workers``. The workspaces are
created below the trigger before the daemon starts (token_limit 10,000, as in
bench/latency.py). Once the daemon is READY and every HEARTBEAT.md is tidied, the daemon
is paused (SIGSTOP), one message is appended to each workspace in a shuffled order, and
the daemon resumed (SIGCONT): all of them cross at once. Half the messages are large
enough to take their workspace to ``critical``, the others leave it at ``warning``.
The makespan runs from just before the first append to the arrival of the last
``job_finished`` log line. Ideal: ``ceil(200 / max_concurrent_requests) x latency``.
The tree's PSS (daemon, forkserver, resource tracker, workers) is summed every 0.5 s.
After the burst the bench waits until the pool has shrunk to zero (no worker, no
forkserver; ``worker_idle_timeout``, default 60 s, set with ``--idle-timeout``) and
reports how long that took and the idle tree's PSS then (the largest of six samples
over 3 s).

Targets: makespan <= ``--target`` x ideal (1.2 by default; 1.1 for the 200 jobs at 5 s
of the defaults, ``--target 1.1``); every critical workspace dispatched before any
warning one; the idle tree after the burst <= 60 MB. The burst of 96 at 4 s:
``--workspaces 96 --latency 4``.

    python bench/makespan.py [--workspaces 200] [--latency 5] [--max-concurrent 16]
                             [--workers N] [--drain-seconds D] [--no-pause] [--echo]
                             [--idle-timeout S] [--target R]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import _common as common
from daemon_harness import pool_workers
from latency import (
    append_locked,
    below_trigger,
    forkservers,
    tokens_of,
    wait_ready_and_tidied,
)

from memoryd.conversation.reader import ConversationReader
from memoryd.levels import detect_threshold, usage_ratio

TOKEN_LIMIT = 10_000


def level_of(workspace: Path) -> str:
    reader = ConversationReader(workspace / "conversation.jsonl", 1 << 24)
    reader.update()
    return detect_threshold(usage_ratio(reader.tally.tokens, TOKEN_LIMIT))


class PssSampler(threading.Thread):
    """Peak of the tree's summed Pss, sampled every 0.5 s until stopped, and the CPU
    time (utime + stime) each process of the tree used since the sampler started, by
    role: the burst's cost, which a busy machine's wall clock hides."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0.0
        self.peak_count = 0
        self.done = threading.Event()
        self.cpu_before = {pid: common.cpu_seconds(pid)}
        self.cpu: dict[int, float] = {}
        self.roles: dict[int, str] = {pid: "daemon"}

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.sample()
        self.sample()

    def sample(self) -> None:
        members = [self.pid, *common.descendants(self.pid)]
        total = 0.0
        for member in members:
            with contextlib.suppress(OSError, IndexError):
                total += common.pss_mb(member)
                self.cpu[member] = common.cpu_seconds(member)
                if member not in self.roles:
                    self.roles[member] = common.role_of(member, self.pid)
        if total > self.peak:
            self.peak, self.peak_count = total, len(members)

    def cpu_by_role(self) -> dict[str, float]:
        """CPU seconds used since the start, by role (the last reading of each process:
        a worker that exited between two readings counts up to its last one)."""
        used: dict[str, float] = {}
        for member, cpu in self.cpu.items():
            role = self.roles[member]
            used[role] = used.get(role, 0.0) + cpu - self.cpu_before.get(member, 0.0)
        return {role: round(seconds, 2) for role, seconds in sorted(used.items())}


def tree_pss(pid: int) -> float:
    return sum(common.pss_mb(member) for member in [pid, *common.descendants(pid)])


def shrunk_to_zero(pid: int, limit: float) -> tuple[float | None, float, int]:
    """Wait (at most ``limit`` s) until ``pid`` has no pool worker and no forkserver; the
    seconds that took (None past the limit), the tree's PSS then and its processes."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if not pool_workers(pid) and not forkservers(pid):
            waited = time.monotonic() - start
            samples = []
            for _ in range(6):
                samples.append(tree_pss(pid))
                time.sleep(0.5)
            return waited, max(samples), 1 + len(common.descendants(pid))
        time.sleep(0.2)
    return None, tree_pss(pid), 1 + len(common.descendants(pid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=200)
    parser.add_argument("--latency", type=float, default=5.0)
    parser.add_argument("--max-concurrent", type=int, default=16)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--drain-seconds", type=float, default=None)
    parser.add_argument("--no-pause", action="store_true")
    parser.add_argument("--echo", action="store_true", help="the fake answers --echo")
    parser.add_argument("--idle-timeout", type=float, default=None)
    parser.add_argument("--target", type=float, default=1.2, help="makespan / ideal at most")
    args = parser.parse_args(argv)
    common.install_exit_handlers()
    rng = random.Random(11)

    crossing = common.message_line(10**6, 1024, role="user")
    critical = common.message_line(10**6 + 1, 3000, role="user")
    assert tokens_of(critical) > 0.06 * TOKEN_LIMIT
    slots = min(args.max_concurrent, args.workers or args.max_concurrent)
    ideal = math.ceil(args.workspaces / slots) * args.latency
    with (
        common.scratch("makespan") as folder,
        common.fake_anthropic(args.latency, ("--echo",) if args.echo else ("--lossy", "0")) as url,
    ):
        root = folder / "root"
        workspaces = [root / f"ws{i:04d}" for i in range(args.workspaces)]
        for workspace in workspaces:
            workspace.mkdir(parents=True)
            below_trigger(workspace / "conversation.jsonl", crossing)
        env = {
            "MEMORYD_TOKEN_LIMIT": str(TOKEN_LIMIT),
            "MEMORYD_SUMMARIZER__BACKEND": "anthropic",
            "MEMORYD_ANTHROPIC__BASE_URL": url,
            "MEMORYD_ANTHROPIC__API_KEY": "sk-fake-bench",
            "MEMORYD_ANTHROPIC__MAX_CONCURRENT_REQUESTS": str(args.max_concurrent),
            "XDG_CONFIG_HOME": str(folder / "xdg"),
        }
        if args.workers is not None:
            env["MEMORYD_WORKERS"] = str(args.workers)
        if args.drain_seconds is not None:
            env["MEMORYD_DRAIN_SECONDS"] = str(args.drain_seconds)
        if args.idle_timeout is not None:
            env["MEMORYD_WORKER_IDLE_TIMEOUT"] = str(args.idle_timeout)
        message = {ws: critical if i % 2 else crossing for i, ws in enumerate(workspaces)}
        order = list(workspaces)
        rng.shuffle(order)
        with common.Daemon(root, env) as daemon:
            wait_ready_and_tidied(daemon, workspaces)
            assert daemon.process is not None
            pid = daemon.process.pid
            sampler = PssSampler(pid)
            sampler.start()
            if not args.no_pause:
                os.kill(pid, signal.SIGSTOP)
            start = time.perf_counter()
            for workspace in order:
                append_locked(workspace, message[workspace])
            appended = time.perf_counter() - start
            if not args.no_pause:
                os.kill(pid, signal.SIGCONT)
            levels = {str(ws): level_of(ws) for ws in workspaces}
            finished: dict[str, common.LogLine] = {}
            limit = time.monotonic() + max(240.0, 4 * ideal)
            while len(finished) < args.workspaces:
                item = daemon.next_log("job_finished", max(1.0, limit - time.monotonic()))
                finished[str(item.record.get("workspace"))] = item
            dispatched = daemon.stamped("summarize_dispatched")
            sampler.done.set()
            sampler.join()
            cpu_by_role = sampler.cpu_by_role()
            idle_limit = 2 * (args.idle_timeout or 60.0) + 60
            shrink_s, idle_pss, idle_count = shrunk_to_zero(pid, idle_limit)
        calls: list[int] = []
        for workspace in workspaces:
            for event in common.read_events(workspace):
                if event.get("type") == "summarize_completed":
                    calls.append(int(event.get("llm_calls") or 0))
            peak_pss = sampler.peak

    last = max(item.at for item in finished.values())
    makespan = last - start
    ratio = makespan / ideal
    outcomes: dict[str, int] = {}
    durations = []
    for item in finished.values():
        outcome = str(item.record.get("outcome"))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        durations.append(float(item.record.get("duration_s") or 0.0))
    last_dispatch = max((d.at for d in dispatched), default=start) - start
    mean_job = sum(durations) / len(durations)
    order_levels = [levels[str(d.record.get("workspace"))] for d in dispatched]
    count_levels = {level: order_levels.count(level) for level in sorted(set(order_levels))}
    last_critical = max(i for i, level in enumerate(order_levels) if level == "critical")
    warning_before = sum(1 for level in order_levels[:last_critical] if level != "critical")
    critical_first = warning_before == 0
    print(
        common.table(
            ("measure", "value"),
            [
                ("workspaces", args.workspaces),
                ("workers", args.workers or "default"),
                ("anthropic.max_concurrent_requests", args.max_concurrent),
                ("fake LLM latency (s)", args.latency),
                ("daemon paused while appending", not args.no_pause),
                ("levels after the appends", count_levels),
                ("drain_seconds", args.drain_seconds if args.drain_seconds is not None else 0.5),
                ("all appends written in (s)", appended),
                ("last summarize_dispatched after first append (s)", last_dispatch),
                ("job duration_s, mean (worker side)", mean_job),
                ("job duration_s, min / max", f"{min(durations):.3f} / {max(durations):.3f}"),
                ("job outcomes", outcomes),
                ("LLM calls per completed job", dict(sorted(Counter(calls).items()))),
                ("ideal ceil(n/slots) x latency (s)", ideal),
                ("makespan (s)", makespan),
                ("peak tree PSS (MB)", peak_pss),
                ("processes in the tree at that peak", sampler.peak_count),
                ("tree CPU during the burst (s), by role", cpu_by_role),
                ("tree CPU during the burst (s)", round(sum(cpu_by_role.values()), 2)),
                ("warning dispatched before the last critical", warning_before),
                ("pool shrunk to zero after the last job (s)", shrink_s),
                ("idle tree PSS after the burst (MB)", idle_pss),
                ("processes in the idle tree", idle_count),
            ],
        )
    )
    print()
    print(
        common.table(
            ("measure", "value", "target", "met"),
            [
                ("makespan / ideal", round(ratio, 3), f"<= {args.target:g}", ratio <= args.target),
                ("critical dispatched first", critical_first, "yes", critical_first),
                (
                    "idle tree PSS after the burst (MB)",
                    round(idle_pss, 1),
                    "<= 60",
                    shrink_s is not None and idle_pss <= 60,
                ),
            ],
        )
    )
    out = common.save(
        f"makespan-{args.workspaces}x{args.latency:g}"
        if args.drain_seconds is None
        else f"makespan-drain{args.drain_seconds:g}",
        {
            "workspaces": args.workspaces,
            "workers": args.workers,
            "max_concurrent_requests": args.max_concurrent,
            "paused": not args.no_pause,
            "latency_s": args.latency,
            "peak_tree_pss_mb": peak_pss,
            "processes_at_peak": sampler.peak_count,
            "cpu_by_role_s": cpu_by_role,
            "shrink_s": shrink_s,
            "idle_tree_pss_mb": idle_pss,
            "idle_process_count": idle_count,
            "dispatch_levels": order_levels,
            "critical_first": critical_first,
            "drain_seconds": args.drain_seconds,
            "appends_s": appended,
            "last_dispatch_s": last_dispatch,
            "job_duration_mean_s": mean_job,
            "job_durations_s": durations,
            "outcomes": outcomes,
            "llm_calls_per_job": calls,
            "ideal_s": ideal,
            "makespan_s": makespan,
            "ratio": ratio,
            "target": args.target,
            "met": ratio <= args.target,
            "loadavg": os.getloadavg(),
        },
    )
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
