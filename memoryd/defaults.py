"""Defaults that code outside the Settings model needs too (the monitor, the level text,
the stores' functions): each is written here once, and ``memoryd.config.settings`` uses them.

A module of plain constants, so that what imports it does not import pydantic.
"""

from __future__ import annotations

DEFAULT_TOKEN_LIMIT = 100_000
DEFAULT_WARNING_AT = 0.70
DEFAULT_CRITICAL_AT = 0.85
DEFAULT_MEMORY_THRESHOLD = 50
DEFAULT_KEEP_BOOKMARKS = 10
DEFAULT_MAX_ENTRY_BYTES = 16 * 1024
