"""``memoryd status --watch``: the frame (pure), and the real command on a pty and a pipe."""

from __future__ import annotations

import contextlib
import io
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import WorkspaceFactory, make_message
from daemon_harness import clean_env, wait_until

from memoryd.conversation.lines import append_message
from memoryd.status.watch import ago, last_job, render_frame, shorten_path, usage_bar, watch

NOW = 1_795_000_000.0  # 2026-11-19T...


def row(name: str, ratio: float, level: str, **extra: Any) -> dict[str, Any]:
    return {
        "workspace": name,
        "usage_ratio": ratio,
        "level": level,
        "strategy": "narrative",
        "summarizing": False,
        "last_summary_at": None,
        "heartbeat": {"status": "idle", "last_result": None, "last_error": None},
        **extra,
    }


def test_usage_bar_fills_in_proportion_and_stays_in_bounds() -> None:
    assert usage_bar(0.5, 10) == "[█████░░░░░]"
    assert usage_bar(0.0, 4, fancy=False) == "[----]"
    assert usage_bar(1.7, 4, fancy=False) == "[####]"


def test_ago_counts_in_the_largest_whole_unit() -> None:
    assert ago(None, NOW) == "never"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(NOW - 125))
    assert ago(stamp, NOW) == "2m ago"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(NOW - 3 * 86_400))
    assert ago(stamp, NOW) == "3d ago"


def test_last_job_shows_the_result_or_the_error() -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(NOW - 30))
    done = row("a", 0.4, "normal", last_summary_at=stamp)
    done["heartbeat"] = {"status": "completed", "last_result": "replaced 9 messages"}
    assert last_job(done, NOW) == "30s ago: replaced 9 messages"
    failed = row("b", 0.9, "critical")
    failed["heartbeat"] = {"status": "failed", "last_error": "rate limited"}
    assert last_job(failed, NOW) == "failed: rate limited"


def test_frame_has_one_line_per_workspace_cut_to_the_width() -> None:
    rows = [row("/agents/alpha", 0.25, "normal"), row("/agents/beta", 0.9, "critical")]
    lines = render_frame(rows, NOW, 100, fancy=False)
    assert lines[0].startswith("memoryd status: 2 workspaces, ")
    assert lines[1].split()[:2] == ["WORKSPACE", "USAGE"]
    assert "[#####---------------]" in lines[2] and " 25%" in lines[2]
    assert "critical" in lines[3]
    narrow = render_frame(rows, NOW, 60, fancy=False)
    assert all(len(line) <= 60 for line in narrow)
    assert "[##--------]" in narrow[2], "a narrow terminal gets a narrower bar"
    coloured = render_frame(rows, NOW, 200, fancy=True, colour=True)
    assert "\x1b[31mcritical\x1b[0m" in coloured[3]
    assert render_frame(rows[:1], NOW, 60, fancy=False)[0].startswith(
        "memoryd status: 1 workspace, "
    )


def test_watch_redraws_in_place_on_a_terminal_and_in_blocks_otherwise() -> None:
    frames = iter([[row("/a", 0.1, "normal")], [row("/a", 0.75, "warning")]])
    screen = io.StringIO()
    assert watch(lambda: next(frames), screen, 0, is_tty=True, frames=2, sleep=lambda _: None) == 0
    text = screen.getvalue()
    assert text.count("\x1b[H") == 2 and text.endswith("\x1b[?25h")
    frames = iter([[row("/a", 0.1, "normal")], [row("/a", 0.75, "warning")]])
    plain = io.StringIO()
    watch(lambda: next(frames), plain, 0, is_tty=False, frames=2, sleep=lambda _: None)
    blocks = plain.getvalue().strip().split("\n\n")
    assert len(blocks) == 2 and "\x1b" not in plain.getvalue()
    assert " 10%" in blocks[0] and " 75%" in blocks[1]


def test_watch_with_json_or_a_bad_interval_is_refused(workspace: WorkspaceFactory) -> None:
    folder = workspace(2, 10)
    assert cli("status", str(folder), "--watch", "--json")[0] == 2
    assert cli("status", str(folder), "--watch", "--interval", "0")[0] == 2
    assert cli("status", str(folder / "nope"), "--watch")[0] == 2


@pytest.mark.parametrize(
    "interval", ["inf", "nan", "-1", "3601", "1e400", "soon", "1e-300", "0.099"]
)
def test_an_interval_that_is_not_a_finite_number_of_seconds_is_one_line(
    workspace: WorkspaceFactory, tmp_path: Path, interval: str
) -> None:
    """``--interval inf`` passed the check and overflowed the wait with a traceback;
    ``1e-300`` redrew in a busy loop at 100% CPU."""
    folder = workspace(2, 10)
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "status", str(folder), "--watch", "--interval", interval],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("memoryd: status: argument --interval:"), line


def _watch_argv(folder: Path) -> list[str]:
    return [sys.executable, "-m", "memoryd", "status", str(folder), "--watch", "--interval", "0.2"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = clean_env(tmp_path / "home", {"MEMORYD_TOKEN_LIMIT": "2000"})
    env["COLUMNS"], env["LINES"] = "160", "40"
    return env


@pytest.mark.slow
def test_on_a_terminal_the_table_follows_appends_and_ctrl_c_exits_0(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    """Run under a pty: frames redraw in place, a new message shows up, SIGINT ends it with 0."""
    folder = workspace(4, 100, name="root/alpha")
    master, slave = pty.openpty()
    process = subprocess.Popen(
        _watch_argv(tmp_path / "root"),
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
    )
    os.close(slave)
    seen = bytearray()

    def read_some() -> bytes:
        if select.select([master], [], [], 0.1)[0]:
            with contextlib.suppress(OSError):  # EIO once the child has exited
                seen.extend(os.read(master, 65536))
        return bytes(seen)

    try:
        wait_until(lambda: b"alpha" in read_some(), 30, "the first frame")
        ratio_before = int(read_some().split(b"alpha", 1)[1].split(b"%")[0].split()[-1])
        for index in range(8):
            append_message(folder, "user", make_message(index, "user", "x" * 400)["content"])
        wait_until(
            lambda: f"{ratio_before}%".encode() not in read_some().rsplit(b"\x1b[H", 1)[-1],
            30,
            "a frame showing the new usage",
        )
        process.send_signal(signal.SIGINT)
        # Keep reading: a terminal nobody reads blocks the last frame's write, and the exit.
        wait_until(lambda: read_some() is not None and process.poll() is not None, 20, "exit")
        assert process.returncode == 0
        assert process.stderr is not None and b"Traceback" not in process.stderr.read()
        output = bytes(seen)
        assert output.count(b"\x1b[H") >= 2 and b"\xe2\x96\x88" in output  # redrawn, bars
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()
        os.close(master)


@pytest.mark.slow
def test_on_a_pipe_each_refresh_is_plain_text(workspace: WorkspaceFactory, tmp_path: Path) -> None:
    workspace(4, 100, name="root/alpha")
    process = subprocess.Popen(
        _watch_argv(tmp_path / "root"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
    )
    assert process.stdout is not None
    try:
        lines: list[bytes] = []
        while sum(1 for line in lines if line.startswith(b"memoryd status:")) < 2:
            lines.append(process.stdout.readline())
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=20)
        assert process.returncode == 0, stderr
        text = b"".join(lines) + rest
        assert b"\x1b" not in text and b"[#" in text
        assert b"Traceback" not in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_ctrl_c_ends_the_watch_of_a_process_started_with_sigint_ignored(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    """A background job of a shell without job control starts with SIGINT ignored, and
    Python then installs no handler: the watch must still end on SIGINT, with 0."""
    workspace(4, 100, name="root/alpha")
    ignoring = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "os.execv(sys.executable, sys.argv[1:])"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", ignoring, *_watch_argv(tmp_path / "root")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(b"memoryd status: 1 workspace, ")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
        assert process.returncode == 0, stderr
        assert b"Traceback" not in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_the_watch_puts_back_the_sigint_handler_it_found() -> None:
    frames = iter([[row("/a", 0.1, "normal")]])
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        watch(lambda: next(frames), io.StringIO(), 0, is_tty=False, frames=1)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_in_80_columns_long_paths_are_shortened_and_every_column_shows() -> None:
    """Deep workspace paths give way: each line fits 80 columns, and HEARTBEAT and LAST JOB
    still show, with each workspace's own folder name."""
    deep = "/home/somebody/projects/agents/team-alpha/nightly"
    rows = [row(f"{deep}/workspace-number-{n}", 0.5, "normal") for n in range(3)]
    for one in rows:
        one["heartbeat"] = {"status": "completed", "last_result": "replaced 72 messages"}
        one["last_summary_at"] = "2026-11-22T09:55:00Z"
    lines = render_frame(rows, NOW, 80, fancy=True)
    assert all(len(line) <= 80 for line in lines)
    assert "HEARTBEAT" in lines[1] and "LAST JOB" in lines[1]
    for n, line in enumerate(lines[2:]):
        assert line.startswith(f"…ce-number-{n}  "), "the end of the path, its own name"
        assert "completed" in line and "ago" in line
    wide = render_frame(rows, NOW, 300, fancy=True)
    assert f"{deep}/workspace-number-0" in wide[2], "paths are whole when there is room"


def test_shorten_path_keeps_the_last_components_that_fit() -> None:
    assert shorten_path("/a/b/c", 10) == "/a/b/c"
    assert shorten_path("/home/me/agents/alice", 14) == "…/agents/alice"
    assert shorten_path("/home/me/agents/alice", 8) == "…/alice"
    assert shorten_path("/x/averyveryverylongname", 8) == "…ongname"
