"""The one way memoryd writes a moment: UTC ISO-8601 with milliseconds and a ``Z``.

Every file that carries a time (HEARTBEAT.md, state.json, events, receipts) writes it
with :func:`iso_ms`. It runs once per workspace when a start tidies thousands of them,
so it formats the date itself instead of calling ``time.strftime`` (which looks the
time zone up again on each call), and formats each second once.
"""

from __future__ import annotations

import time

_last: tuple[int, str] = (-1, "")
"""The last whole second formatted, and its text (replaced whole: safe across threads)."""


def iso_ms(epoch_seconds: float) -> str:
    """``2026-11-22T10:00:00.000Z`` for ``epoch_seconds`` (milliseconds truncated)."""
    global _last
    second, ms = divmod(int(epoch_seconds * 1000), 1000)
    last = _last
    if last[0] != second:
        t = time.gmtime(second)
        text = (
            f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
            f"T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
        )
        last = _last = (second, text)
    return f"{last[1]}.{ms:03d}Z"
