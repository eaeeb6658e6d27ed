"""What a pool worker costs: start time from the forkserver and memory, with and without
the Anthropic SDK preloaded in the forkserver.

Each variant runs in a fresh interpreter (the forkserver's preload list is global):
it starts the forkserver with the daemon's preload list (``memoryd.daemon.processes.preload``),
optionally plus ``anthropic``, then

- times the first worker (the forkserver is still importing its preload list: what the
  first job after the daemon's start could pay at worst),
- times, ``--rounds`` times, a worker started on a fresh executor once the forkserver is
  warm (what the first job after the pool shrank to zero pays),
- with ``--workers`` workers alive, measures each one's Pss idle, then after it imported
  the SDK and built a client (what a worker that ran an anthropic job holds), and the
  time that import took inside a worker,
- measures the Pss of the forkserver and of the resource tracker.

    python bench/workers.py [--workers 4] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import forkserver
from typing import Any

import _common as common


def _idle() -> int:
    return os.getpid()


def _load_sdk() -> tuple[int, float]:
    started = time.perf_counter()
    import anthropic

    anthropic.Anthropic(api_key="bench", base_url="http://127.0.0.1:9")
    return os.getpid(), time.perf_counter() - started


def _executor(context: Any, workers: int) -> ProcessPoolExecutor:
    from memoryd.daemon.worker import worker_init

    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=worker_init,
        initargs=("json", "warning", os.getpid(), None),
    )


def variant(preload_sdk: bool, workers: int, rounds: int) -> dict[str, Any]:
    from memoryd.daemon.processes import forkservers, preload, trackers

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload(preload_sdk))
    started = time.perf_counter()
    forkserver.ensure_running()
    with _executor(context, 1) as executor:
        executor.submit(_idle).result()
    cold = time.perf_counter() - started
    warm = []
    for _ in range(rounds):
        started = time.perf_counter()
        with _executor(context, 1) as executor:
            executor.submit(_idle).result()
            warm.append(time.perf_counter() - started)
    with _executor(context, workers) as executor:
        # Each call waits for the others, so every worker takes one.
        barrier = [executor.submit(time.sleep, 0.3) for _ in range(workers)]
        for future in barrier:
            future.result()
        pids = sorted(common.descendants(os.getpid()))
        worker_pids = [p for p in pids if common.role_of(p, os.getpid()) == "worker"]
        idle_pss = [common.pss_mb(p) for p in worker_pids]
        loads = [executor.submit(_load_sdk) for _ in range(workers * 4)]
        first_use: dict[int, float] = {}
        for pid, seconds in (f.result() for f in loads):
            first_use[pid] = max(first_use.get(pid, 0.0), seconds)
        import_s = sorted(first_use.values())
        sdk_pss = [common.pss_mb(p) for p in worker_pids]
        shared = common.pss_mb(forkservers()[0])
    # Once the workers are gone the forkserver's pages are its own again (an idle daemon).
    wait = time.monotonic() + 10
    while any(common.role_of(p, os.getpid()) == "worker" for p in common.descendants(os.getpid())):
        if time.monotonic() > wait:
            break
        time.sleep(0.05)
    helpers = {
        "forkserver": common.pss_mb(forkservers()[0]),
        "forkserver_with_workers": shared,
        "resource_tracker": common.pss_mb(trackers()[0]),
    }
    return {
        "preload": preload(preload_sdk),
        "first_worker_s": cold,
        "warm_worker_s": warm,
        "worker_pss_idle_mb": idle_pss,
        "worker_pss_after_sdk_mb": sdk_pss,
        "sdk_first_use_in_worker_s": import_s,
        "helpers_pss_mb": helpers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--variant", choices=("memoryd", "sdk"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(variant(args.variant == "sdk", args.workers, args.rounds)))
        return 0
    common.install_exit_handlers()
    results = {}
    for name in ("memoryd", "sdk"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--variant",
                name,
                "--workers",
                str(args.workers),
                "--rounds",
                str(args.rounds),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    rows = []
    for name, r in results.items():
        idle = common.median(r["worker_pss_idle_mb"])
        sdk = common.median(r["worker_pss_after_sdk_mb"])
        rows.append(
            (
                "+ anthropic" if name == "sdk" else "memoryd only",
                r["helpers_pss_mb"]["forkserver"],
                r["helpers_pss_mb"]["resource_tracker"],
                r["first_worker_s"] * 1000,
                common.median(r["warm_worker_s"]) * 1000,
                max(r["warm_worker_s"]) * 1000,
                idle,
                sdk,
                common.median(r["sdk_first_use_in_worker_s"]) * 1000,
            )
        )
    print(
        common.table(
            (
                "forkserver preload",
                "forkserver PSS MB alone",
                "tracker PSS MB",
                "first worker ms",
                "new worker ms (median)",
                "max",
                "worker PSS idle MB",
                "worker PSS after SDK MB",
                "SDK first use in a worker ms",
            ),
            rows,
        )
    )
    print(f"\n{args.workers} workers alive while their Pss is read; {args.rounds} warm starts")
    out_path = common.save("workers", {"workers": args.workers, "variants": results})
    print(f"results: {out_path.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
