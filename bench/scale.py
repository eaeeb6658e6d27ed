"""10,000 workspaces under one root: time to READY, idle memory and idle CPU.

Each workspace is a folder with a small conversation (6 messages, ~2.4 KB, far below
the trigger). The daemon starts with ``NOTIFY_SOCKET`` pointing at a datagram socket of
the bench; READY is the arrival of ``READY=1`` measured from just before ``Popen``.
A second daemon is then started on the same root (state.json and HEARTBEAT.md now
exist) and its READY is timed too. After READY the daemon still tidies HEARTBEAT.md
files (200 per loop step); the bench
waits until its CPU time stops growing (< 20 ms in a second, three seconds running, at
most 120 s) — the "settle" time — and then measures, over an idle window of 30 s,
utime+stime (``/proc/<pid>/stat``) and VmRSS (``/proc/<pid>/status``) of the daemon
and of each descendant (forkserver, resource tracker, pool workers); Pss too, since
forkserver children share pages. The window holds
one periodic rescan (``rescan_interval`` 30 s), which is counted, not avoided.

"Quiet" is the moment, counted from the start, after which the whole process tree uses
under 5% of one core in each of three consecutive seconds (sampled once a second from
READY on); it is measured at the first start and at the restart.

Targets: READY <= 5 s, quiet <= 15 s after the start and <= 8 s after a restart on
unchanged workspaces; idle tree PSS (daemon, forkserver, resource tracker, workers)
<= 120 MB at 10,000 workspaces and <= 60 MB at 1; idle CPU near zero.

    python bench/scale.py [--workspaces 10000] [--idle 30] [--anthropic]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common as common

SETTLE_LIMIT = 120.0
QUIET_SHARE = 0.05
"""Below 5% of one core in a second counts as quiet."""
QUIET_RUN = 3


def quiet_after(daemon: common.Daemon, pid: int) -> float:
    """Seconds from the daemon's start to the first of QUIET_RUN quiet seconds in a row."""
    deadline = time.perf_counter() + SETTLE_LIMIT
    run_start: float | None = None
    run = 0
    last_at, last = time.perf_counter(), sum(tree_cpu(pid).values())
    while run < QUIET_RUN and time.perf_counter() < deadline:
        time.sleep(1.0)
        at, cpu = time.perf_counter(), sum(tree_cpu(pid).values())
        if cpu - last < QUIET_SHARE * (at - last_at):
            run_start = last_at if run == 0 else run_start
            run += 1
        else:
            run = 0
        last_at, last = at, cpu
    assert run_start is not None
    return run_start - daemon.started_at


def inotify_watches(pid: int) -> int:
    """inotify watches held by ``pid`` (``inotify wd:`` lines of its fdinfo)."""
    total = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        total += text.count("inotify wd:")
    return total


def tree_cpu(pid: int) -> dict[int, float]:
    cpu = {}
    for member in [pid, *common.descendants(pid)]:
        try:
            cpu[member] = common.cpu_seconds(member)
        except OSError:
            continue
    return cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument(
        "--anthropic", action="store_true", help="anthropic backend (a fake key; no job runs)"
    )
    args = parser.parse_args(argv)
    common.install_exit_handlers()

    max_watches = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    max_instances = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    conversation = b"".join(common.message_line(i, 400) for i in range(6))
    with common.scratch("scale") as folder:
        root = folder / "root"
        started = time.perf_counter()
        for i in range(args.workspaces):
            workspace = root / f"ws{i:05d}"
            workspace.mkdir(parents=True)
            (workspace / "conversation.jsonl").write_bytes(conversation)
        create_s = time.perf_counter() - started
        env = {
            "MEMORYD_SUMMARIZER__BACKEND": "extractive",
            "XDG_CONFIG_HOME": str(folder / "xdg"),
        }
        if args.anthropic:
            env["MEMORYD_SUMMARIZER__BACKEND"] = "anthropic"
            env["MEMORYD_ANTHROPIC__API_KEY"] = "sk-fake-bench"
        with common.Daemon(root, env, notify=True) as daemon:
            assert daemon.process is not None
            pid = daemon.process.pid
            ready_log = daemon.next_log("daemon_ready", 120)
            # The datagram may trail the log line a little.
            ready_s = daemon.wait_notify_ready(10)
            ready_log_s = ready_log.at - daemon.started_at
            tracked = ready_log.record.get("workspaces")
            polling = ready_log.record.get("polling")
            rss_at_ready = common.rss_mb(pid)
            quiet_s = quiet_after(daemon, pid)
            settle_s = quiet_s - ready_s
            # CPU is steadier than wall time on a shared machine: what the start cost.
            start_cpu_s = sum(tree_cpu(pid).values())
            heartbeats = sum(1 for _ in root.glob("*/HEARTBEAT.md"))

            watches = inotify_watches(pid)
            before = tree_cpu(pid)
            peak_rss: dict[int, float] = {}
            pss: dict[int, float] = {}
            per_second: list[float] = []
            window_start = time.perf_counter()
            last = before[pid]
            while time.perf_counter() - window_start < args.idle:
                for member in before:
                    try:
                        peak_rss[member] = max(peak_rss.get(member, 0.0), common.rss_mb(member))
                        pss[member] = max(pss.get(member, 0.0), common.pss_mb(member))
                    except OSError:
                        continue
                time.sleep(1.0)
                now = common.cpu_seconds(pid)
                per_second.append(now - last)
                last = now
            window = time.perf_counter() - window_start
            after = tree_cpu(pid)
            roles = {
                member: ("daemon" if member == pid else common.role_of(member, pid))
                for member in after
            }
            stderr_bytes = len(daemon.stderr)
            notes = [text for _at, text in daemon.notes]
        # A restart on the same root: state.json and HEARTBEAT.md are there now.
        with common.Daemon(root, env, notify=True) as again:
            again.next_log("daemon_ready", 120)
            restart_ready_s = again.wait_notify_ready(10)
            assert again.process is not None
            restart_quiet_s = quiet_after(again, again.process.pid)
            restart_cpu_s = sum(tree_cpu(again.process.pid).values())

    processes: list[dict[str, Any]] = []
    for member, role in roles.items():
        cpu = after[member] - before.get(member, after[member])
        processes.append(
            {
                "pid": member,
                "role": role,
                "rss_mb_peak": peak_rss.get(member, 0.0),
                "pss_mb_peak": pss.get(member, 0.0),
                "cpu_s": cpu,
                "cpu_percent": 100 * cpu / window,
            }
        )
    daemon_row = next(p for p in processes if p["role"] == "daemon")
    total_rss = sum(p["rss_mb_peak"] for p in processes)
    total_pss = sum(p["pss_mb_peak"] for p in processes)
    busy_seconds = sum(1 for c in per_second if c >= 0.02)
    total_cpu_pct = sum(p["cpu_percent"] for p in processes)
    pss_target = 60 if args.workspaces <= 1 else 120
    met = {
        "ready": ready_s <= 5,
        "quiet": quiet_s <= 15,
        "restart_quiet": restart_quiet_s <= 8,
        "total_pss": total_pss <= pss_target,
        "idle_cpu": total_cpu_pct < 2.0,
    }
    print(
        f"{args.workspaces:,} workspaces created in {create_s:.1f} s; daemon tracked {tracked}; "
        f"polling roots: {polling or 'none'}"
    )
    print(f"daemon stderr: {stderr_bytes:,} bytes")
    print(
        f"inotify: max_user_watches={max_watches:,}, max_user_instances={max_instances}, "
        f"watches held by the daemon={watches:,}\n"
    )
    print(
        common.table(
            ("process", "pid", "RSS MB (peak)", "PSS MB (peak)", "CPU s in window", "CPU %"),
            [
                (
                    p["role"],
                    p["pid"],
                    p["rss_mb_peak"],
                    p["pss_mb_peak"],
                    p["cpu_s"],
                    p["cpu_percent"],
                )
                for p in processes
            ],
        )
    )
    print()
    print(
        common.table(
            ("measure", "value", "target", "met"),
            [
                ("READY=1 after start (s)", ready_s, "<= 5", met["ready"]),
                ("daemon_ready log line after start (s)", ready_log_s, "", ""),
                ("quiet (< 5% CPU) after start (s)", quiet_s, "<= 15", met["quiet"]),
                ("READY=1 on a restart (state files present) (s)", restart_ready_s, "", ""),
                ("quiet after a restart (s)", restart_quiet_s, "<= 8", met["restart_quiet"]),
                ("settle: quiet after READY (s)", settle_s, "", ""),
                ("CPU from start to quiet (s)", start_cpu_s, "", ""),
                ("CPU from restart to quiet (s)", restart_cpu_s, "", ""),
                ("daemon RSS at READY (MB)", rss_at_ready, "", ""),
                ("daemon idle RSS peak (MB)", daemon_row["rss_mb_peak"], "", ""),
                ("daemon + children idle RSS (MB)", total_rss, "", ""),
                (
                    "daemon + children idle PSS (MB)",
                    total_pss,
                    f"<= {pss_target}",
                    met["total_pss"],
                ),
                (
                    f"idle CPU, all processes, {window:.0f} s (%)",
                    total_cpu_pct,
                    "near 0 (< 2)",
                    met["idle_cpu"],
                ),
                ("seconds of the window with daemon CPU >= 20 ms", busy_seconds, "", ""),
            ],
        )
    )
    out = common.save(
        f"scale-{args.workspaces}",
        {
            "workspaces": args.workspaces,
            "tracked": tracked,
            "polling_roots": polling,
            "create_s": create_s,
            "ready_s": ready_s,
            "ready_log_s": ready_log_s,
            "restart_ready_s": restart_ready_s,
            "quiet_s": quiet_s,
            "restart_quiet_s": restart_quiet_s,
            "daemon_cpu_per_second_s": per_second,
            "busy_seconds": busy_seconds,
            "total_pss_mb": total_pss,
            "settle_s": settle_s,
            "start_cpu_s": start_cpu_s,
            "restart_cpu_s": restart_cpu_s,
            "heartbeats_written": heartbeats,
            "rss_at_ready_mb": rss_at_ready,
            "idle_window_s": window,
            "processes": processes,
            "total_rss_mb": total_rss,
            "total_cpu_percent": total_cpu_pct,
            "inotify": {
                "max_user_watches": max_watches,
                "max_user_instances": max_instances,
                "daemon_watches": watches,
            },
            "notify_messages": notes[:20],
            "daemon_stderr_bytes": stderr_bytes,
            "targets": {
                "ready_s": 5,
                "quiet_s": 15,
                "restart_quiet_s": 8,
                "idle_tree_pss_mb": pss_target,
                "idle_cpu": "near zero (< 2% of one core)",
            },
            "met": met,
        },
    )
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
