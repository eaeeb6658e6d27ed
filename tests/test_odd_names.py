"""Workspaces whose folder name is not UTF-8 (a byte such as 0xff in the name, which
Python holds as a surrogate): recall over their root and expand in them work as for any
other workspace, and the index is brought up to date after a job without a failure."""

from __future__ import annotations

import os
from pathlib import Path

import structlog
from cli_helpers import cli

from memoryd.search.recall import expand, recall, update_index_in_background

ARCHIVE = ".memoryd/archive/conversation-20260101T000000Z-abcd.jsonl"
LINE = b'{"id":"m1","role":"user","content":"postgres hello"}\n'


def workspace(folder: Path) -> Path:
    (folder / ARCHIVE).parent.mkdir(parents=True)
    (folder / ARCHIVE).write_bytes(LINE)
    (folder / "conversation.jsonl").write_bytes(b"")
    return folder


def test_recall_and_expand_work_in_a_workspace_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Root-wide recall finds the message in both workspaces, the odd one included;
    ``expand`` gives the original line back; the commands exit 0."""
    root = tmp_path / "root"
    odd = workspace(root / os.fsdecode(b"bad-\xff"))
    workspace(root / "good")
    found = sorted(os.fsencode(hit.workspace) for hit in recall(root, "postgres"))
    assert found == sorted(os.fsencode(p) for p in (odd, root / "good"))
    assert b"".join(expand(odd, "m1")) == LINE
    assert cli("recall", str(root), "postgres")[0] == 0
    assert cli("recall", str(root), "postgres", "--json")[0] == 0
    assert cli("expand", str(odd), "m1") == (0, LINE.decode())


def test_the_index_of_such_a_workspace_is_updated_after_a_job_without_failure(
    tmp_path: Path,
) -> None:
    """What a worker runs after a commit brings the index up to date at once: no
    ``index_update_failed`` (which the daemon would log again after every job)."""
    odd = workspace(tmp_path / os.fsdecode(b"caf\xe9"))
    with structlog.testing.capture_logs() as logs:
        update_index_in_background(odd).join()
    assert [entry for entry in logs if entry["event"] == "index_update_failed"] == []
    assert (odd / ".memoryd" / "index.sqlite").stat().st_size > 0
