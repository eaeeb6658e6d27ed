"""Recall: how fast the archive is indexed, what indexing costs a job, and how a search
compares with grep over the same archive.

1. Indexing: a 200 MB archive (40 files of 5 MB, ~1 KB messages with a long tail of
   paths, numbers and ids, like real agent transcripts) is indexed from nothing by
   ``update_index``; MB of archive per second of wall time.
2. A job with indexing on against one with it off: the same 120,000-token conversation
   (narrative strategy) is summarized each way, alternating: ``--jobs`` times with the
   offline extractive summarizer (the fastest job, so the worst case for the ratio), and
   ``--llm-jobs`` times through the Anthropic SDK against tests/fakes/fake_anthropic.py
   answering after ``--llm-latency`` seconds (a real call takes seconds). The job's wall
   time is what ``run_job`` takes (what the daemon waits for); "until indexed" also waits
   for the background index thread the job started.
3. ``memoryd recall WS QUERY`` as a fresh process against ``grep -F -c WORD FILES`` over
   the same 40 archive files, page cache warm, alternating, median of ``--rounds``; for
   a word in one message, in ~200 and in nearly all. Also the in-process API call, and
   ``memoryd recall`` on a workspace without an archive (the command's start-up) against
   a bare ``python -c "import json"``.

Targets: a job with indexing on ≤ 1.1x the wall time of one with it off; ``memoryd
recall`` median ≤ 1/10 of ``grep -F -c``; the command's start-up ≤ 5x the bare interpreter.

    python bench/recall.py [--mb 200] [--jobs 10] [--llm-jobs 5] [--llm-latency 1] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _common as common

sys.path.insert(0, str(common.REPO))

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import load_settings
from memoryd.search.archive import recall, update_index

FILES = 40
RARE, SOME, MOST = "zqmarker7731", "handler417", "parser"
"""In one message; in about 1 message of 1,000; in nearly every message."""


def transcript_line(index: int, size: int) -> bytes:
    """A message of about ``size`` bytes: common words plus paths, numbers and ids."""
    base = json.loads(common.message_line(index, size - 120))
    tail = f" see src/module{index % 997}/handler{index % 1009}.py line {index * 31 % 4000}"
    tail += f" error E{index * 7919 % 100_000} id {index * 2654435761 % (1 << 32):08x}"
    if index == 1_234:
        tail += f" {RARE}"
    base["content"] += tail
    return json.dumps(base, separators=(",", ":")).encode() + b"\n"


def write_archive(workspace: Path, total_mb: int) -> tuple[list[Path], int]:
    archive_dir = workspace / ".memoryd" / "archive"
    archive_dir.mkdir(parents=True)
    per_file = total_mb * (1 << 20) // FILES
    paths, index = [], 0
    for n in range(FILES):
        path = archive_dir / f"conversation-20260101T{n:06d}000000Z-{n:06x}.jsonl"
        lines, written = [], 0
        while written < per_file:
            line = transcript_line(index, 1024)
            lines.append(line)
            written += len(line)
            index += 1
        path.write_bytes(b"".join(lines))
        paths.append(path)
    (workspace / "conversation.jsonl").write_bytes(b"")
    return paths, index


def wall(argv: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True)
    return time.perf_counter() - start, done.stdout


def index_threads_done() -> None:
    for thread in threading.enumerate():
        if thread.name == "memoryd-index":
            thread.join()


def job_costs(folder: Path, jobs: int, backend: dict[str, Any]) -> dict[str, Any]:
    template = folder / "job-template"
    if not template.exists():
        common.write_conversation(template / "conversation.jsonl", 480 * 1024)
    times: dict[str, list[float]] = {"off": [], "on": [], "on_until_indexed": []}
    for trial in range(-2, jobs * 2):  # two warm-up jobs (imports, SDK client), not counted
        mode = "on" if trial % 2 else "off"
        workspace = folder / f"job-{trial}"
        shutil.copytree(template, workspace)
        settings = load_settings(
            overrides={**backend, "index_archive": mode == "on", "drain_seconds": 0}
        ).settings
        start = time.perf_counter()
        result = run_job(JobRequest(workspace, settings))
        took = time.perf_counter() - start
        assert result.outcome == "completed", result.reason
        if mode == "on":
            index_threads_done()
            until_indexed = time.perf_counter() - start
            assert (workspace / ".memoryd" / "index.sqlite").exists()
            if trial >= 0:
                times["on_until_indexed"].append(until_indexed)
        if trial >= 0:
            times[mode].append(took)
        shutil.rmtree(workspace)
    off = common.median(times["off"])
    return {
        "samples": times,
        "off_ms": off * 1000,
        "on_ms": common.median(times["on"]) * 1000,
        "until_indexed_ms": common.median(times["on_until_indexed"]) * 1000,
        "ratio": common.median(times["on"]) / off,
        "ratio_until_indexed": common.median(times["on_until_indexed"]) / off,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--llm-jobs", type=int, default=5)
    parser.add_argument("--llm-latency", type=float, default=1.0)
    args = parser.parse_args()
    common.install_exit_handlers()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(common.REPO)
    results: dict[str, Any] = {}
    with common.scratch("recall") as folder:
        env["XDG_CONFIG_HOME"] = str(folder / "xdg")
        workspace = folder / "ws"
        files, messages = write_archive(workspace, args.mb)
        size = sum(path.stat().st_size for path in files)
        start = time.perf_counter()
        indexed = update_index(workspace)
        seconds = time.perf_counter() - start
        assert indexed == messages, (indexed, messages)
        index_size = (workspace / ".memoryd" / "index.sqlite").stat().st_size
        results["indexing"] = {
            "archive_mb": size / (1 << 20),
            "messages": messages,
            "seconds": seconds,
            "mb_per_s": size / (1 << 20) / seconds,
            "index_mb": index_size / (1 << 20),
        }
        print(
            common.table(
                ["archive MB", "messages", "index s", "MB/s", "index MB"],
                [
                    [
                        size / (1 << 20),
                        messages,
                        seconds,
                        size / (1 << 20) / seconds,
                        index_size / (1 << 20),
                    ]
                ],
            )
        )

        job = results["job"] = job_costs(folder, args.jobs, {"summarizer.backend": "extractive"})
        with common.fake_anthropic(args.llm_latency) as url:
            llm_backend = {
                "summarizer.backend": "anthropic",
                "anthropic.base_url": url,
                "anthropic.api_key": "sk-fake-bench",
            }
            llm = results["llm_job"] = job_costs(folder, args.llm_jobs, llm_backend)
        print()
        rows = []
        for name, costs in (("extractive", job), (f"LLM at {args.llm_latency:g} s", llm)):
            rows += [
                [f"{name}: indexing off", costs["off_ms"], 1.0],
                [f"{name}: indexing on", costs["on_ms"], costs["ratio"]],
                [
                    f"{name}: on, until indexed",
                    costs["until_indexed_ms"],
                    costs["ratio_until_indexed"],
                ],
            ]
        print(common.table(["job", "median ms", "x off"], rows))

        for path in files:  # warm the page cache
            path.read_bytes()
        memoryd = [sys.executable, "-m", "memoryd", "recall", str(workspace)]
        empty = folder / "empty"
        empty.mkdir()
        (empty / "conversation.jsonl").write_bytes(b"")
        runs = {
            'python -c "import json"': [sys.executable, "-c", "import json"],
            "memoryd recall EMPTY word": [
                sys.executable,
                "-m",
                "memoryd",
                "recall",
                str(empty),
                "word",
            ],
        }
        for word in (RARE, SOME, MOST):
            runs[f"memoryd recall WS {word}"] = [*memoryd, word]
            runs[f"grep -F -c {word} FILES"] = ["grep", "-F", "-c", word, *map(str, files)]
        times: dict[str, list[float]] = {name: [] for name in runs}
        for argv in runs.values():
            wall(argv, env)
        for _ in range(args.rounds):
            for name, argv in runs.items():
                times[name].append(wall(argv, env)[0])
        api: dict[str, list[float]] = {word: [] for word in (RARE, SOME, MOST)}
        for _ in range(args.rounds):
            for word in api:
                start = time.perf_counter()
                hits = recall(workspace, word)
                api[word].append(time.perf_counter() - start)
                assert hits, word
        bare = common.median(times['python -c "import json"'])
        rows, search = [], {}
        for word in (RARE, SOME, MOST):
            ours = common.median(times[f"memoryd recall WS {word}"])
            grep = common.median(times[f"grep -F -c {word} FILES"])
            in_process = common.median(api[word])
            search[word] = {
                "recall_ms": ours * 1000,
                "grep_ms": grep * 1000,
                "api_ms": in_process * 1000,
                "ratio": ours / grep,
                "api_ratio": in_process / grep,
            }
            rows.append(
                [word, ours * 1000, in_process * 1000, grep * 1000, ours / grep, in_process / grep]
            )
        print()
        print(
            common.table(
                ["word", "recall ms", "API ms", "grep -F -c ms", "recall/grep", "API/grep"],
                rows,
            )
        )
        startup = common.median(times["memoryd recall EMPTY word"])
        results["search"] = search
        results["startup"] = {
            "recall_ms": startup * 1000,
            "bare_ms": bare * 1000,
            "ratio": startup / bare,
        }
        results["samples"] = {"process": times, "api": api}
        print(
            f"\nstart-up: memoryd recall on an empty workspace {startup * 1000:.1f} ms, "
            f"bare interpreter {bare * 1000:.1f} ms: {startup / bare:.2f}x (target <= 5x)"
        )
        for name, costs in (("extractive", job), ("LLM", llm)):
            print(
                f"{name} job with indexing on: {costs['ratio']:.2f}x the job with it off "
                f"(target <= 1.1x); {costs['ratio_until_indexed']:.2f}x until indexed"
            )
    path = common.save("recall", {"args": vars(args), **results})
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
