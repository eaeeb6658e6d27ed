"""Recall and expand while real jobs commit and index in another process: a reader never
fails with "database is locked" and never waits for the indexer (docs/design.md#recall)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import WorkspaceFactory, encode_lines, generated_messages

from memoryd.search.archive import expand, recall

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 12
DEADLINE_S = 240.0

# Each round appends marked messages and runs a forced job: its background thread indexes
# the new archive while the next round already starts. Each round the index is dropped
# first, so it is also created and rebuilt from nothing while readers read it.
JOBS = """
import json, os, sys
from pathlib import Path
from memoryd.config.settings import load_settings
from memoryd.compaction.job.run import JobRequest, run_job
folder, config_home, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
settings = load_settings(
    overrides={"drain_seconds": 0, "token_limit": 4000, "summarizer.backend": "extractive"},
    env={"XDG_CONFIG_HOME": config_home},
).settings
for round_ in range(rounds):
    with (folder / "conversation.jsonl").open("ab") as file:
        for n in range(600):
            number = 10_000 * (round_ + 1) + n
            message = {"id": f"r-{number}", "role": "user", "timestamp": number,
                       "content": f"round {round_} words " * 20 + f"mark{number}q"}
            file.write(json.dumps(message).encode() + b"\\n")
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(folder / ".memoryd" / f"index.sqlite{suffix}")
        except FileNotFoundError:
            pass
    result = run_job(JobRequest(folder, settings, force=True))
    assert result.outcome == "completed", result.outcome
"""


def archived(folder: Path) -> dict[str, bytes]:
    """The original lines of the committed archives (up to the live summary's), by id."""
    found: dict[str, bytes] = {}
    with (folder / "conversation.jsonl").open("rb") as file:
        head = json.loads(file.readline())
    if not head.get("isSummary"):
        return found
    newest = folder / head["archive"]
    for path in sorted(newest.parent.iterdir()):
        if path.name > newest.name:
            continue
        for line in path.read_bytes().splitlines(keepends=True):
            message = json.loads(line)
            if not message.get("isSummary"):
                found[message["id"]] = line
    return found


def test_recall_and_expand_never_fail_while_jobs_commit_and_index(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    folder = workspace(messages=generated_messages(40, 300))
    (tmp_path / "xdg").mkdir()
    jobs = subprocess.Popen(
        [sys.executable, "-c", JOBS, str(folder), str(tmp_path / "xdg"), str(ROUNDS)],
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    calls = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < DEADLINE_S:
            done = jobs.poll() is not None
            lines = archived(folder)
            newest = sorted(i for i in lines if i.startswith("r-"))[-2:]
            for _ in range(5):
                for ident in newest:
                    # Indexed or not yet, a committed message is found and expanded.
                    assert expand(folder, ident) == [lines[ident]]
                    [hit] = recall(folder, f"mark{ident[2:]}q")
                    assert hit.id == ident
                    calls += 2
            if done:
                break
    finally:
        if jobs.poll() is None:
            jobs.kill()
        _, stderr = jobs.communicate(timeout=60)
    assert jobs.returncode == 0, stderr.decode()[-2000:]
    assert b"database is locked" not in stderr
    assert calls > 20
    assert len([i for i in archived(folder) if i.startswith("r-")]) > 600 * (ROUNDS - 1)


# Holds index.lock and an open write transaction on the index, as an indexer at work does,
# until its stdin closes.
INDEXER = """
import fcntl, os, sqlite3, sys
folder = sys.argv[1]
fd = os.open(os.path.join(folder, ".memoryd", "index.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
conn = sqlite3.connect(os.path.join(folder, ".memoryd", "index.sqlite"), isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO archives(name, size, messages, passages) VALUES ('in-progress', 0, 0, 0)")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_reader_does_not_wait_for_an_indexer_at_work(workspace: WorkspaceFactory) -> None:
    folder = workspace(messages=generated_messages(40, 300))
    for round_ in range(2):
        with (folder / "conversation.jsonl").open("ab") as file:
            file.write(encode_lines(generated_messages(40 * (round_ + 2), 300)[-40:]))
        cli_summarize = [sys.executable, "-m", "memoryd", "summarize", "--force", str(folder)]
        # The second job's archive is left for the next indexer (or reader) to index.
        env = {**os.environ, "MEMORYD_INDEX_ARCHIVE": "true" if round_ == 0 else "false"}
        subprocess.run(
            cli_summarize, cwd=REPO, env=env, check=True, capture_output=True, timeout=120
        )
        if round_ == 0:
            assert (folder / ".memoryd" / "index.sqlite").is_file()
    lines = archived(folder)
    first, second = sorted((folder / ".memoryd" / "archive").iterdir())
    ids = [json.loads(path.read_bytes().splitlines()[-1])["id"] for path in (first, second)]
    indexer = subprocess.Popen(
        [sys.executable, "-c", INDEXER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert indexer.stdout is not None and indexer.stdout.readline() == b"held\n"
        for ident in ids:  # indexed by the first job; by nobody yet
            expanded = subprocess.run(
                [sys.executable, "-m", "memoryd", "expand", str(folder), ident],
                cwd=REPO,
                capture_output=True,
                timeout=60,
            )
            assert expanded.returncode == 0, expanded.stderr.decode()
            assert expanded.stdout == lines[ident]
            assert ident in [hit.id for hit in recall(folder, ident, limit=50)]
    finally:
        indexer.kill()
        indexer.communicate(timeout=60)
