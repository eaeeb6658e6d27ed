"""One bad workspace, or a full disk, never stops the daemon: real daemon processes on
real files (a real 2 MB tmpfs for the full disk), each reproduction as a test."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from daemon_harness import Processes, read_state, wait_until
from writers import line_bytes

EXTRACTIVE = {"MEMORYD_SUMMARIZER__BACKEND": "extractive", "MEMORYD_COALESCE_MS": "20"}


def write_lines(workspace: Path, count: int, start: int = 0, mode: str = "wb") -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    with (workspace / "conversation.jsonl").open(mode) as file:
        file.write(b"".join(line_bytes("w", n) for n in range(start, start + count)))


def counted(workspace: Path, messages: int) -> bool:
    return (read_state(workspace) or {}).get("messages") == messages


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def unwritable(daemon: object, workspace: Path) -> list[dict[str, object]]:
    return daemon.logged("workspace_unwritable", workspace=str(workspace))  # type: ignore[attr-defined, no-any-return]


# ----- symlinks under a root ----------------------------------------------------------------


@pytest.mark.slow
def test_a_symlinked_folder_under_a_root_is_not_followed_nor_counted_unwatched(
    tmp_path: Path, procs: Processes
) -> None:
    """``ln -s elsewhere root/link``: no inotify_limit_reached, the root is not polled,
    and a workspace behind the link is never tracked or written to."""
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    write_lines(root / "ws", 3)
    write_lines(elsewhere / "hidden", 3)
    (root / "link").symlink_to(elsewhere)
    daemon = procs.daemon([root], tmp_path, EXTRACTIVE)
    ready = daemon.wait_ready()
    assert ready["polling"] == []
    assert not daemon.logged("inotify_limit_reached")
    assert ready["workspaces"] == 1
    write_lines(elsewhere / "hidden", 2, start=3, mode="ab")
    write_lines(root / "ws", 2, start=3, mode="ab")
    wait_until(lambda: counted(root / "ws", 5), 10, "the real workspace counted")
    assert not (elsewhere / "hidden" / ".memoryd").exists()
    assert not daemon.logged("workspace_discovered", workspace=str(root / "link" / "hidden"))


@pytest.mark.slow
def test_a_symlinked_events_file_in_one_workspace_does_not_stop_the_daemon(
    tmp_path: Path, procs: Processes
) -> None:
    """``ln -s /elsewhere/x ws/.memoryd/events.jsonl``: the daemon stays up, logs one
    warning for that workspace (not one per event), never writes through the link, and
    goes on serving the other workspace."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    bad, good = root / "bad", root / "good"
    write_lines(bad, 3)
    write_lines(good, 3)
    outside.mkdir()
    (bad / ".memoryd").mkdir()
    (bad / ".memoryd" / "events.jsonl").symlink_to(outside / "x")
    daemon = procs.daemon([root], tmp_path, EXTRACTIVE)
    daemon.wait_ready()
    for n in range(3):
        with (bad / "conversation.jsonl").open("ab") as file:
            file.write(b"not json %d\n" % n)  # a malformed_line event each
        wait_until(partial(counted, bad, 4 + n), 10, "the bad workspace counted")
    write_lines(good, 2, start=3, mode="ab")
    wait_until(lambda: counted(good, 5), 10, "the good workspace counted")
    assert daemon.process.poll() is None  # type: ignore[union-attr]
    warnings = unwritable(daemon, bad)
    assert len(warnings) == 1
    assert warnings[0]["file"] == "events.jsonl"
    assert not (outside / "x").exists()
    assert not unwritable(daemon, good)


@pytest.mark.slow
def test_a_folder_where_state_json_belongs_is_retried_with_back_off_not_in_a_loop(
    tmp_path: Path, procs: Processes
) -> None:
    """``mkdir ws/.memoryd/state.json``: one warning, the daemon idles (no busy loop, no
    log flood) while appends go on, and once the folder is gone state.json is written by
    itself, with one workspace_writable_again."""
    root = tmp_path / "root"
    ws = root / "ws"
    write_lines(ws, 3)
    (ws / ".memoryd" / "state.json").mkdir(parents=True)
    daemon = procs.daemon([root], tmp_path, EXTRACTIVE)
    daemon.wait_ready()
    wait_until(lambda: unwritable(daemon, ws), 10, "the warning")
    before = cpu_seconds(daemon.pid)
    started = time.monotonic()
    for n in range(3, 23):
        write_lines(ws, 1, start=n, mode="ab")
        time.sleep(0.1)  # a writer's pace, not a wait for a condition
    elapsed = time.monotonic() - started
    used = cpu_seconds(daemon.pid) - before
    assert used < 0.5 * elapsed, f"{used:.2f} s of CPU in {elapsed:.2f} s: a busy loop"
    assert len(unwritable(daemon, ws)) == 1
    assert len(daemon.lines) < 80, "the log is flooded"
    (ws / ".memoryd" / "state.json").rmdir()
    wait_until(lambda: counted(ws, 23), 70, "state.json written after the folder went")
    recovered = daemon.wait_log("workspace_writable_again", workspace=str(ws))
    assert recovered["file"] == "state.json"


# ----- a full disk --------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB tmpfs (needs root and mount(8))."""
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(folder: Path) -> Path:
    """Fill the filesystem of ``folder`` to the last byte; the filler file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
        with pytest.raises(OSError) as refused:
            os.write(fd, b"\0")
        assert refused.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_a_full_disk_keeps_the_daemon_up_says_so_once_and_recovers_by_itself(
    tmp_path: Path, procs: Processes, small_tmpfs: Path
) -> None:
    """On a full 2 MB tmpfs the daemon starts, stays up, logs once per workspace what it
    cannot write and why — also for a workspace moved in while the disk is full — and
    writes every state.json by itself once space returns."""
    root = small_tmpfs / "root"
    ws, later = root / "ws", small_tmpfs / "later"
    write_lines(ws, 3)
    write_lines(later, 4)
    filler = fill(small_tmpfs)
    daemon = procs.daemon([root], tmp_path, EXTRACTIVE)
    daemon.wait_ready()
    warning = wait_until(lambda: unwritable(daemon, ws), 10, "the full-disk warning")[0]
    assert warning["error"] == "No space left on device"
    later.rename(root / "later")
    moved = root / "later"
    wait_until(lambda: unwritable(daemon, moved), 10, "the moved-in workspace's warning")
    assert daemon.process.poll() is None  # type: ignore[union-attr]
    assert len(unwritable(daemon, ws)) == 1
    assert len(unwritable(daemon, moved)) == 1
    assert not daemon.logged("job_crashed")

    filler.unlink()
    wait_until(lambda: counted(ws, 3) and counted(moved, 4), 70, "state.json written")
    assert daemon.process.poll() is None  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_symlinked_memoryd_folder_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path, procs: Processes
) -> None:
    """``ln -s victim ws/.memoryd``, the workspace over its trigger: the daemon stays up,
    warns for that workspace, writes nothing into ``victim`` (no state.json, no events,
    no archive, no temp file) and goes on serving the other workspace."""
    root, victim = tmp_path / "root", tmp_path / "victim"
    bad, good = root / "bad", root / "good"
    write_lines(bad, 60)
    write_lines(good, 3)
    victim.mkdir()
    (victim / "state.json").write_text("VICTIM\n")
    (bad / ".memoryd").symlink_to(victim)
    env = {**EXTRACTIVE, "MEMORYD_TOKEN_LIMIT": "3000"}
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    wait_until(lambda: unwritable(daemon, bad), 10, "the warning for the bad workspace")
    write_lines(good, 2, start=3, mode="ab")
    wait_until(lambda: counted(good, 5), 10, "the good workspace counted")
    write_lines(bad, 2, start=60, mode="ab")
    write_lines(good, 2, start=5, mode="ab")
    wait_until(lambda: counted(good, 7), 10, "the good workspace counted again")
    assert daemon.process.poll() is None  # type: ignore[union-attr]
    assert sorted(p.name for p in victim.iterdir()) == ["state.json"]
    assert (victim / "state.json").read_text() == "VICTIM\n"
    assert len(unwritable(daemon, bad)) == 1
