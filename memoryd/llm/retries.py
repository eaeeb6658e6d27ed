"""When a Messages API call is worth another try, and after how long: the status and the
server's retry headers (pure; docs/design.md#summarizers).
"""

from __future__ import annotations

import email.utils
from collections.abc import Mapping


def parse_retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, else ``retry-after``.

    ``retry-after`` may be seconds or an HTTP date (compared with ``now``, epoch seconds).
    None when absent or unreadable; a date in the past gives 0.
    """
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - now)


def is_retryable_status(status: int, should_retry: str | None = None) -> bool:
    """Whether an HTTP error status is worth another try (``x-should-retry`` wins)."""
    if should_retry == "true":
        return True
    if should_retry == "false":
        return False
    return status in (408, 409, 429) or status >= 500
