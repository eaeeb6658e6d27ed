"""What the metrics endpoint costs an idle daemon: PSS and CPU, with and without it.

The daemon (``memoryd run``, extractive backend) watches one root of ``--workspaces``
small workspaces. Each run starts it, waits for READY and until its CPU stops growing,
then measures ``--idle`` seconds: the daemon process's Pss (``/proc/PID/smaps_rollup``,
the median of one sample a second), its utime+stime, and the context switches of all
its threads (``/proc/PID/task/*/status``: each wakeup of a sleeping thread is one).
Modes alternate, ``--rounds`` times: metrics off; ``metrics_listen = "127.0.0.1:0"``
with no scrape; the same with a scrape every 15 s (Prometheus's default interval is
60 s). After that window, 200 back-to-back scrapes give the CPU of one scrape. The
workers are not counted: metrics live in the daemon process only.

Target: the endpoint adds at most 5 MB of PSS and nothing to idle CPU.

    python bench/metrics_cost.py [--workspaces 100] [--idle 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

import _common as common

SCRAPE_EVERY = 15.0
BURST = 200
"""Back-to-back scrapes after the window, to measure the CPU of one (10 ms clock ticks)."""


def wakeups(pid: int) -> int:
    """Context switches of every thread of ``pid`` so far (each wakeup of a thread is one)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def settle(pid: int, timeout: float = 120) -> None:
    """Wait until the process used less than 10 ms of CPU in one second."""
    deadline = time.monotonic() + timeout
    last = common.cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = common.cpu_seconds(pid)
        if now - last < 0.01:
            return
        last = now


def measure(root: Path, mode: str, idle: float) -> dict[str, Any]:
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "MEMORYD_LOG_LEVEL": "info",
    }
    if mode != "off":
        env["MEMORYD_METRICS_LISTEN"] = "127.0.0.1:0"
    with common.Daemon(root, env) as daemon:
        port = int(daemon.wait_log("metrics_listening", 60)["port"]) if mode != "off" else 0
        daemon.wait_ready(60)
        pid = daemon.pid
        settle(pid)
        if port:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
            settle(pid)
        cpu_start = common.cpu_seconds(pid)
        switches_start = wakeups(pid)
        started = time.monotonic()
        pss: list[float] = []
        scrapes = 0
        next_scrape = started + SCRAPE_EVERY / 2
        while time.monotonic() - started < idle:
            time.sleep(1.0)
            pss.append(common.pss_mb(pid))
            if mode == "scraped" and time.monotonic() >= next_scrape:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    r.read()
                scrapes += 1
                next_scrape += SCRAPE_EVERY
        cpu = common.cpu_seconds(pid) - cpu_start
        switches = wakeups(pid) - switches_start
        window = time.monotonic() - started
        burst_ms = 0.0
        if mode == "scraped":
            before = common.cpu_seconds(pid)
            for _ in range(BURST):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    r.read()
            burst_ms = 1000 * (common.cpu_seconds(pid) - before) / BURST
    return {
        "mode": mode,
        "pss_mb": round(statistics.median(pss), 2),
        "cpu_s": round(cpu, 3),
        "wakeups_per_s": round(switches / window, 2),
        "window_s": round(window, 1),
        "scrapes": scrapes,
        "cpu_ms_per_scrape": round(burst_ms, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workspaces", type=int, default=100)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    common.install_exit_handlers()
    runs: list[dict[str, Any]] = []
    with common.scratch("metrics-cost") as root:
        for index in range(args.workspaces):
            common.write_conversation(root / f"ws{index:04d}" / "conversation.jsonl", 4096)
        for _ in range(args.rounds):
            for mode in ("off", "listening", "scraped"):
                runs.append(measure(root, mode, args.idle))
                print(runs[-1])
    by_mode = {m: [r for r in runs if r["mode"] == m] for m in ("off", "listening", "scraped")}
    pss = {m: statistics.median(r["pss_mb"] for r in rs) for m, rs in by_mode.items()}
    cpu = {m: statistics.median(r["cpu_s"] for r in rs) for m, rs in by_mode.items()}
    wake = {m: statistics.median(r["wakeups_per_s"] for r in rs) for m, rs in by_mode.items()}
    per_scrape_ms = statistics.median(r["cpu_ms_per_scrape"] for r in by_mode["scraped"])
    print()
    print(
        common.table(
            (
                "mode",
                "daemon PSS MB (median)",
                f"daemon CPU s in {args.idle:g} s idle",
                "thread wakeups per s",
            ),
            [(m, pss[m], cpu[m], wake[m]) for m in by_mode],
        )
    )
    added = pss["listening"] - pss["off"]
    print(f"\nPSS added by the endpoint: {added:.2f} MB (target <= 5 MB: {added <= 5})")
    print(f"idle CPU added, no scrape: {cpu['listening'] - cpu['off']:.3f} s")
    print(f"wakeups per second added, no scrape: {wake['listening'] - wake['off']:.2f}")
    print(
        f"CPU per scrape ({args.workspaces} workspaces, {BURST} in a row): {per_scrape_ms:.2f} ms"
    )
    path = common.save(
        "metrics_cost",
        {
            "workspaces": args.workspaces,
            "idle_s": args.idle,
            "runs": runs,
            "pss_added_mb": round(added, 2),
            "cpu_per_scrape_ms": round(per_scrape_ms, 2),
        },
    )
    print(f"\nraw figures: {path}")


if __name__ == "__main__":
    main()
