"""Recall against the real daemon: it summarizes each strategy several times while
``memoryd recall`` runs, and afterwards every planted marker is found with its id and
expands to the bytes that were appended; a worker SIGKILLed while it indexes costs
nothing but a rebuild."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import Processes, pool_workers, read_events, wait_until

from memoryd.search.archive import expand, recall

REPO = Path(__file__).resolve().parents[2]
FILLER = "we looked at the build and talked it over " * 7


def append_marked(workspace: Path, tag: str, start: int, count: int) -> dict[str, bytes]:
    """Append ``count`` messages carrying the word ``<tag><n>q``, under the writers' lock;
    returns each line's bytes by id."""
    written = {}
    lock = workspace / ".memoryd" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    for n in range(start, start + count):
        message_id = f"{tag}-{n}"
        role = "user" if n % 2 == 0 else "assistant"
        record = {"id": message_id, "role": role, "content": f"{FILLER} {tag}{n:04d}q"}
        line = json.dumps({**record, "timestamp": 1_700_000_000_000 + n}).encode() + b"\n"
        with lock.open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            with (workspace / "conversation.jsonl").open("ab") as conversation:
                conversation.write(line)
        written[message_id] = line
    return written


def completed_jobs(workspace: Path) -> int:
    return sum(1 for e in read_events(workspace) if e["type"] == "summarize_completed")


def jobs_above(workspace: Path, count: int) -> bool:
    return completed_jobs(workspace) > count


def longer_than(items: list[Any], count: int) -> bool:
    return len(items) > count


def no_job_running(workspace: Path) -> bool:
    state = json.loads((workspace / ".memoryd" / "state.json").read_bytes())
    return not state["summarizing"]


def archived_ids(workspace: Path) -> set[str]:
    found = set()
    for archive in (workspace / ".memoryd" / "archive").glob("conversation-*.jsonl"):
        for line in archive.read_bytes().splitlines():
            message = json.loads(line)
            if not message.get("isSummary"):
                found.add(message["id"])
    return found


def memoryd(*argv: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv], env=env, capture_output=True, timeout=120
    )


@pytest.mark.slow
def test_every_marker_is_recalled_and_expanded_after_the_daemon_summarized_each_strategy(
    tmp_path: Path, procs: Processes
) -> None:
    root = tmp_path / "root"
    configs = {
        "nar": "",
        "rol": 'strategy = "rolling"\n[rolling]\ntoken_threshold = 10\n',
        "chk": 'strategy = "checkpoint"\n',
    }
    written: dict[str, dict[str, bytes]] = {tag: {} for tag in configs}
    for tag, config in configs.items():
        (root / tag / ".memoryd").mkdir(parents=True)
        (root / tag / ".memoryd" / "config.toml").write_text(config)
        (root / tag / "conversation.jsonl").write_bytes(b"")
    # No default pin: the context check below walks from the archive straight into the
    # kept part, which a pinned first message would stand between.
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "MEMORYD_TOKEN_LIMIT": "3000",
        "MEMORYD_KEEP_FIRST": "0",
    }
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()

    # Recall runs all along, while the daemon commits and indexes.
    stop = threading.Event()
    searches: list[subprocess.CompletedProcess[bytes]] = []

    def search_all_along() -> None:
        while not stop.is_set():
            searches.append(memoryd("recall", str(root), "nar* OR rol*", "--raw", "--json"))

    searcher = threading.Thread(target=search_all_along)
    searcher.start()
    try:
        for round_ in range(3):
            searched = len(searches)
            for tag in configs:
                written[tag].update(append_marked(root / tag, tag, 45 * round_, 45))
            for tag in configs:
                wait_until(partial(jobs_above, root / tag, round_), 60, f"{tag} job {round_}")
            # At least one whole search ran while this round was committed and indexed.
            wait_until(partial(longer_than, searches, searched + 1), 120, "searches")
    finally:
        stop.set()
        searcher.join(120)
    for tag in configs:
        wait_until(partial(archived_ids, root / tag), 10, "archives")
        wait_until(partial(no_job_running, root / tag), 30, "the last job")

    assert len(searches) >= 6
    for done in searches:
        assert done.returncode == 0, done.stderr
        assert b"locked" not in done.stderr and b"Traceback" not in done.stderr
        json.loads(done.stdout)

    for tag in configs:
        workspace = root / tag
        archived = archived_ids(workspace)
        assert len(archived) >= 45, tag
        for message_id in archived:
            n = int(message_id.rsplit("-", 1)[1])
            hits = recall(workspace, f"{tag}{n:04d}q")
            assert [hit.id for hit in hits] == [message_id]
            assert expand(workspace, message_id) == [written[tag][message_id]]
        done = memoryd("recall", str(workspace), f"{tag}*", "--json", "--limit", "1000")
        assert {hit["id"] for hit in json.loads(done.stdout)} == archived
        # Context runs on across archives into the live conversation.
        numbers = sorted(int(i.rsplit("-", 1)[1]) for i in archived)
        target = max(n for n in numbers if f"{tag}-{n + 2}" in written[tag])
        done = memoryd("expand", str(workspace), f"{tag}-{target}", "--before", "1", "--after", "2")
        around = [f"{tag}-{target + k}" for k in (-1, 0, 1, 2)]
        assert done.stdout == b"".join(written[tag][i] for i in around)
    assert not [r for r in daemon.logged("index_update_failed")]


@pytest.mark.slow
def test_a_worker_sigkilled_while_indexing_costs_only_a_rebuild(
    tmp_path: Path, procs: Processes
) -> None:
    """An archive from before the index existed (30 MB) is indexed by the worker after its
    first job; SIGKILL the worker in the middle: recall still finds every message, and the
    daemon goes on summarizing and indexing."""
    root = tmp_path / "root"
    workspace = root / "ws"
    (workspace / ".memoryd" / "archive").mkdir(parents=True)
    old = b"".join(
        json.dumps(
            {"id": f"old-{n}", "role": "user", "content": f"{FILLER * 3} old{n:05d}q"}
        ).encode()
        + b"\n"
        for n in range(25_000)
    )
    (
        workspace / ".memoryd" / "archive" / "conversation-20250101T000000000000Z-abc123.jsonl"
    ).write_bytes(old)
    (workspace / "conversation.jsonl").write_bytes(b"")
    written = append_marked(workspace, "new", 0, 45)
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "MEMORYD_TOKEN_LIMIT": "3000",
        "MEMORYD_WORKERS": "1",
    }
    daemon = procs.daemon([root], tmp_path, env)
    daemon.wait_ready()
    wal = workspace / ".memoryd" / "index.sqlite-wal"
    wait_until(lambda: wal.exists() and wal.stat().st_size > (2 << 20), 60, "the worker indexing")
    workers = pool_workers(daemon.pid)
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    assert not daemon.logged("index_updated")

    assert [hit.id for hit in recall(workspace, "old24999q")] == ["old-24999"]
    assert [hit.id for hit in recall(workspace, "old00000q")] == ["old-0"]
    new_archived = archived_ids(workspace) - {f"old-{n}" for n in range(25_000)}
    assert new_archived
    for message_id in new_archived:
        n = int(message_id.rsplit("-", 1)[1])
        assert [hit.id for hit in recall(workspace, f"new{n:04d}q")] == [message_id]
        assert expand(workspace, message_id) == [written[message_id]]

    written.update(append_marked(workspace, "new", 45, 45))
    wait_until(lambda: completed_jobs(workspace) >= 2, 60, "the next job")
    daemon.wait_log("index_updated", workspace=str(workspace), timeout=60)
    assert daemon.process is not None and daemon.process.poll() is None
