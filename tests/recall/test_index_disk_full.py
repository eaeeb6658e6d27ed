"""A full disk while the recall index is written: the error says the disk is full (SQLite's
"database or disk is full"; the index is a cache, the archive intact), never that the index
is damaged, and nothing is rebuilt for it; once there is room, the index is brought up to
date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fs_helpers import fill_up, small_tmpfs
from structlog.testing import capture_logs

from memoryd.errors import MemorydError
from memoryd.search.archive import recall, update_index

ARCHIVE = ".memoryd/archive/conversation-20260101T000000Z-abcd.jsonl"


def test_a_full_disk_while_indexing_says_disk_full_not_damaged(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    with small_tmpfs(mount, size="16m"):
        folder = mount / "ws"
        (folder / ARCHIVE).parent.mkdir(parents=True)
        (folder / "conversation.jsonl").write_bytes(b"")
        lines = [
            json.dumps({"id": f"m{n}", "role": "user", "content": f"zebra{n} " + "word " * 150})
            for n in range(1200)
        ]
        archive = folder / ARCHIVE
        archive.write_text("\n".join(lines) + "\n")
        filler = fill_up(mount, leave=64 << 10)
        before = archive.read_bytes()
        with capture_logs() as logs, pytest.raises(MemorydError) as caught:
            update_index(folder)
        message = str(caught.value)
        assert message.endswith("index.sqlite: database or disk is full"), message
        assert "\n" not in message
        assert not any("damaged" in str(entry.get("reason", "")) for entry in logs), logs
        assert archive.read_bytes() == before
        filler.unlink()
        assert update_index(folder) == 1200
        assert recall(folder, "zebra7")[0].id == "m7"
