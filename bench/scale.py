"""10,000 idle workspaces: start-up against its floors, idle memory and idle CPU.

Each workspace is a folder with a small conversation (6 messages, ~2.4 KB, far below the
trigger), directly under the root (``flat``) or two levels below it (``nested``:
``root/gNNN/wsNNNNN``, 100 workspaces per group). Beside that tree the bench builds two
twins (same layout, same files) and times the yardsticks of ``bench/floors.py`` on them,
in the same run: the *write floor* (per workspace: read the conversation, create
``.memoryd``, write HEARTBEAT.md and state.json by temp file + rename) and the *read
floor* (per workspace: read those three files), both plain pathlib loops. Every
start-up figure is reported in seconds and as a ratio to its floor, because disk timings
on a shared machine move from run to run and only same-run ratios carry.

Per layout, in this order: the write floor on the first twin, a first start of the
daemon (the workspaces have only their conversation), an idle window, the write floor
on the second twin, the read floor on the first twin, a restart on the unchanged
workspaces (state.json and HEARTBEAT.md present and right), the read floor on the second
twin. Each floor is the mean of its two timings, one just before and one just after the
start it measures: the disk drifts within a run too. The read floors come after the
write floors because the first read of a file written and not read since updates its
atime (``relatime``), which the restart's reads pay too. READY is the arrival of
``READY=1`` on a datagram socket passed as ``NOTIFY_SOCKET``, from just before
``Popen``. "Quiet" is the moment, from the start, after which the whole process tree's
CPU time grows by at most one clock tick (10 ms) in each 50 ms reading for 3 s in a row:
the end of the start's work to within a reading. (Readings 0.25 s apart, before, put
"quiet" up to 0.25 s after that end: a third of a fast machine's read floor.) Each
start's log lines also give its phases: the daemon starting (imports and settings
done), discovery, READY and the end of the tidy, from the spawn.

The idle window (``--idle``, after the first start is quiet) measures utime+stime
(``/proc/<pid>/stat``), VmRSS and Pss of the daemon and each descendant (forkserver,
resource tracker, workers). With the default ``rescan_interval`` (300 s) a window of a
minute holds no safety-net rescan; ``--rescan-interval 20`` makes it hold a few, to
measure what each costs (the window's CPU over its rescans; docs/design.md#idle-rescan).

Targets: READY <= 3 x read floor; quiet after a first start <= 2 x write floor; quiet
after a restart on unchanged workspaces <= 3 x read floor; idle tree PSS <= 120 MB
(<= 60 MB at 1 workspace); idle CPU <= 0.2% of one core.

    python bench/scale.py [--workspaces 10000] [--layout flat|nested|both] [--idle 30]
                          [--anthropic] [--under DIR] [--rescan-interval SECONDS]

``--under /dev/shm`` builds the trees on a memory file system, where the floors are all
CPU: the strictest case for the ratios, since memoryd's own Python work is then not
hidden behind the disk.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common as common
import floors

SETTLE_LIMIT = 180.0
SAMPLE = 0.05
"""Seconds between two readings of the daemon tree's CPU time."""
QUIET_TICKS = 1
"""A reading that grew by at most one clock tick (10 ms of CPU: a timer, not a start's
work, which uses a whole core) counts as quiet."""
IDLE_CPU_TARGET = 0.2
"""Percent of one core the daemon's tree may use, idle."""
QUIET_FOR = 3.0
"""Seconds of quiet samples in a row."""


def build(root: Path, count: int, layout: str, conversation: bytes) -> None:
    """``count`` workspaces under ``root``: flat, or two levels deep (100 per group)."""
    for i in range(count):
        relative = f"ws{i:05d}" if layout == "flat" else f"g{i // 100:03d}/ws{i:05d}"
        workspace = root / relative
        workspace.mkdir(parents=True)
        (workspace / "conversation.jsonl").write_bytes(conversation)


def tree_cpu(pid: int) -> dict[int, float]:
    cpu = {}
    for member in [pid, *common.descendants(pid)]:
        try:
            cpu[member] = common.cpu_seconds(member)
        except OSError:
            continue
    return cpu


def quiet_after(daemon: common.Daemon, pid: int) -> float:
    """Seconds from the daemon's start to the first of QUIET_FOR seconds of quiet
    readings: to within SAMPLE (50 ms) of the end of the start's work."""
    deadline = time.perf_counter() + SETTLE_LIMIT
    needed = round(QUIET_FOR / SAMPLE)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    run_start: float | None = None
    run = 0
    last_at, last = time.perf_counter(), sum(tree_cpu(pid).values())
    while run < needed and time.perf_counter() < deadline:
        time.sleep(SAMPLE)
        at, cpu = time.perf_counter(), sum(tree_cpu(pid).values())
        if cpu - last <= QUIET_TICKS * tick + 1e-9:
            run_start = last_at if run == 0 else run_start
            run += 1
        else:
            run = 0
        last_at, last = at, cpu
    assert run_start is not None and run >= needed, "the daemon never went quiet"
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


def start(root: Path, env: dict[str, str]) -> tuple[common.Daemon, dict[str, Any]]:
    """Start a daemon on ``root`` and wait until it is quiet; the daemon (still running)
    and its start-up figures."""
    daemon = common.Daemon(root, env, notify=True).start()
    ready_log = daemon.next_log("daemon_ready", SETTLE_LIMIT)
    ready_s = daemon.wait_notify_ready(10)
    pid = daemon.pid
    rss_at_ready = common.rss_mb(pid)
    quiet_s = quiet_after(daemon, pid)
    figures = {
        "ready_s": ready_s,
        "quiet_s": quiet_s,
        "cpu_s": sum(tree_cpu(pid).values()),
        "tracked": ready_log.record.get("workspaces"),
        "polling": ready_log.record.get("polling"),
        "rss_at_ready_mb": rss_at_ready,
        "log_lines": len(daemon.lines),
        "log_events": sorted({str(line.record.get("event")) for line in daemon.history}),
        "stderr_bytes": len(daemon.stderr),
        # When each line of a start arrived, from the spawn: where the time went.
        "phases_s": {
            str(line.record.get("event")): round(line.at - daemon.started_at, 3)
            for line in daemon.history
        },
        "watches": inotify_watches(pid),
    }
    return daemon, figures


def idle_window(pid: int, seconds: float) -> dict[str, Any]:
    """CPU and memory of the daemon's tree over ``seconds`` of idle."""
    before = tree_cpu(pid)
    peak_rss: dict[int, float] = {}
    pss: dict[int, float] = {}
    per_second: list[float] = []
    window_start = time.perf_counter()
    last = before[pid]
    while time.perf_counter() - window_start < seconds:
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
    processes = []
    for member, cpu_after in after.items():
        cpu = cpu_after - before.get(member, cpu_after)
        processes.append(
            {
                "pid": member,
                "role": "daemon" if member == pid else common.role_of(member, pid),
                "rss_mb_peak": peak_rss.get(member, 0.0),
                "pss_mb_peak": pss.get(member, 0.0),
                "cpu_s": cpu,
                "cpu_percent": 100 * cpu / window,
            }
        )
    return {
        "window_s": window,
        "processes": processes,
        "total_pss_mb": sum(p["pss_mb_peak"] for p in processes),
        "total_rss_mb": sum(p["rss_mb_peak"] for p in processes),
        "total_cpu_percent": sum(p["cpu_percent"] for p in processes),
        "busy_seconds": sum(1 for c in per_second if c >= 0.02),
    }


def run_layout(layout: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Floors, a first start with its idle window, and a restart, on one layout."""
    conversation = b"".join(common.message_line(i, 400) for i in range(6))
    root = folder / layout / "root"
    before, after = folder / layout / "twin-before", folder / layout / "twin-after"
    started = time.perf_counter()
    for tree in (root, before, after):
        build(tree, args.workspaces, layout, conversation)
    create_s = time.perf_counter() - started
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "XDG_CONFIG_HOME": str(folder / "xdg"),
    }
    if args.rescan_interval is not None:
        env["MEMORYD_RESCAN_INTERVAL"] = str(args.rescan_interval)
    if args.anthropic:
        env["MEMORYD_SUMMARIZER__BACKEND"] = "anthropic"
        env["MEMORYD_ANTHROPIC__API_KEY"] = "sk-fake-bench"
    load_before = os.getloadavg()
    # Each floor is timed just before and just after the start it measures, on two
    # twins, and their mean is the yardstick: the disk drifts within a run too.
    write_floors = [floors.write_floor(before)]
    daemon, first = start(root, env)
    try:
        idle = idle_window(daemon.pid, args.idle)
    finally:
        daemon.stop()
    write_floors.append(floors.write_floor(after))
    first["heartbeats"] = sum(1 for _ in root.glob("**/HEARTBEAT.md"))
    first["states"] = sum(1 for _ in root.glob("**/.memoryd/state.json"))
    # The read floors come after the write floors: the first read of a file written
    # since its last read updates its atime (relatime), which is what the restart's
    # reads of HEARTBEAT.md and state.json pay too.
    read_floors = [floors.read_floor(before)]
    again, restart = start(root, env)
    again.stop()
    read_floors.append(floors.read_floor(after))
    load_after = os.getloadavg()
    write_floor = sum(write_floors) / 2
    read_floor = sum(read_floors) / 2
    ratios = {
        "ready": first["ready_s"] / read_floor,
        "quiet": first["quiet_s"] / write_floor,
        "restart_ready": restart["ready_s"] / read_floor,
        "restart_quiet": restart["quiet_s"] / read_floor,
    }
    pss_target = 60 if args.workspaces <= 1 else 120
    met = {
        "ready": ratios["ready"] <= 3,
        "quiet": ratios["quiet"] <= 2,
        "restart_quiet": ratios["restart_quiet"] <= 3,
        "total_pss": idle["total_pss_mb"] <= pss_target,
        "idle_cpu": idle["total_cpu_percent"] <= IDLE_CPU_TARGET,
    }
    return {
        "layout": layout,
        "create_s": create_s,
        "write_floor_s": write_floor,
        "write_floors_s": write_floors,
        "read_floor_s": read_floor,
        "read_floors_s": read_floors,
        "first": first,
        "idle": idle,
        "restart": restart,
        "ratios": ratios,
        "pss_target_mb": pss_target,
        "met": met,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
    }


def report(result: dict[str, Any], workspaces: int) -> str:
    first, restart, idle = result["first"], result["restart"], result["idle"]
    ratios, met = result["ratios"], result["met"]
    head = (
        f"{result['layout']}: {workspaces:,} workspaces (created in {result['create_s']:.1f} s); "
        f"daemon tracked {first['tracked']}; polling roots: {first['polling'] or 'none'}; "
        f"inotify watches {first['watches']:,}; log lines at the first start "
        f"{first['log_lines']}, at the restart {restart['log_lines']}; stderr "
        f"{first['stderr_bytes'] + restart['stderr_bytes']} bytes; load average "
        f"{result['loadavg_before'][0]:.2f} before, {result['loadavg_after'][0]:.2f} after"
    )
    processes = common.table(
        ("process", "pid", "RSS MB (peak)", "PSS MB (peak)", "CPU s in window", "CPU %"),
        [
            (p["role"], p["pid"], p["rss_mb_peak"], p["pss_mb_peak"], p["cpu_s"], p["cpu_percent"])
            for p in idle["processes"]
        ],
    )
    rows = [
        (
            "write floor (s), mean of before / after",
            result["write_floor_s"],
            " / ".join(f"{x:.2f}" for x in result["write_floors_s"]),
            "",
            "",
        ),
        (
            "read floor (s), mean of before / after",
            result["read_floor_s"],
            " / ".join(f"{x:.2f}" for x in result["read_floors_s"]),
            "",
            "",
        ),
        (
            "first start: READY=1 (s)",
            first["ready_s"],
            ratios["ready"],
            "<= 3 x read",
            met["ready"],
        ),
        ("first start: quiet (s)", first["quiet_s"], ratios["quiet"], "<= 2 x write", met["quiet"]),
        ("first start: tree CPU to quiet (s)", first["cpu_s"], "", "", ""),
        ("restart: READY=1 (s)", restart["ready_s"], ratios["restart_ready"], "", ""),
        (
            "restart: quiet (s)",
            restart["quiet_s"],
            ratios["restart_quiet"],
            "<= 3 x read",
            met["restart_quiet"],
        ),
        ("restart: tree CPU to quiet (s)", restart["cpu_s"], "", "", ""),
        ("daemon RSS at READY (MB)", first["rss_at_ready_mb"], "", "", ""),
        (
            "idle tree PSS (MB)",
            idle["total_pss_mb"],
            "",
            f"<= {result['pss_target_mb']}",
            met["total_pss"],
        ),
        (
            f"idle CPU, all processes, {idle['window_s']:.0f} s (%)",
            idle["total_cpu_percent"],
            "",
            f"<= {IDLE_CPU_TARGET}",
            met["idle_cpu"],
        ),
        ("seconds of the window with daemon CPU >= 20 ms", idle["busy_seconds"], "", "", ""),
    ]
    figures = common.table(("measure", "seconds / value", "ratio", "target", "met"), rows)
    phases = "\n".join(
        f"{name}: "
        + ", ".join(
            f"{event.removeprefix('workspaces_').removeprefix('daemon_')} {at:.2f}"
            for event, at in start["phases_s"].items()
            if event in PHASES
        )
        + " s from the spawn"
        for name, start in (("first start", first), ("restart", restart))
    )
    return f"{head}\n\n{processes}\n\n{figures}\n{phases}\n"


PHASES = ("daemon_starting", "workspaces_discovered", "daemon_ready", "workspaces_tidied")
"""The log lines of a start that mark its phases (reported as seconds from the spawn)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--layout", choices=("flat", "nested", "both"), default="both")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument(
        "--anthropic", action="store_true", help="anthropic backend (a fake key; no job runs)"
    )
    parser.add_argument(
        "--rescan-interval",
        type=float,
        help="the daemon's rescan_interval (default: its own, 300 s): a short one puts "
        "safety-net rescans in the idle window",
    )
    parser.add_argument(
        "--under",
        type=Path,
        help="build the trees in this folder (e.g. /dev/shm: a memory file system, where "
        "the floors are all CPU) instead of bench/results/tmp",
    )
    args = parser.parse_args(argv)
    common.install_exit_handlers()
    layouts = ["flat", "nested"] if args.layout == "both" else [args.layout]
    results = []
    with common.scratch("scale", args.under) as folder:
        for layout in layouts:
            result = run_layout(layout, args, folder)
            results.append(result)
            print(report(result, args.workspaces), flush=True)
    out = common.save(
        f"scale-{args.workspaces}",
        {
            "workspaces": args.workspaces,
            "idle_window_s": args.idle,
            "under": str(args.under or common.TMP),
            "inotify": {
                "max_user_watches": int(Path("/proc/sys/fs/inotify/max_user_watches").read_text()),
                "max_user_instances": int(
                    Path("/proc/sys/fs/inotify/max_user_instances").read_text()
                ),
            },
            "targets": {
                "ready": "<= 3 x read floor",
                "quiet": "<= 2 x write floor",
                "restart_quiet": "<= 3 x read floor",
                "idle_tree_pss_mb": "<= 120 (<= 60 at 1 workspace)",
                "idle_cpu": f"<= {IDLE_CPU_TARGET}% of one core",
                "rescan_interval": args.rescan_interval,
            },
            "layouts": results,
        },
    )
    print(f"results: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
