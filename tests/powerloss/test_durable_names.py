"""A name is durable before what it holds is: the first line appended to a new file
fsyncs the folders above it up to the workspace, because the daemon's first start makes
``.memoryd`` without an fsync (it puts only derived files there). A power cut cannot be
made here, so the test records which folders are fsynced, by inode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memoryd.daemon.folders import Folders
from memoryd.files.fsutil import append_line


def fsynced_inodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return synced


def test_the_first_line_of_a_new_file_fsyncs_every_folder_up_to_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with Folders(workspace) as folders:
        folders.ensure_meta()
    synced = fsynced_inodes(monkeypatch)
    append_line(workspace / ".memoryd" / "events.jsonl", b"{}\n", root=workspace)
    meta = (workspace / ".memoryd").stat().st_ino
    assert workspace.stat().st_ino in synced
    assert meta in synced
    assert (workspace / ".memoryd" / "events.jsonl").stat().st_ino in synced


def test_a_later_line_fsyncs_only_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".memoryd").mkdir(parents=True)
    events = workspace / ".memoryd" / "events.jsonl"
    append_line(events, b"{}\n", root=workspace)
    synced = fsynced_inodes(monkeypatch)
    append_line(events, b"{}\n", root=workspace)
    assert synced == [events.stat().st_ino]
