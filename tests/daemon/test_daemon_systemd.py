"""The daemon under systemd: sd_notify on a real socket, the unit file, a stop that leaves
no process behind, and a notify socket that fails."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from daemon_harness import (
    Processes,
    children,
    cmdline,
    group_members,
    pool_workers,
    read_state,
    wait_until,
)
from daemon_workspaces import (
    append_lines,
    write_lines,
)
from structlog.testing import capture_logs

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "memoryd.service"


# ----- 6. sd_notify -------------------------------------------------------------------------


@pytest.mark.slow
def test_sd_notify_ready_after_the_scan_status_watchdog_pings_and_stopping(
    tmp_path: Path, procs: Processes
) -> None:
    """On a real AF_UNIX datagram socket set as NOTIFY_SOCKET: READY=1 arrives once the
    initial scan is done (the STATUS= line after it already counts every workspace; their
    state files follow), WATCHDOG=1 comes every half WATCHDOG_USEC, and STOPPING=1 arrives
    at SIGTERM."""
    root = tmp_path / "root"
    for name in ("a", "b"):
        write_lines(root / name, "w", 3)
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    address = folder / f"memoryd-notify-{os.getpid()}-{time.monotonic_ns()}.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(address))
    sock.settimeout(0.2)
    received: list[tuple[float, str, bool]] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            message = data.decode()
            states = all(read_state(root / n) is not None for n in ("a", "b"))
            received.append((time.monotonic(), message, states))

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        env = {
            "NOTIFY_SOCKET": str(address),
            "WATCHDOG_USEC": "1000000",
            "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        }
        daemon = procs.daemon([root], tmp_path, env)
        wait_until(lambda: any(m == "READY=1" for _, m, _ in received), 30, "READY=1")
        ready_at = next(t for t, m, _ in received if m == "READY=1")
        wait_until(
            lambda: sum(m == "WATCHDOG=1" and t > ready_at for t, m, _ in received) >= 4,
            10,
            "four WATCHDOG=1 pings after READY=1",
        )
        daemon.send(signal.SIGTERM)
        wait_until(lambda: any(m == "STOPPING=1" for _, m, _ in received), 10, "STOPPING=1")
        assert daemon.wait_exit(10) == 0
    finally:
        stop.set()
        listener.join(5)
        sock.close()
        address.unlink(missing_ok=True)

    messages = [m for _, m, _ in received]
    ready = messages.index("READY=1")
    assert messages.count("READY=1") == 1
    assert received[-1][2], "the state files of the scanned workspaces were never written"
    statuses = [m for m in messages[ready:] if m.startswith("STATUS=")]
    assert statuses and statuses[0] == "STATUS=watching 2 workspaces, 0 summarizing"
    stopping = messages.index("STOPPING=1")
    assert stopping > ready
    pings = [t for t, m, _ in received[ready:stopping] if m == "WATCHDOG=1"]
    assert len(pings) >= 4
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) < 1.0, f"a watchdog gap of {max(gaps):.2f} s (the limit is 1 s)"


# ----- 9. the systemd unit ------------------------------------------------------------------


def test_systemd_unit_verifies_and_has_the_required_settings(tmp_path: Path) -> None:
    """``systemd-analyze verify --user`` accepts systemd/memoryd.service without a word on
    stderr, and the unit is Type=notify with WatchdogSec, KillMode=mixed,
    Restart=on-failure and a TimeoutStopSec above the default shutdown_timeout (30 s)."""
    text = UNIT.read_text()
    keys: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            keys[key.strip()] = value.strip()
    assert keys["Type"] == "notify"
    assert int(keys["WatchdogSec"]) > 0
    assert keys["KillMode"] == "mixed"
    assert keys["Restart"] == "on-failure"
    assert float(keys["TimeoutStopSec"]) > 30
    assert "%h/.local/bin/memoryd run" in keys["ExecStart"]

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit's syntax is not verified")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    home = tmp_path / "home"
    binary = home / ".local" / "bin" / "memoryd"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    result = subprocess.run(
        [analyze, "verify", "--user", str(UNIT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stderr == ""
    assert result.returncode == 0


# ----- stopping cleanly under systemd ---------------------------------------------------------


@pytest.mark.slow
def test_a_stop_leaves_no_process_for_systemd_to_kill_and_a_workers_change_is_info(
    tmp_path: Path, procs: Processes
) -> None:
    """systemd (KillMode=mixed) SIGKILLs whatever is left in the unit once the daemon has
    exited: after a SIGTERM nothing of the daemon's process group is alive — no worker,
    no forkserver, no resource tracker (a job starts them). Before that, a SIGHUP that
    changes ``workers`` resizes the pool, logged at info (pool_resized), not as a crash
    (pool_rebuilt)."""
    root = tmp_path / "root"
    write_lines(root / "ws", "w", 3)
    config = tmp_path / "memoryd.toml"
    config.write_text("workers = 2\ntoken_limit = 3000\n")
    env = {"MEMORYD_SUMMARIZER__BACKEND": "extractive"}
    daemon = procs.daemon([root], tmp_path, env, config=config)
    daemon.wait_ready()
    assert daemon.logged("workspaces_discovered", workspaces=1), "the workspace tracked"
    append_lines(root / "ws", "w", 3, 50)
    daemon.wait_log("job_finished", outcome="completed")
    wait_until(
        lambda: len(group_members(daemon.pid)) >= 4,
        10,
        "daemon, forkserver, resource tracker, worker",
    )

    config.write_text("workers = 3\ntoken_limit = 3000\n")
    daemon.send(signal.SIGHUP)
    resized = daemon.wait_log("pool_resized")
    assert (resized["level"], resized["workers"]) == ("info", 3)
    assert not daemon.logged("pool_rebuilt")

    pgid = daemon.pid
    daemon.send(signal.SIGTERM)
    assert daemon.wait_exit(15) == 0
    assert group_members(pgid) == []


def test_a_failing_notify_socket_is_reported_once(tmp_path: Path) -> None:
    """NOTIFY_SOCKET set but unreachable: notify returns False and logs sd_notify_failed
    once, not at every watchdog ping; without NOTIFY_SOCKET nothing is logged."""
    from memoryd.daemon import systemd

    env = {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")}
    with capture_logs() as logs:
        results = [systemd.notify("WATCHDOG=1", env) for _ in range(5)]
        assert systemd.notify("READY=1", {}) is False
    assert results == [False] * 5
    failed = [r for r in logs if r["event"] == "sd_notify_failed"]
    assert len(failed) == 1
    assert (failed[0]["log_level"], failed[0]["message"]) == ("warning", "WATCHDOG")
    assert failed[0]["error"] == "No such file or directory"


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_after_a_job_stops_within_seconds(
    tmp_path: Path, procs: Processes
) -> None:
    """``timeout`` and a terminal signal the whole process group: the forkserver dies of
    SIGTERM, the executor then reads its worker as exited although the worker (which
    ignores SIGTERM) runs on holding the resource tracker's pipe. The stop must still kill
    that worker and end within seconds, exit 0, leaving nothing of the group alive."""
    root = tmp_path / "root"
    write_lines(root / "ws", "w", 45)
    env = {"MEMORYD_SUMMARIZER__BACKEND": "extractive", "MEMORYD_TOKEN_LIMIT": "3000"}
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    daemon.wait_log("job_finished")
    wait_until(lambda: pool_workers(daemon.pid), 20, "a pool worker (it outlives its job)")

    workers = pool_workers(daemon.pid)
    (forkserver,) = [
        pid for pid in children(daemon.pid) if "multiprocessing.forkserver" in cmdline(pid)
    ]

    # The group's signal reaches the forkserver first here, so the executor has surely
    # seen it die (and given up on its workers) before the daemon stops.
    os.kill(forkserver, signal.SIGTERM)
    wait_until(lambda: _exited(forkserver), 10, "the forkserver to die")
    assert all(Path(f"/proc/{pid}").exists() for pid in workers)
    pgid = daemon.pid
    os.killpg(pgid, signal.SIGTERM)
    assert daemon.wait_exit(10) == 0
    wait_until(lambda: group_members(pgid) == [], 5, "every process of the group gone")


def _exited(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
