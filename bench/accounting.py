"""Accounting cost of one appended message, by file size, against a full recount.

For a conversation of 1 MB, 10 MB and 100 MB (lines of about 1 KB), a
``ConversationReader`` first counts the whole file; then, many times, one ~1 KB message
is appended and ``reader.update()`` is timed (``time.perf_counter_ns``); the file
grows by those appends (1 MB for the default 1000), so sizes are starting sizes. A second pass
wraps ``os.pread`` to count the bytes the reader reads per update. The full recount is
``split_lines`` over the whole 100 MB file (read included), as a job does it.

Targets: per-append cost flat within 1.2x across sizes; at 100 MB at least
100x cheaper than a full recount.

    python bench/accounting.py [--appends 1000] [--recounts 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common as common

from memoryd.conversation.lines import split_lines
from memoryd.conversation.reader import ConversationReader

SIZES_MB = (1, 10, 100)
MAX_LINE_BYTES = 8 << 20


def append(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def time_updates(path: Path, appends: int, first_index: int) -> tuple[list[int], int]:
    """Per-append update() times in ns, after counting the file once."""
    reader = ConversationReader(path, MAX_LINE_BYTES)
    reader.update()
    times: list[int] = []
    gc.disable()
    try:
        for i in range(appends):
            append(path, common.message_line(first_index + i))
            start = time.perf_counter_ns()
            update = reader.update()
            times.append(time.perf_counter_ns() - start)
            assert len(update.new_lines) == 1 and not update.reset
    finally:
        gc.enable()
    return times, reader.tally.messages


def bytes_per_update(path: Path, appends: int, first_index: int) -> tuple[float, int]:
    """Mean bytes read by pread per update() after one append, and the line size."""
    reader = ConversationReader(path, MAX_LINE_BYTES)
    reader.update()
    real_pread = os.pread
    counted = [0]

    def counting_pread(fd: int, length: int, offset: int) -> bytes:
        data = real_pread(fd, length, offset)
        counted[0] += len(data)
        return data

    line = common.message_line(first_index)
    os.pread = counting_pread  # the reader calls os.pread
    try:
        for i in range(appends):
            append(path, common.message_line(first_index + i))
            reader.update()
    finally:
        os.pread = real_pread
    return counted[0] / appends, len(line)


def full_recount(path: Path) -> tuple[float, int]:
    """Seconds to read and split_lines the whole file, and the lines counted."""
    start = time.perf_counter_ns()
    data = path.read_bytes()
    lines = sum(1 for _ in split_lines(data, MAX_LINE_BYTES))
    elapsed = (time.perf_counter_ns() - start) / 1e9
    return elapsed, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--recounts", type=int, default=5)
    args = parser.parse_args(argv)
    common.install_exit_handlers()

    rows = []
    per_size: dict[str, dict[str, float]] = {}
    recount: dict[str, Any] = {}
    with common.scratch("accounting") as folder:
        for size_mb in SIZES_MB:
            path = folder / f"conversation-{size_mb}mb.jsonl"
            lines = common.write_conversation(path, size_mb << 20)
            times, counted = time_updates(path, args.appends, lines)
            read_bytes, line_size = bytes_per_update(path, 200, lines + args.appends)
            med = common.median(times) / 1000
            p90 = common.percentile(times, 90) / 1000
            per_size[f"{size_mb}MB"] = {
                "file_bytes": path.stat().st_size,
                "lines": counted,
                "appends": args.appends,
                "median_us": med,
                "p90_us": p90,
                "mean_bytes_read_per_update": read_bytes,
                "appended_line_bytes": line_size,
            }
            rows.append((f"{size_mb} MB", counted, med, p90, read_bytes))
            if size_mb == max(SIZES_MB):
                samples = []
                for _ in range(args.recounts):
                    elapsed, _lines = full_recount(path)
                    samples.append(elapsed)
                recount = {
                    "file_bytes": path.stat().st_size,
                    "median_s": common.median(samples),
                    "samples_s": samples,
                }
            path.unlink()

    medians = [v["median_us"] for v in per_size.values()]
    spread = max(medians) / min(medians)
    big = per_size[f"{max(SIZES_MB)}MB"]["median_us"]
    ratio = recount["median_s"] * 1e6 / big
    print(
        common.table(
            ("start size", "lines at end", "update median us", "p90 us", "bytes read/update"), rows
        )
    )
    print()
    print(
        common.table(
            ("measure", "value", "target", "met"),
            [
                ("max/min median across sizes", round(spread, 3), "<= 1.2", spread <= 1.2),
                ("full recount at 100 MB (s)", recount["median_s"], "", ""),
                ("recount / update at 100 MB", round(ratio), ">= 100", ratio >= 100),
            ],
        )
    )
    out = common.save(
        "accounting",
        {
            "per_size": per_size,
            "full_recount_100MB": recount,
            "flatness_max_over_min": spread,
            "recount_over_update_100MB": ratio,
            "targets": {"flat_within": 1.2, "cheaper_than_recount_by": 100},
            "met": {"flat": spread <= 1.2, "cheaper": ratio >= 100},
        },
    )
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
