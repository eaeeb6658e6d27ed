"""Where the sources' indexes and the daemon's figures of them live (no SQLite here: the
per-turn ``memoryd status`` reads the figures)."""

from __future__ import annotations

import os
from pathlib import Path

STATUS_FILE = "daemon.json"
"""What the daemon's tailer last indexed, per source (written after each pass)."""


def state_dir() -> Path:
    """``$XDG_STATE_HOME/memoryd/sources`` (``~/.local/state`` when unset or relative)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    home = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return home / "memoryd" / "sources"
