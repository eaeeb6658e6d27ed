"""The contexts learned from servers, in this process (docs/design.md#openai-compatible).

A backend that learns a server's context records it here under :func:`server_key`, with
what proved it (its source) and when; a job starts by remembering what the daemon learned
before (``JobRequest.context_limits``) and hands back what it knows now
(``JobResult.context_limits``), so the daemon keeps them and every worker starts from
them. Of two limits known for one server the smaller wins; a limit expires
:data:`LIMIT_TTL` seconds after it was learned, because a server may restart with a
larger context.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

LIMIT_TTL = 900.0
"""Seconds a learned context is believed; then the next request finds out again."""


@dataclass(frozen=True, slots=True)
class LearnedLimit:
    """A server's context in memoryd's estimated tokens, what proved it, and when
    (``time.time()``)."""

    tokens: int
    source: str
    learned_at: float

    def expires_at(self) -> float:
        return self.learned_at + LIMIT_TTL

    def fields(self) -> dict[str, object]:
        """The limit as log fields."""
        return {
            "context_tokens": self.tokens,
            "source": self.source,
            "expires_at": round(self.expires_at(), 3),
        }


_learned: dict[str, LearnedLimit] = {}
_lock = threading.Lock()


def server_key(base_url: str, model: str) -> str:
    """The key of one model on one server."""
    return f"{base_url.rstrip('/')} {model}"


def learned_limit(key: str, now: float | None = None) -> LearnedLimit | None:
    """The context learned for ``key`` in this process and not yet expired, or None."""
    moment = time.time() if now is None else now
    with _lock:
        known = _learned.get(key)
        if known is not None and known.expires_at() <= moment:
            del _learned[key]
            return None
        return known


def learn(limits: Mapping[str, LearnedLimit], now: float | None = None) -> None:
    """Remember contexts; a key already known keeps the smaller of the two."""
    moment = time.time() if now is None else now
    with _lock:
        fresh = merged(_learned, limits, moment)
        _learned.clear()
        _learned.update(fresh)


def forget() -> None:
    """Forget every context learned in this process (a benchmark's fresh start)."""
    with _lock:
        _learned.clear()


def learned_limits(now: float | None = None) -> dict[str, LearnedLimit]:
    """Every context learned in this process and not yet expired (a copy)."""
    moment = time.time() if now is None else now
    with _lock:
        return merged(_learned, {}, moment)


def merged(
    known: Mapping[str, LearnedLimit], new: Mapping[str, LearnedLimit], now: float
) -> dict[str, LearnedLimit]:
    """``known`` with ``new`` folded in, the smaller context winning, the expired left
    out (pure)."""
    result = {key: limit for key, limit in known.items() if limit.expires_at() > now}
    for key, limit in new.items():
        if limit.tokens <= 0 or limit.expires_at() <= now:
            continue
        current = result.get(key)
        if current is None or limit.tokens < current.tokens:
            result[key] = limit
    return result


def describe(limit: LearnedLimit) -> str:
    """``~4,096 tokens (the server's overflow reply named n_ctx 4096), until 13:20 UTC``."""
    until = time.strftime("%H:%M UTC", time.gmtime(limit.expires_at()))
    return f"~{limit.tokens:,} tokens ({limit.source}), until {until}"
