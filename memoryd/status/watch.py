"""``memoryd status --watch``: a table of every workspace, refreshed until Ctrl-C.

On a terminal each frame redraws the screen in place (usage bars, colours unless
``NO_COLOR`` is set); when stdout is not a terminal each refresh is a plain-text block with
a time stamp, no escape codes, so that it can be logged or piped. Ctrl-C ends it even in a
process started with SIGINT ignored (docs/design.md#status-watch).
"""

from __future__ import annotations

import calendar
import contextlib
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

BAR_WIDTH = 20
NARROW_BAR = 10
"""The usage bar's width when the table does not fit the terminal."""
LAST_JOB_ROOM = 16
"""Columns the LAST JOB column keeps at least, when paths are shortened to fit."""
MIN_PATH = 12
"""Columns a shortened workspace path keeps at least."""
COLOURS = {"normal": "\x1b[32m", "warning": "\x1b[33m", "critical": "\x1b[31m"}
RESET = "\x1b[0m"
HOME_AND_CLEAR = "\x1b[H"
CLEAR_TO_END = "\x1b[J"
CLEAR_LINE_END = "\x1b[K"
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


def usage_bar(ratio: float, width: int = BAR_WIDTH, fancy: bool = True) -> str:
    """``[████████░░░░]`` (or ``[#####-----]`` in plain text) for a usage ratio (pure)."""
    filled = max(0, min(width, round(ratio * width)))
    full, empty = ("█", "░") if fancy else ("#", "-")
    return "[" + full * filled + empty * (width - filled) + "]"


def ago(iso: str | None, now: float) -> str:
    """``42s ago``, ``5m ago``, ``3h ago``, ``2d ago`` for an ISO time stamp (pure)."""
    if not iso:
        return "never"
    try:
        then = calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return iso
    seconds = max(0, int(now - then))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def last_job(row: dict[str, Any], now: float) -> str:
    """When the last job ended and what it said (pure over a status row)."""
    heartbeat = row.get("heartbeat") or {}
    status = heartbeat.get("status")
    if status == "failed" and heartbeat.get("last_error"):
        return f"failed: {heartbeat['last_error']}"
    when = ago(row.get("last_summary_at"), now)
    result = heartbeat.get("last_result")
    return f"{when}: {result}" if result and row.get("last_summary_at") else when


def shorten_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` characters: its last components after ``…/``, or the
    end of its last component after ``…`` (pure)."""
    if len(path) <= width:
        return path
    parts = path.split("/")
    tail = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(tail) + 2 > width:
            break
        tail = f"{part}/{tail}"
    shown = f"…/{tail}"
    return shown if len(shown) <= width else "…" + parts[-1][-(width - 1) :]


HEADER = ("WORKSPACE", "USAGE", "", "LEVEL", "STRATEGY", "HEARTBEAT", "LAST JOB")


def table_rows(
    rows: Sequence[dict[str, Any]], now: float, fancy: bool, bar: int
) -> list[tuple[str, ...]]:
    """The header and one tuple of cells per workspace, usage bars ``bar`` wide (pure)."""
    table: list[tuple[str, ...]] = [HEADER]
    for row in rows:
        if "error" in row:
            table.append((str(row["workspace"]), "", "", "error", "", "", str(row["error"])))
            continue
        heartbeat = (row.get("heartbeat") or {}).get("status", "?")
        if row.get("summarizing"):
            heartbeat += " (summarizing)"
        table.append(
            (
                str(row["workspace"]),
                usage_bar(float(row["usage_ratio"]), bar, fancy=fancy),
                f"{float(row['usage_ratio']):4.0%}",
                str(row["level"]),
                str(row["strategy"]),
                heartbeat,
                last_job(row, now),
            )
        )
    return table


def column_widths(table: Sequence[tuple[str, ...]]) -> list[int]:
    """The width of every column but the last, which is as long as it is."""
    return [max(len(line[i]) for line in table) for i in range(len(HEADER) - 1)]


def render_frame(
    rows: Sequence[dict[str, Any]], now: float, width: int, fancy: bool, colour: bool = False
) -> list[str]:
    """The lines of one frame, each cut to ``width`` columns (pure).

    Every column shows: when the table is wider than ``width``, the usage bars narrow to
    ``NARROW_BAR`` and the workspace paths are shortened from the left, so that LAST JOB
    keeps at least ``LAST_JOB_ROOM`` columns; never is a column dropped."""
    table = table_rows(rows, now, fancy, BAR_WIDTH)
    widths = column_widths(table)
    separators = 2 * (len(HEADER) - 1)
    if sum(widths) + separators + max(len(line[-1]) for line in table) > width:
        table = table_rows(rows, now, fancy, NARROW_BAR)
        widths = column_widths(table)
        last = min(LAST_JOB_ROOM, max(len(line[-1]) for line in table))
        room = width - sum(widths[1:]) - separators - last
        if widths[0] > room:
            fit = max(room, MIN_PATH, len(HEADER[0]))
            table = [HEADER, *((shorten_path(line[0], fit), *line[1:]) for line in table[1:])]
            widths[0] = max(len(line[0]) for line in table)
    level_at = sum(widths[:3]) + 2 * 3  # where the LEVEL column starts
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    counted = "1 workspace" if len(rows) == 1 else f"{len(rows)} workspaces"
    lines = [f"memoryd status: {counted}, {stamp}"]
    for index, line in enumerate(table):
        cells = [cell.ljust(w) for cell, w in zip(line, widths, strict=False)] + [line[-1]]
        text = "  ".join(cells).rstrip()[:width]
        level = line[3]
        end = level_at + len(level)
        if colour and index > 0 and level in COLOURS and len(text) >= end:
            text = f"{text[:level_at]}{COLOURS[level]}{level}{RESET}{text[end:]}"
        lines.append(text)
    if not rows:
        lines.append("(no workspaces)")
    return lines


def watch(
    collect: Callable[[], Sequence[dict[str, Any]]],
    out: TextIO,
    interval: float,
    is_tty: bool,
    colour: bool = True,
    frames: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Draw a frame every ``interval`` seconds until Ctrl-C (or ``frames`` frames); exit 0.

    A second Ctrl-C ends a final write that the terminal does not take (KeyboardInterrupt
    out of here)."""
    with ctrl_c_interrupts():
        return _watch(collect, out, interval, is_tty, colour, frames, sleep)


@contextlib.contextmanager
def ctrl_c_interrupts() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt inside, whatever the process inherited; the previous
    handler is put back after. A process started with SIGINT ignored (a background job of a
    shell without job control) keeps it ignored, since Python installs its handler only
    over the default, and a watch would then never end. Outside the main thread (where no
    handler can be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)


def _watch(
    collect: Callable[[], Sequence[dict[str, Any]]],
    out: TextIO,
    interval: float,
    is_tty: bool,
    colour: bool,
    frames: int | None,
    sleep: Callable[[float], None],
) -> int:
    drawn = 0
    try:
        if is_tty:
            out.write(HIDE_CURSOR)
        while frames is None or drawn < frames:
            rows = collect()
            now = time.time()
            if is_tty:
                width = shutil.get_terminal_size().columns
                lines = render_frame(rows, now, width, fancy=True, colour=colour)
                out.write(HOME_AND_CLEAR + "".join(f"{line}{CLEAR_LINE_END}\n" for line in lines))
                out.write(CLEAR_TO_END)
            else:
                lines = render_frame(rows, now, 10_000, fancy=False)
                out.write("".join(f"{line}\n" for line in lines) + "\n")
            out.flush()
            drawn += 1
            if frames is None or drawn < frames:
                sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        if is_tty:
            out.write(SHOW_CURSOR)
            out.flush()
    return 0
