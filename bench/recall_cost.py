"""Recall: the CPU a query may cost, for the worst queries the parser accepts.

Four workspaces, each with 3,000 archived messages of generated agent transcripts (one of
each shape: tool loop, interactive, text mode, ... see tests/fakes/agent_transcripts.py), are
searched in-process (``recall()``, what the CLI and MCP call) one workspace at a time and
root-wide, with hostile but valid queries: 16 two-letter prefixes, 90 AND-ed prefixes in
FTS5 syntax, a wide ``NEAR``, words in every message, a 16-word question. For each query:
the CPU seconds the call used (``time.process_time``), and whether it was answered or
refused (one line saying so). A yardstick measured in the same run (the CPU of a bare
``python -c "import json"``) makes the figures comparable across machines.

Target: the worst accepted query ≤ 2 s of CPU, root-wide included. Each message gets a
tail of 40 distinct tokens (hex ids, numbered names) so that the vocabulary is as large
as real transcripts' and a short prefix stands for thousands of terms.

With ``--source-messages N``, the same queries also run through ``recall_source()`` over
a Claude Code home of N messages (sessions of 5,000 messages under
``projects/<project>/``, each message about ``--source-bytes`` of transcript text and a
tail of 12 distinct tokens; the texts of one generated transcript of each shape in
turn), indexed once before; same target.

    python bench/recall_cost.py [--messages 3000] [--workspaces 4] [--bytes 2000]
                                [--source-messages 500000] [--source-bytes 300]
                                [--timeout 10] [--json]

``--timeout`` is each query's time budget (10 s, as recall's): on a busy machine the
budget can stop a query whose CPU is below the target, which is then reported as refused;
a long budget shows every query's whole cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as common

sys.path.insert(0, str(common.REPO))
sys.path.insert(0, str(common.REPO / "tests" / "fakes"))

from agent_transcripts import SHAPES, generate

from memoryd.errors import MemorydError
from memoryd.search.archive import recall, update_index
from memoryd.search.history import content_text
from memoryd.search.sessions.search import recall_source, update

ARCHIVE = ".memoryd/archive/conversation-20260101T000000000000Z-{:06x}.jsonl"
PREFIXES = "po de co re te fi ch ru ha pa se ma in pr st ca".split()  # noqa: SIM905
COMMON = [
    *("test", "file", "error", "line", "def", "return", "self", "import", "assert", "value"),
    *("name", "path", "run", "code", "and", "parser", "config", "handler", "module", "src"),
    *("tests", "output", "failed", "passed"),
]
QUERIES: dict[str, tuple[str, bool]] = {
    "16 two-letter prefixes": (" ".join(f"{p}*" for p in PREFIXES), False),
    "15 common prefixes and a rare one": (
        " ".join(f"{p}*" for p in PREFIXES[:15]) + " zqx*",
        False,
    ),
    "16 common words": (
        "test file error line def return self import assert value name path run code the and",
        False,
    ),
    "a 16-word question": (
        "why did the parser config test fail after the handler change in the module import",
        False,
    ),
    "a word in every message": ("src", False),
    "a rare identifier": ("parse_config", False),
    "raw: 90 AND-ed prefixes": (
        " AND ".join([f"{a}{b}*" for a in "pdcrtfsmhl" for b in "aeiourhln"][:90]),
        True,
    ),
    "raw: a wide NEAR": ("NEAR(" + " ".join(f"{p}*" for p in PREFIXES[:8]) + ", 200)", True),
    "raw: OR of 40 prefixes": (
        " OR ".join(f"{a}{b}*" for a in "pdcrtfsm" for b in "aeiou"),
        True,
    ),
    "16 four-character id prefixes": (" ".join(f"id{n}*" for n in range(10, 26)), False),
    "raw: OR of 40 id prefixes": (" OR ".join(f"id{n}*" for n in range(10, 50)), True),
    "raw: OR of 22 id prefixes (just under the bound)": (
        " OR ".join(f"id{n}*" for n in range(10, 32)),
        True,
    ),
    "raw: OR of 48 common words": (" OR ".join((COMMON * 2)[:48]), True),
    "a 48-word quoted phrase of common words": ('"' + " ".join((COMMON * 2)[:48]) + '"', False),
    "a 48-word quoted phrase of a word in every message": (
        '"' + " ".join(["src"] * 48) + '"',
        False,
    ),
    "raw: OR of 100 common words": (" OR ".join((COMMON * 5)[:100]), True),
}


def _with_ids(line: bytes, k: int) -> bytes:
    """A line with a tail of the many distinct tokens real transcripts carry (commit and
    object ids, request ids, numbered names): a large vocabulary, where a two-letter prefix
    expands to thousands of terms."""
    message = json.loads(line)
    tail = " ".join(
        f"{(k * 40 + j) * 2654435761 % (1 << 32):08x} id{(k * 40 + j) * 7919 % 10**6}"
        f" {PREFIXES[j % 16]}{(k * 40 + j) * 31 % 99991}"
        for j in range(40)
    )
    content = message["content"]
    if isinstance(content, str):
        message["content"] = f"{content}\n{tail}"
    else:
        message["content"] = [*content, {"type": "text", "text": tail}]
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def build(root: Path, workspaces: int, messages: int, size: int) -> list[Path]:
    folders = []
    for n in range(workspaces):
        folder = root / f"ws{n}"
        archive = folder / ARCHIVE.format(n)
        archive.parent.mkdir(parents=True, exist_ok=True)
        if not archive.exists():
            lines: list[bytes] = []
            seed = n * 100
            while len(lines) < messages:
                shape = SHAPES[n % len(SHAPES)]
                lines += generate(shape, seed, 600, tokens=600 * size // 4).lines
                seed += 1
            tailed = [_with_ids(line, k) for k, line in enumerate(lines[:messages])]
            archive.write_bytes(b"".join(tailed))
            (folder / "conversation.jsonl").write_bytes(b"")
        update_index(folder)
        folders.append(folder)
    return folders


SESSION_MESSAGES = 5000


def _session_record(k: int, session: str, line: bytes, size: int) -> bytes:
    """Message ``k`` of a generated transcript as a Claude Code line: about ``size`` bytes
    of its text and a tail of 12 distinct tokens."""
    message = json.loads(line)
    text = content_text(message.get("content"))[:size]
    tail = " ".join(
        f"{(k * 12 + j) * 2654435761 % (1 << 32):08x} id{(k * 12 + j) * 7919 % 10**6}"
        f" {PREFIXES[j % 16]}{(k * 12 + j) * 31 % 99991}"
        for j in range(4)
    )
    role = "assistant" if k % 2 else "user"
    content: Any = [{"type": "text", "text": f"{text}\n{tail}"}] if k % 2 else f"{text}\n{tail}"
    record = {
        "type": role,
        "sessionId": session,
        "cwd": "/home/dev/proj",
        "uuid": f"{session}-{k}",
        "timestamp": f"2026-03-01T10:{(k // 60) % 60:02d}:{k % 60:02d}.000Z",
        "message": {"role": role, "content": content},
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def build_source(home: Path, messages: int, size: int) -> Path:
    """A Claude Code home of ``messages`` messages, indexed: the texts of a few generated
    transcripts (one of each shape) in turn, each message with its own tail."""
    projects = home / "projects"
    if not projects.exists():
        texts: list[bytes] = []
        for seed, shape in enumerate(SHAPES):
            texts += generate(shape, 1000 + seed, 600, tokens=600 * size // 4).lines
        for start in range(0, messages, SESSION_MESSAGES):
            session = f"{start:08x}-0000-4000-8000-{start:012x}"
            path = projects / f"-home-dev-proj{start // SESSION_MESSAGES % 7}" / f"{session}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(
                b"".join(
                    _session_record(k, session, texts[k % len(texts)], size)
                    for k in range(start, min(start + SESSION_MESSAGES, messages))
                )
            )
    update(home.resolve(), "claude-code")
    return home


def cpu_of(call: Any) -> tuple[float, str]:
    start = time.process_time()
    try:
        hits = call()
        outcome = f"{len(hits)} hits"
    except MemorydError as exc:
        outcome = f"refused: {exc}"
    return time.process_time() - start, outcome


def interpreter_cpu() -> float:
    """The CPU seconds of a bare interpreter's start-up (the yardstick)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import json"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--workspaces", type=int, default=4)
    parser.add_argument("--bytes", type=int, default=2000, help="mean message size")
    parser.add_argument("--source-messages", type=int, default=0)
    parser.add_argument("--source-bytes", type=int, default=300, help="text of a message")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="a query's time budget (recall's --timeout)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[list[Any]] = []
    results: dict[str, Any] = {"machine": common.machine(), "queries": {}}
    with common.scratch("recall-cost") as root:
        folders = build(root, args.workspaces, args.messages, args.bytes)
        yardstick = min(interpreter_cpu() for _ in range(5))
        worst = 0.0
        for name, (query, raw) in QUERIES.items() if folders else ():
            for where, path in (("one workspace", folders[0]), ("root-wide", root)):
                seconds, outcome = cpu_of(
                    lambda p=path, q=query, r=raw: recall(p, q, raw=r, timeout=args.timeout)
                )
                accepted = not outcome.startswith("refused")
                if accepted:
                    worst = max(worst, seconds)
                rows.append([name, where, f"{seconds:.3f}", outcome[:70]])
                results["queries"][f"{name} / {where}"] = {"cpu_s": seconds, "outcome": outcome}
        if args.source_messages:
            os.environ["XDG_STATE_HOME"] = str(root / "state")  # the index, deleted after
            started = time.monotonic()
            home = build_source(root / "claude", args.source_messages, args.source_bytes)
            results["source_build_s"] = time.monotonic() - started
            results["source_bytes"] = sum(f.stat().st_size for f in home.rglob("*.jsonl"))
            source_worst = 0.0
            for name, (query, raw) in QUERIES.items():
                seconds, outcome = cpu_of(
                    lambda q=query, r=raw: recall_source(home, q, raw=r, timeout=args.timeout)
                )
                if not outcome.startswith("refused"):
                    source_worst = max(source_worst, seconds)
                where = f"source ({args.source_messages:,} messages)"
                rows.append([name, where, f"{seconds:.3f}", outcome[:70]])
                results["queries"][f"{name} / {where}"] = {"cpu_s": seconds, "outcome": outcome}
            results["source_worst_accepted_cpu_s"] = source_worst
    results["worst_accepted_cpu_s"] = worst
    results["interpreter_cpu_s"] = yardstick
    common.save("recall_cost", results)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(common.table(["query", "where", "CPU s", "outcome"], rows))
    print(
        f"\nworst accepted query: {worst:.3f} s CPU (target ≤ 2 s); "
        f"= {worst / yardstick:.1f}x the CPU of a bare interpreter's start-up "
        f"({yardstick * 1000:.1f} ms)"
    )
    if args.source_messages:
        source_worst = results["source_worst_accepted_cpu_s"]
        print(
            f"source index of {args.source_messages:,} messages "
            f"({results['source_bytes'] / 1e6:.0f} MB, indexed in "
            f"{results['source_build_s']:.0f} s): worst accepted query {source_worst:.3f} s "
            f"CPU (target ≤ 2 s) = {source_worst / yardstick:.1f}x the yardstick"
        )


if __name__ == "__main__":
    main()
