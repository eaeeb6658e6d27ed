"""Checks over a workspace's live file and its archive: every original line kept."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def archived(folder: Path) -> list[bytes]:
    archive = folder / ".memoryd" / "archive"
    return (
        [x for p in sorted(archive.glob("*.jsonl")) for x in lines(p)] if archive.exists() else []
    )


def originals_kept(folder: Path, original: list[bytes]) -> None:
    """Every original line once, byte for byte, in the live file or the archive; the other
    lines are a summary head and masked placeholders of archived originals."""
    live = lines(folder / "conversation.jsonl")
    everything = [*live, *archived(folder)]
    masked_ids = {json.loads(x)["id"] for x in everything if b'"isMasked"' in x}
    plain = [x for x in everything if b'"isMasked"' not in x and not json.loads(x).get("isSummary")]
    assert Counter(plain) == Counter(original)
    assert masked_ids <= {json.loads(x)["id"] for x in archived(folder)}
