"""Recall over other agents' sessions: 1 GB of generated Claude Code, Codex CLI and Gemini
CLI sessions indexed from nothing, then 1 KB appended, then searched.

1. First index: ``update`` on each of the three homes (a third of the bytes each), from
   an empty index, against ``cat`` of the same files to /dev/null in the same run (page
   cache warm for both: ``cat`` runs first and is the yardstick), and against the floor
   (:func:`floor`: the C JSON decoder and a bare FTS5 insert of the texts; target ≤ 1.5x),
   beside the same insert into a table with the index's own columns. The index parses
   the next files in a worker process while it writes (docs/design.md#sources-pipeline):
   its CPU is counted from ``/proc/stat`` (every process of the machine, so run it quiet).
2. Incremental: one ~1 KB line appended to one session file of the indexed corpus, then
   ``update`` of that path (what the daemon does on its watch event); median of
   ``--rounds``. Target ≤ 50 ms. Also a full pass that finds nothing new (the rescan).
3. Recall on the full index, in process, through ``recall_source`` (which first brings
   the index up to date, as the CLI and the MCP tool do): ``--rounds`` queries each of a
   word in one message (rare), a word in one message of 100 (common) and two words each
   in over 40% of the messages (very common), the three homes in turn; p50 of each.
   Targets ≤ 50 ms (rare) and ≤ 150 ms (common).
4. A warm query as a user runs it: ``memoryd recall HOME WORD`` as a process, ``--rounds``
   times over the three homes; p50 wall, against ``python -c pass`` (the interpreter's
   start, the yardstick) in the same run. The package's modules are compiled first, as
   ``pip install`` leaves them (a ``PYTHONDONTWRITEBYTECODE`` environment would otherwise
   compile every module at every start). Beside it, the look for changes it starts with
   (``update`` of a home that finds nothing new: the cached listing reads no folder whose
   time did not change, and looks only at the files written within a day), p50; the full
   look (every file, at most once a minute), p50; and the same query when a daemon tails
   the homes (its status file says so: no look at all). Targets: query p50 ≤ 150 ms, look
   ≤ 20 ms, on 1 GB of ``--session-kb`` 100 (10,000 files).

The files' times are spread over the 90 days before the run, as a real history's are,
so that a day's worth of them (about 1 in 90) is what an agent may still be appending to.

The sessions are written the way each agent writes them (tests/fakes/agent_sessions.py's
formats): messages of a few hundred bytes to a few KB of words, paths, numbers and ids,
tool calls and tool outputs (test logs) that are the bulk of the bytes. The corpus lives
under /tmp and is deleted at the end, with the index.

    python bench/sources.py [--mb 1024] [--session-kb 100] [--rounds 21]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

sys.path.insert(0, str(common.REPO))

from memoryd.search.schema import TOKENIZER, passage_rows
from memoryd.search.sessions import store
from memoryd.search.sessions.listing import FULL_LOOK_KEY
from memoryd.search.sessions.places import STATUS_FILE, state_dir
from memoryd.search.sessions.prepare import PARSERS
from memoryd.search.sessions.search import recall_source, update

SESSION_BYTES = 4 << 20
CODE_WORDS = """import module function return value error failed passed test config loader cache
    request response handler server client thread process queue timeout retry budget
    index query search result token parser schema table column migration commit branch
    merge rebase build deploy release version docker image volume network socket buffer
    stream reader writer encoder decoder payload header status code message session"""
VOCABULARY = [*common.WORDS, *CODE_WORDS.split()]
COMMON = "latency"
"""In one message of 100."""
VERY_COMMON = "handler timeout"
"""Each word in over 40% of the messages, both in about a quarter."""


class Corpus:
    """Writes sessions of one format until a byte budget is spent."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.count = 0
        self.rare: list[str] = []

    def text(self, words: int) -> str:
        pick = self.random.choices(VOCABULARY, k=words)
        self.count += 1
        if self.count % 3 == 0:
            pick.append("handler")
        if self.count % 3 == 1:
            pick.append("timeout")
        if self.count % 100 == 0:
            pick.append(COMMON)
        if self.count % 997 == 0:
            marker = f"rare{self.count}xq"
            self.rare.append(marker)
            pick.append(marker)
        pick.append(f"src/mod{self.count % 499}/file{self.count % 97}.py:{self.count % 4000}")
        return " ".join(pick)

    def output(self) -> str:
        lines = [f"tests/test_{self.count % 211}.py::test_case_{n} PASSED" for n in range(20)]
        return "\n".join(lines) + "\n" + self.text(40)


def stamp(n: int) -> str:
    return f"2026-03-01T10:{(n // 60) % 60:02d}:{n % 60:02d}.000Z"


def claude_session(corpus: Corpus, session: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for turn in range(10_000):
        base = {
            "sessionId": session,
            "cwd": "/home/dev/proj",
            "version": "2.0.14",
            "timestamp": stamp(turn),
            "isSidechain": False,
        }
        tool = f"toolu_{session[:8]}{turn}"
        records.append(
            {
                **base,
                "type": "user",
                "uuid": f"{session}-{turn}u",
                "message": {"role": "user", "content": corpus.text(60)},
            }
        )
        records.append(
            {
                **base,
                "type": "assistant",
                "uuid": f"{session}-{turn}a",
                "message": {
                    "id": f"msg_{turn}",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": tool,
                            "name": "Bash",
                            "input": {"command": corpus.text(12)},
                        }
                    ],
                },
            }
        )
        records.append(
            {
                **base,
                "type": "user",
                "uuid": f"{session}-{turn}r",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tool, "content": corpus.output()}
                    ],
                },
            }
        )
        if full(records):
            break
    return records


def full(records: list[dict[str, Any]]) -> bool:
    """Enough records for a session of about SESSION_BYTES."""
    return len(records) * 1400 >= SESSION_BYTES


def cli_seconds(home: Path, query: str) -> float:
    """Wall seconds of ``memoryd recall HOME QUERY`` as a process."""
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "memoryd", "recall", str(home), query],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - began


def daemon_status(homes: dict[str, Path]) -> Path:
    """The status file a daemon tailing ``homes`` writes, nothing pending (this process
    stands for the daemon: it is alive)."""
    record = {
        "pid": os.getpid(),
        "written": time.time(),
        "rescan_seconds": 300.0,
        "sources": [
            {
                "kind": kind,
                "path": str(home),
                "root": str(home.resolve()),
                "pending_changes": 0,
                "last_pass": time.time(),
                "error": None,
            }
            for kind, home in homes.items()
        ],
    }
    path = state_dir() / STATUS_FILE
    path.write_text(json.dumps(record))
    return path


def codex_session(corpus: Corpus, session: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [
        {
            "timestamp": stamp(0),
            "type": "session_meta",
            "payload": {"id": session, "cwd": "/home/dev/proj", "cli_version": "0.46.0"},
        }
    ]
    for turn in range(10_000):
        call = f"call_{session[:8]}{turn}"
        for payload in (
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": corpus.text(60)}],
            },
            {
                "type": "function_call",
                "name": "shell",
                "call_id": call,
                "arguments": json.dumps({"command": ["bash", "-lc", corpus.text(12)]}),
            },
            {"type": "function_call_output", "call_id": call, "output": corpus.output()},
        ):
            records.append({"timestamp": stamp(turn), "type": "response_item", "payload": payload})
        if full(records):
            break
    return records


def gemini_session(corpus: Corpus, session: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [
        {"sessionId": session, "projectHash": "abc123", "startTime": stamp(0), "kind": "main"}
    ]
    for turn in range(10_000):
        records.append(
            {
                "id": f"{session}-{turn}u",
                "timestamp": stamp(turn),
                "type": "user",
                "content": [{"text": corpus.text(60)}],
            }
        )
        records.append(
            {
                "id": f"{session}-{turn}g",
                "timestamp": stamp(turn),
                "type": "gemini",
                "content": [{"text": corpus.text(20)}],
                "toolCalls": [
                    {
                        "id": f"run-{turn}",
                        "name": "run_shell_command",
                        "args": {"command": corpus.text(12)},
                        "status": "success",
                        "result": [{"functionResponse": {"response": {"output": corpus.output()}}}],
                    }
                ],
            }
        )
        if full(records):
            break
    return records


def generate(base: Path, mb: int) -> tuple[dict[str, Path], list[Path], list[str]]:
    """Three homes of about ``mb`` MB together; their files and the rare markers."""
    homes = {"claude-code": base / "claude", "codex": base / "codex", "gemini": base / "gemini"}
    writers = {"claude-code": claude_session, "codex": codex_session, "gemini": gemini_session}
    corpus = Corpus(7)
    files: list[Path] = []
    budget = mb << 20
    number = written = 0
    while written < budget:
        for source, home in homes.items():
            session = f"{number:08x}-0000-4000-8000-{number:012x}"
            if source == "claude-code":
                path = home / "projects" / f"-home-dev-proj{number % 5}" / f"{session}.jsonl"
            elif source == "codex":
                path = (
                    home
                    / "sessions"
                    / "2026"
                    / "03"
                    / f"{number % 28 + 1:02d}"
                    / f"rollout-2026-03-01T10-00-00-{session}.jsonl"
                )
            else:
                path = (
                    home
                    / "tmp"
                    / f"hash{number % 5}"
                    / "chats"
                    / f"session-2026-03-01T10-00-{session[:8]}.jsonl"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            records = writers[source](corpus, session)
            data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)
            path.write_bytes(data)
            written += len(data)
            files.append(path)
        number += 1
    return homes, files, corpus.rare


HISTORY_DAYS = 90


def spread_times(files: list[Path]) -> None:
    """The files' times spread over the ``HISTORY_DAYS`` before now, oldest first."""
    now = time.time()
    for number, path in enumerate(files):
        then = now - (len(files) - number) / len(files) * HISTORY_DAYS * 86400
        os.utime(path, (then, then))


def force_full_look(home: Path, kind: str) -> None:
    """As if the last look at every file of ``home`` was long ago."""
    conn = store.connect(store.index_path(home.resolve(), kind))
    with conn:
        conn.execute("UPDATE meta SET value = '0' WHERE key = ?", (FULL_LOOK_KEY,))
    conn.close()


def cat_seconds(files: list[Path]) -> float:
    started = time.perf_counter()
    for at in range(0, len(files), 200):
        subprocess.run(
            ["cat", *map(str, files[at : at + 200])], stdout=subprocess.DEVNULL, check=True
        )
    return time.perf_counter() - started


def floor(homes: dict[str, Path], scratch: Path) -> tuple[float, float, int, float]:
    """The least any FTS5 index of the corpus can cost: (seconds to parse every line with
    the C JSON decoder, seconds to insert every message's text, already extracted and in
    memory, into a bare FTS5 table with the same tokenizer in one transaction, no journal,
    no sync; the texts' UTF-8 bytes; and the seconds of the same insert into a table of
    the index's own columns: the passages as memoryd cuts them, with
    their identifier parts and character pairs, cut beforehand). A home at a time, so
    that one third is held."""
    parse_s = insert_s = schema_s = 0.0
    text_bytes = 0
    for source, home in homes.items():
        blobs = [path.read_bytes() for path in sorted(home.rglob("*.jsonl"))]
        lines = [line for blob in blobs for line in blob.split(b"\n") if line]
        del blobs
        began = time.perf_counter()
        for line in lines:
            json.loads(line)
        parse_s += time.perf_counter() - began
        parser = PARSERS[source]
        texts = [(m.text,) for line in lines for m in parser(line).messages]
        del lines
        text_bytes += sum(len(text.encode()) for (text,) in texts)
        rows = [row for n, (text,) in enumerate(texts, 1) for row in passage_rows(n, text)]
        for kind, columns, insert, values in (
            ("bare", f"body, tokenize = '{TOKENIZER}'", "INSERT INTO t(body) VALUES (?)", texts),
            (
                "schema",
                f"body, parts, pairs, tokenize = '{TOKENIZER}'",
                "INSERT INTO t(rowid, body, parts, pairs) VALUES (?, ?, ?, ?)",
                rows,
            ),
        ):
            path = scratch / f"floor-{source}-{kind}.sqlite"
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("PRAGMA journal_mode = OFF")
            conn.execute("PRAGMA synchronous = OFF")
            conn.execute(f"CREATE VIRTUAL TABLE t USING fts5({columns})")
            began = time.perf_counter()
            conn.execute("BEGIN")
            conn.executemany(insert, values)
            conn.execute("COMMIT")
            took = time.perf_counter() - began
            if kind == "bare":
                insert_s += took
            else:
                schema_s += took
            conn.close()
            path.unlink()
    return parse_s, insert_s, text_bytes, schema_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--session-kb", type=int, default=100)
    args = parser.parse_args()
    global SESSION_BYTES
    SESSION_BYTES = args.session_kb << 10
    base = Path(tempfile.mkdtemp(prefix="memoryd-sources-bench-", dir="/tmp"))
    os.environ["XDG_STATE_HOME"] = str(base / "state")
    try:
        started = time.perf_counter()
        homes, files, rare = generate(base / "corpus", args.mb)
        spread_times(files)
        size = sum(path.stat().st_size for path in files)
        took = time.perf_counter() - started
        print(f"corpus: {size / 1e6:.0f} MB in {len(files)} files, written in {took:.0f} s")
        cat = statistics.median(cat_seconds(files) for _ in range(3))
        parse_s, insert_s, text_bytes, schema_s = floor(homes, base)
        print(
            f"floor: JSON parse of every line (C decoder) {parse_s:.1f} s = {parse_s / cat:.0f}x "
            f"cat; the {text_bytes / 1e6:.0f} MB of message text into a bare FTS5 table "
            f"{insert_s:.1f} s = {insert_s / cat:.0f}x cat; together {parse_s + insert_s:.1f} s "
            f"= {(parse_s + insert_s) / cat:.0f}x cat. The same passages into a table of the "
            f"index's columns (parts, pairs): {schema_s:.1f} s = "
            f"{schema_s / insert_s:.2f}x the bare insert",
            flush=True,
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        machine_started = busy_seconds()
        per_source = {}
        for source, home in homes.items():
            began = time.perf_counter()
            result = update(home.resolve(), source)
            assert result is not None
            per_source[source] = (time.perf_counter() - began, result.added)
            print(
                f"  {source}: {per_source[source][0]:.1f} s, {result.added:,} messages", flush=True
            )
        first = time.perf_counter() - started
        first_cpu = time.process_time() - cpu_started
        machine_cpu = busy_seconds() - machine_started
        index_mb = sum(p.stat().st_size for p in (base / "state").rglob("*.sqlite*")) / 1e6
        least = parse_s + insert_s
        print(
            f"first index: {first / least:.2f}x the floor ({least:.1f} s; target <= 1.5x); "
            f"the floor is {least / cat:.0f}x cat; {first / (parse_s + schema_s):.2f}x the "
            f"floor with the index's columns ({parse_s + schema_s:.1f} s); the machine's CPU "
            f"{machine_cpu:.1f} s = {machine_cpu / least:.2f}x the floor",
            flush=True,
        )
        print(
            f"first index: {first:.1f} s = {size / 1e6 / first:.1f} MB/s; cat {cat:.2f} s = "
            f"{size / 1e6 / cat:.0f} MB/s; ratio {first / cat:.1f}x cat (target <= 10x); "
            f"CPU {first_cpu:.1f} s "
            f"({size / 1e6 / first_cpu:.1f} MB/s of CPU); index {index_mb:.0f} MB",
            flush=True,
        )
        cat_after = cat_seconds(files)
        print(f"cat again after indexing: {cat_after:.2f} s", flush=True)

        target = next(f for f in files if "sessions" in f.parts)
        appended, walked = [], []
        for n in range(args.rounds):
            extra = {
                "timestamp": stamp(n),
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {
                            "type": "input_text",
                            "text": ("appended words " * 60)[:950] + f" tailmark{n}q",
                        }
                    ],
                },
            }
            with target.open("ab") as file:
                file.write(json.dumps(extra).encode() + b"\n")
            began = time.perf_counter()
            result = update(homes["codex"].resolve(), "codex", changed=[target])
            appended.append(time.perf_counter() - began)
            assert result is not None and result.added == 1, result
            began = time.perf_counter()
            result = update(homes["codex"].resolve(), "codex")
            walked.append(time.perf_counter() - began)
            assert result is not None and result.added == 0, result
        print(
            f"1 KB appended, indexed as on a watch event: p50 "
            f"{statistics.median(appended) * 1000:.1f} ms, max {max(appended) * 1000:.1f} ms "
            f"(target <= 50 ms); a full pass that finds nothing new (the rescan): p50 "
            f"{statistics.median(walked) * 1000:.1f} ms",
            flush=True,
        )
        rng = random.Random(3)
        times: dict[str, list[float]] = {"rare": [], "common": [], "very common": []}
        for n in range(args.rounds):
            home = homes[list(homes)[n % 3]]
            times["rare"].append(timed(home, rng.choice(rare), must_find=False))
            times["common"].append(timed(home, COMMON, must_find=True))
            times["very common"].append(timed(home, VERY_COMMON, must_find=True))
        p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
        print(
            f"recall p50: rare (1 message) {p50['rare']:.1f} ms (target <= 50); common "
            f"({COMMON!r}, 1 message in 100) {p50['common']:.1f} ms (target <= 150); very "
            f"common ({VERY_COMMON!r}, each in 40%+) {p50['very common']:.1f} ms",
            flush=True,
        )
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(common.REPO / "memoryd")],
            stdout=subprocess.DEVNULL,
            check=True,
        )
        looks, full_looks, cli, cli_daemon, bare = [], [], [], [], []
        for n in range(args.rounds):
            kind, home = list(homes.items())[n % 3]
            began = time.perf_counter()
            result = update(home.resolve(), kind)
            looks.append(time.perf_counter() - began)
            assert result is not None and result.added == 0, result
            cli.append(cli_seconds(home, COMMON))
            bare.append(timed_run([sys.executable, "-c", "pass"]))
        for n in range(max(3, args.rounds // 3)):
            kind, home = list(homes.items())[n % 3]
            force_full_look(home, kind)
            began = time.perf_counter()
            result = update(home.resolve(), kind)
            full_looks.append(time.perf_counter() - began)
            assert result is not None and result.added == 0, result
        status = daemon_status(homes)
        for n in range(args.rounds):
            cli_daemon.append(cli_seconds(list(homes.values())[n % 3], COMMON))
        status.unlink()
        startup = statistics.median(
            timed_run([sys.executable, "-m", "memoryd", "--version"]) for _ in range(5)
        )
        look_p50, cli_p50 = statistics.median(looks) * 1000, statistics.median(cli) * 1000
        bare_p50 = statistics.median(bare) * 1000
        print(
            f"warm CLI query over {len(files):,} files: p50 {cli_p50:.0f} ms wall (target <= "
            f"150; max {max(cli) * 1000:.0f}), of which the look for changes p50 "
            f"{look_p50:.1f} ms (target <= 20; {look_p50 / cli_p50:.0%}); yardstick "
            f"`python -c pass` p50 {bare_p50:.0f} ms: the query is {cli_p50 / bare_p50:.1f}x "
            f"it; the full look (every file, once a minute) p50 "
            f"{statistics.median(full_looks) * 1000:.0f} ms; with the daemon tailing the "
            f"homes (no look) p50 {statistics.median(cli_daemon) * 1000:.0f} ms; "
            f"`memoryd --version` alone {startup * 1000:.0f} ms",
            flush=True,
        )
        saved = common.save(
            "sources",
            {
                "corpus_bytes": size,
                "files": len(files),
                "cat_seconds": cat,
                "floor_parse_seconds": parse_s,
                "floor_fts5_seconds": insert_s,
                "floor_fts5_schema_seconds": schema_s,
                "floor_text_bytes": text_bytes,
                "first_index_seconds": first,
                "first_index_cpu_seconds": first_cpu,
                "first_index_machine_cpu_seconds": machine_cpu,
                "per_source": per_source,
                "index_mb": index_mb,
                "append_ms": [t * 1000 for t in appended],
                "rescan_ms": [t * 1000 for t in walked],
                "recall_ms": {name: [t * 1000 for t in v] for name, v in times.items()},
                "look_ms": [t * 1000 for t in looks],
                "full_look_ms": [t * 1000 for t in full_looks],
                "python_start_ms": [t * 1000 for t in bare],
                "cli_query_ms": [t * 1000 for t in cli],
                "cli_query_daemon_ms": [t * 1000 for t in cli_daemon],
                "cli_startup_ms": startup * 1000,
                "load_average": os.getloadavg(),
            },
        )
        print(f"raw figures: {saved}")
        print(f"load average at the end: {os.getloadavg()}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def busy_seconds() -> float:
    """CPU seconds every process of the machine has used since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def timed_run(argv: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def timed(home: Path, query: str, *, must_find: bool) -> float:
    """Seconds of one ``recall_source`` (index brought up to date first, as the CLI does)."""
    began = time.perf_counter()
    hits = recall_source(home, query)
    took = time.perf_counter() - began
    assert hits or not must_find, query
    return took


if __name__ == "__main__":
    main()
