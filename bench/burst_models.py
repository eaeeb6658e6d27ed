"""How a burst's jobs should run: one job per worker process, or several per process on
threads. Measured on the job itself, without the daemon.

N workspaces are over their trigger (as in bench/makespan.py: token_limit 10,000, one
crossing message each); each job is ``run_job`` on the anthropic backend against the
fake Messages API (``--latency`` seconds, an answer that keeps every detail, so one
request per job), with ``--slots`` jobs in flight, from a cold pool: no forkserver yet.
Both models use a forkserver that preloads what the daemon's does (``processes.preload``:
memoryd, the SDK and the modules a first job imports), and differ only in how jobs
reach a process:

- ``processes``: a ``ProcessPoolExecutor`` with ``slots`` workers, one job per worker at
  a time (the daemon's pool).
- ``threads``: ``slots / threads`` processes, each running ``threads`` jobs at a time on
  threads, taking the next job from a shared queue as one ends.

Reported: the makespan from the first submit to the last result, its ratio to the ideal
``ceil(N / slots) x latency``, when the first job started (the cold start), and the peak
PSS of the bench's children (forkserver, resource tracker, workers), sampled every 0.2 s.

    python bench/burst_models.py [--workspaces 96] [--latency 4] [--slots 16] [--threads 4]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _common as common
from latency import below_trigger

from memoryd.compaction.job.request import JobRequest, summarizer_env
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings, load_settings
from memoryd.daemon.processes import preload, stop_server, wait_exited

TOKEN_LIMIT = 10_000


def one_job(workspace: Path, settings: Settings, env: dict[str, str]) -> tuple[float, float]:
    """Run the job of ``workspace``; (wall time it started, wall time it ended)."""
    began = time.time()
    result = run_job(JobRequest(workspace=workspace, settings=settings, env=env, force=True))
    assert result.outcome == "completed", result.reason
    return began, time.time()


def lane(jobs: Any, results: Any, threads: int, settings: Settings, env: dict[str, str]) -> None:
    """A worker process of the threads model: ``threads`` jobs at a time until None."""

    def take() -> None:
        while (workspace := jobs.get()) is not None:
            results.put(one_job(workspace, settings, env))
        jobs.put(None)  # the next thread of this process stops too

    with ThreadPoolExecutor(threads) as pool:
        for _ in range(threads):
            pool.submit(take)


class PssPeak(threading.Thread):
    """The peak of the summed PSS of this process's descendants."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            total = sum(common.pss_mb(pid) for pid in common.descendants(os.getpid()))
            self.peak = max(self.peak, total)


def run_model(
    model: str, workspaces: list[Path], slots: int, threads: int, settings: Settings, env: Any
) -> dict[str, Any]:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload(sdk=True))
    sampler = PssPeak()
    sampler.start()
    started = time.time()
    spans: list[tuple[float, float]] = []
    if model == "processes":
        with ProcessPoolExecutor(slots, mp_context=context) as executor:
            futures = [executor.submit(one_job, ws, settings, env) for ws in workspaces]
            spans = [future.result() for future in futures]
    else:
        jobs: Any = context.Queue()
        results: Any = context.Queue()
        for workspace in workspaces:
            jobs.put(workspace)
        jobs.put(None)
        lanes = [
            context.Process(target=lane, args=(jobs, results, threads, settings, env))
            for _ in range(math.ceil(slots / threads))
        ]
        for process in lanes:
            process.start()
        while len(spans) < len(workspaces):
            try:
                spans.append(results.get(timeout=300))
            except queue.Empty:
                raise RuntimeError("a lane stopped answering") from None
        for process in lanes:
            process.join(30)
    sampler.done.set()
    makespan = max(end for _, end in spans) - started
    first = min(begin for begin, _ in spans) - started
    return {"makespan_s": makespan, "first_job_s": first, "peak_pss_mb": sampler.peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=96)
    parser.add_argument("--latency", type=float, default=4.0)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--model", choices=("processes", "threads"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.model:
        return child(args)
    common.install_exit_handlers()
    ideal = math.ceil(args.workspaces / args.slots) * args.latency
    rows = []
    results: dict[str, list[dict[str, Any]]] = {}
    with common.fake_anthropic(args.latency, ("--lossy", "0")) as url:
        for model in ("processes", "threads", "processes", "threads"):
            with common.scratch(f"burst-{model}") as folder:
                # A fresh interpreter per run: a cold forkserver, nothing imported yet.
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        f"--model={model}",
                        f"--url={url}",
                        f"--folder={folder}",
                        f"--workspaces={args.workspaces}",
                        f"--latency={args.latency}",
                        f"--slots={args.slots}",
                        f"--threads={args.threads}",
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            results.setdefault(model, []).append(figures)
            rows.append(
                (
                    model,
                    figures["makespan_s"],
                    figures["makespan_s"] / ideal,
                    figures["first_job_s"],
                    figures["peak_pss_mb"],
                )
            )
    print(
        f"{args.workspaces} jobs, {args.slots} in flight, fake LLM {args.latency:g} s, "
        f"threads model: {args.threads} per process; ideal {ideal:g} s; "
        f"load average {os.getloadavg()[0]:.2f}\n"
    )
    print(
        common.table(
            ("model", "makespan (s)", "/ ideal", "first job started (s)", "peak PSS (MB)"), rows
        )
    )
    out_path = common.save("burst_models", {"ideal_s": ideal, "args": vars(args), **results})
    print(f"\nresults: {out_path.relative_to(common.REPO)}")
    return 0


def child(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    crossing = common.message_line(10**6, 1024, role="user")
    workspaces = []
    for i in range(args.workspaces):
        workspace = folder / f"ws{i:04d}"
        workspace.mkdir(parents=True)
        below_trigger(workspace / "conversation.jsonl", crossing)
        with (workspace / "conversation.jsonl").open("ab") as conversation:
            conversation.write(crossing)
        workspaces.append(workspace)
    env = {
        "MEMORYD_TOKEN_LIMIT": str(TOKEN_LIMIT),
        "MEMORYD_SUMMARIZER__BACKEND": "anthropic",
        "MEMORYD_ANTHROPIC__BASE_URL": args.url,
        "MEMORYD_ANTHROPIC__API_KEY": "sk-fake-bench",
        "HOME": str(folder),
        "XDG_CONFIG_HOME": str(folder / "xdg"),
    }
    settings = load_settings(None, {}, env).settings
    figures = run_model(
        args.model, workspaces, args.slots, args.threads, settings, summarizer_env(env)
    )
    wait_exited(stop_server(force=True) or [])
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
