"""Commit of a 100 MB conversation against copying and fsyncing the same bytes.

The commit is ``memoryd.commit.rewrite.rewrite`` as a job calls it: the first 60% of the lines
(cut at a line boundary) go to a fsynced archive, the new file is one summary line plus
the kept 40%, fsynced and renamed over the original, folder fsynced. It is timed with
``drain_seconds=0`` (the drain window is a fixed wait for writers that do not lock, not
work; it is reported separately with the default 0.5 s). ``read_snapshot`` (the job's
read, before the LLM call) is timed on its own.

The baseline copies the whole 100 MB file: ``shutil.copyfile`` to a temp file, fsync,
rename over the original, fsync the folder — the same number of bytes written and made
durable, and the same old inode freed (on this ext4 mounted with ``discard``, freeing a
100 MB inode costs about 45 ms, paid by the rename in the copy and by the last close in
the rewrite).

Each repetition starts from a fresh copy of the file (not timed) and ``os.sync()``;
commit and copy alternate. Median of 5. Target: commit within 1.5x of the copy.

    python bench/commit.py [--repeats 5] [--size-mb 100]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path

import _common as common

from memoryd.commit.rewrite import ArchivePlan, rewrite
from memoryd.commit.snapshot import read_snapshot
from memoryd.files.fsutil import fsync_dir


def copy_and_fsync(source: Path) -> float:
    """Copy ``source`` to a temp file, fsync, rename it over ``source``, fsync the folder."""
    start = time.perf_counter()
    tmp = source.with_name(source.name + ".tmp")
    shutil.copyfile(source, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, source)
    fsync_dir(source.parent)
    return time.perf_counter() - start


def summary_line() -> bytes:
    message = {
        "id": "summary",
        "role": "assistant",
        "content": "[Summary of earlier conversation]\n\n" + "a decision. " * 300,
        "timestamp": 1_700_000_000_000,
        "isSummary": True,
        "summarizedCount": 0,
        "archive": ".memoryd/archive/x.jsonl",
    }
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def commit_once(
    path: Path, archive_dir: Path, drain: float, steps: dict[str, list[float]]
) -> tuple[float, float, int]:
    """(read_snapshot seconds, rewrite seconds, new size); appends each step's seconds."""
    start = time.perf_counter()
    snapshot, data = read_snapshot(path)
    read_s = time.perf_counter() - start
    cut = data.rfind(b"\n", 0, int(len(data) * 0.6)) + 1
    del data
    marks: list[tuple[str, float]] = []
    start = time.perf_counter()
    marks.append(("start", start))
    result = rewrite(
        snapshot,
        [summary_line(), (cut, snapshot.end)],
        lock=path.parent / ".memoryd" / "lock",
        archive=ArchivePlan(archive_dir, f"conversation-bench-{time.time_ns()}.jsonl", [(0, cut)]),
        drain_seconds=drain,
        fault=lambda name: marks.append((name, time.perf_counter())),
    )
    marks.append(("closed (old inode freed)", time.perf_counter()))
    for (_, before), (name, after) in itertools.pairwise(marks):
        steps.setdefault(name, []).append(after - before)
    return read_s, time.perf_counter() - start, result.new_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size-mb", type=int, default=100)
    args = parser.parse_args(argv)
    common.install_exit_handlers()

    copies: list[float] = []
    commits: list[float] = []
    reads: list[float] = []
    drained: list[float] = []
    steps: dict[str, list[float]] = {}
    with common.scratch("commit") as folder:
        master = folder / "master.jsonl"
        common.write_conversation(master, args.size_mb << 20)
        size = master.stat().st_size
        workspace = folder / "ws"
        workspace.mkdir()
        conversation = workspace / "conversation.jsonl"
        archive_dir = workspace / ".memoryd" / "archive"
        for rep in range(args.repeats + 1):
            # Commit and copy alternate, so that neither always runs on a warmer system.
            for kind in ("commit", "copy") if rep % 2 == 0 else ("copy", "commit"):
                shutil.copyfile(master, conversation)
                shutil.rmtree(archive_dir, ignore_errors=True)
                os.sync()
                if kind == "copy":
                    copies.append(copy_and_fsync(conversation))
                else:
                    drain = 0.5 if rep == args.repeats else 0.0
                    measured: dict[str, list[float]] = {}
                    read_s, commit_s, _new = commit_once(conversation, archive_dir, drain, measured)
                    if rep == args.repeats:
                        drained.append(commit_s)
                    else:
                        reads.append(read_s)
                        commits.append(commit_s)
                        for name, values in measured.items():
                            steps.setdefault(name, []).extend(values)
        copies = copies[: args.repeats]

    copy_med = common.median(copies)
    commit_med = common.median(commits)
    ratio = commit_med / copy_med
    print(
        common.table(
            ("operation", "median s", "min s", "max s"),
            [
                (f"copy + fsync + rename ({size >> 20} MiB)", copy_med, min(copies), max(copies)),
                ("rewrite, drain 0 s", commit_med, min(commits), max(commits)),
                ("rewrite, drain 0.5 s (default, 1 run)", drained[0], drained[0], drained[0]),
                (
                    "read_snapshot (job read, before LLM)",
                    common.median(reads),
                    min(reads),
                    max(reads),
                ),
            ],
        )
    )
    print()
    step_medians = {name: common.median(values) for name, values in steps.items()}
    print(
        common.table(
            ("rewrite step (drain 0), time since the previous", "median s"),
            list(step_medians.items()),
        )
    )
    print()
    print(
        common.table(
            ("measure", "value", "target", "met"),
            [("rewrite / copy", round(ratio, 3), "<= 1.5", ratio <= 1.5)],
        )
    )
    out = common.save(
        "commit",
        {
            "file_bytes": size,
            "repeats": args.repeats,
            "copy_s": copies,
            "rewrite_drain0_s": commits,
            "rewrite_drain_default_s": drained,
            "read_snapshot_s": reads,
            "rewrite_step_medians_s": step_medians,
            "copy_median_s": copy_med,
            "rewrite_median_s": commit_med,
            "rewrite_over_copy": ratio,
            "target": 1.5,
            "met": ratio <= 1.5,
        },
    )
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
