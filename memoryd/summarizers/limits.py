"""The contexts learned from servers' overflows, in this process (docs/design.md#openai-compatible).

A backend that learns a server's context records it here under :func:`server_key`; a job
starts by remembering what the daemon learned before (``JobRequest.context_limits``) and
hands back what it knows now (``JobResult.context_limits``), so the daemon keeps them for
its lifetime and every worker starts from them. A context only ever shrinks.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

_learned: dict[str, int] = {}
_lock = threading.Lock()


def server_key(base_url: str, model: str) -> str:
    """The key of one model on one server."""
    return f"{base_url.rstrip('/')} {model}"


def learned_limit(key: str) -> int | None:
    """The smallest context learned for ``key`` in this process, or None."""
    with _lock:
        return _learned.get(key)


def learn(limits: Mapping[str, int]) -> None:
    """Remember contexts; a key already known keeps the smaller of the two."""
    with _lock:
        _learned.update(merged(_learned, limits))


def learned_limits() -> dict[str, int]:
    """Every context learned in this process (a copy)."""
    with _lock:
        return dict(_learned)


def merged(known: Mapping[str, int], new: Mapping[str, int]) -> dict[str, int]:
    """``known`` with ``new`` folded in, the smaller context winning (pure)."""
    result = dict(known)
    for key, limit in new.items():
        if limit > 0:
            result[key] = min(limit, result.get(key, limit))
    return result
