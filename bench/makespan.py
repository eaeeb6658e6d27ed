"""Pool makespan: 200 workspaces crossing the trigger at once, fake LLM at fixed latency.

The fake Messages API (``tests/fake_anthropic.py --latency L --echo``) runs as a
subprocess; the daemon uses the ``anthropic`` backend pointed at it, ``workers`` 2.
The workspaces are created below the trigger before the daemon starts (token_limit
10,000, as in bench/latency.py). Once the daemon is READY and every HEARTBEAT.md is
tidied, one ~1 KB message is appended to each of them as fast as possible; the makespan
runs from just before the first append to the arrival of the last ``job_finished`` log
line. Ideal: ``ceil(200 / workers) x latency``.

Target: makespan <= 1.2x ideal.

    python bench/makespan.py [--workspaces 200] [--latency 0.5] [--workers 2]
                             [--drain-seconds D]   (default: the daemon's own, 0.5 s)
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import _common as common
from latency import append_locked, below_trigger, wait_ready_and_tidied

TOKEN_LIMIT = 10_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--drain-seconds", type=float, default=None)
    args = parser.parse_args(argv)
    common.install_exit_handlers()

    crossing = common.message_line(10**6, 1024, role="user")
    ideal = math.ceil(args.workspaces / args.workers) * args.latency
    with common.scratch("makespan") as folder, common.fake_anthropic(args.latency) as url:
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
            "MEMORYD_WORKERS": str(args.workers),
            "XDG_CONFIG_HOME": str(folder / "xdg"),
        }
        if args.drain_seconds is not None:
            env["MEMORYD_DRAIN_SECONDS"] = str(args.drain_seconds)
        with common.Daemon(root, env) as daemon:
            wait_ready_and_tidied(daemon, workspaces)
            start = append_locked(workspaces[0], crossing)
            for workspace in workspaces[1:]:
                append_locked(workspace, crossing)
            appended = time.perf_counter() - start
            finished: dict[str, common.LogLine] = {}
            limit = time.monotonic() + max(240.0, 4 * ideal)
            while len(finished) < args.workspaces:
                item = daemon.next_log("job_finished", max(1.0, limit - time.monotonic()))
                finished[str(item.record.get("workspace"))] = item
            dispatched = daemon.stamped("summarize_dispatched")

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
    print(
        common.table(
            ("measure", "value"),
            [
                ("workspaces", args.workspaces),
                ("workers", args.workers),
                ("fake LLM latency (s)", args.latency),
                ("drain_seconds", args.drain_seconds if args.drain_seconds is not None else 0.5),
                ("all appends written in (s)", appended),
                ("last summarize_dispatched after first append (s)", last_dispatch),
                ("job duration_s, mean (worker side)", mean_job),
                ("job duration_s, min / max", f"{min(durations):.3f} / {max(durations):.3f}"),
                ("job outcomes", outcomes),
                ("ideal ceil(n/workers) x latency (s)", ideal),
                ("makespan (s)", makespan),
            ],
        )
    )
    print()
    print(
        common.table(
            ("measure", "value", "target", "met"),
            [("makespan / ideal", round(ratio, 3), "<= 1.2", ratio <= 1.2)],
        )
    )
    out = common.save(
        "makespan" if args.drain_seconds is None else f"makespan-drain{args.drain_seconds:g}",
        {
            "workspaces": args.workspaces,
            "workers": args.workers,
            "latency_s": args.latency,
            "drain_seconds": args.drain_seconds,
            "appends_s": appended,
            "last_dispatch_s": last_dispatch,
            "job_duration_mean_s": mean_job,
            "job_durations_s": durations,
            "outcomes": outcomes,
            "ideal_s": ideal,
            "makespan_s": makespan,
            "ratio": ratio,
            "target": 1.2,
            "met": ratio <= 1.2,
        },
    )
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
