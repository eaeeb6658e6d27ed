"""The ``[[sources]]`` lines of ``memoryd status``: what the daemon's tailer last wrote to
``daemon.json`` in the sources' state folder (no index is opened: status stays fast)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from memoryd import strict_json
from memoryd.search.sessions.places import STATUS_FILE, state_dir


def source_rows(configured: Sequence[Any], now: float | None = None) -> list[dict[str, Any]]:
    """One row per configured source (``kind``, ``path``): its figures as the daemon last
    wrote them, with how old they are; ``daemon: "no figures"`` when it wrote none."""
    try:
        written = strict_json.loads((state_dir() / STATUS_FILE).read_bytes())
        known = {(row["kind"], row["path"]): row for row in written["sources"]}
        age = round((time.time() if now is None else now) - float(written["written"]), 1)
    except (OSError, ValueError, KeyError, TypeError):
        known, age = {}, None
    rows = []
    for entry in configured:
        row = known.get((entry.kind, str(entry.path)))
        base = {"kind": entry.kind, "path": str(entry.path)}
        rows.append(
            {**base, **row, "figures_age_seconds": age} if row else {**base, "daemon": "no figures"}
        )
    return rows


def render_sources(rows: list[dict[str, Any]]) -> str:
    """Human lines: kind, path, sessions, lines and messages indexed, lag."""
    out = ["", "sources (other agents' sessions, kept indexed by the daemon):"]
    for row in rows:
        if "daemon" in row:
            out.append(f"  {row['kind']:<12} {row['path']}  not indexed by a running daemon")
            continue
        error = f"  error: {row['error']}" if row.get("error") else ""
        out.append(
            f"  {row['kind']:<12} {row['path']}  {row.get('sessions', 0)} sessions, "
            f"{row.get('lines', 0):,} lines, {row.get('messages', 0):,} messages indexed, "
            f"lag {row.get('lag_seconds', 0):g} s, {row.get('pending_changes', 0)} changes "
            f"pending (as of {row['figures_age_seconds']:g} s ago){error}"
        )
    return "\n".join(out) + "\n"
