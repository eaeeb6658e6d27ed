"""One request at a time to a server whose shared cache ran full
(docs/design.md#openai-compatible).

llama.cpp's ``llama-server`` shares one cache of ``-c`` tokens among its slots; under
concurrent requests that together outgrow it, it answers "Context size has been
exceeded." (a ``server_error``), or stops an answer early where the cache ends. Such an
answer proves no limit (each request alone fits); the fix is fewer requests at once.
After one, for :data:`CROWDED_S` seconds, every memoryd process (the daemon's workers,
a foreground ``memoryd summarize``) sends that server one request at a time: a marker
file per server says until when (its modification time), and a lock file per server
(``flock``, released when its holder closes it or exits) is held for each request.

Both live in ``$XDG_STATE_HOME/memoryd/servers/`` (``~/.local/state`` when unset), named
by a hash of the server's key, never by its URL. When that folder cannot be used, requests
are sent as before: this only ever reduces concurrency.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from memoryd.llm.completion import Completion, Failure, seconds

log = structlog.get_logger()

CROWDED_S = 600.0
"""Seconds a server is sent one request at a time after its shared cache ran full."""
POLL_S = 0.2
"""How often a request waiting for its turn tries the lock again."""


def servers_dir() -> Path:
    """``$XDG_STATE_HOME/memoryd/servers`` (``~/.local/state`` when unset or relative)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    home = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return home / "memoryd" / "servers"


def _path(key: str, suffix: str) -> Path:
    return servers_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.{suffix}"


def mark_crowded(key: str, now: float | None = None) -> None:
    """Send the server of ``key`` one request at a time for the next :data:`CROWDED_S`."""
    marker = _path(key, "crowded")
    moment = time.time() if now is None else now
    try:
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.utime(fd, (moment, moment))
        finally:
            os.close(fd)
    except OSError as error:
        log.warning("server_crowding_unrecorded", error=type(error).__name__)
        return
    log.info("server_crowded", server_hash=marker.stem, seconds=CROWDED_S)


def crowded(key: str, now: float | None = None) -> bool:
    """Whether the server of ``key`` is sent one request at a time now."""
    try:
        marked = os.stat(_path(key, "crowded"), follow_symlinks=False).st_mtime
    except OSError:
        return False
    moment = time.time() if now is None else now
    return moment - marked < CROWDED_S


@contextlib.contextmanager
def in_turn(key: str, ends_at: float) -> Iterator[bool]:
    """Held around one request: True once it is this request's turn (at once when the
    server is not crowded), False when ``ends_at`` (``time.monotonic()``) came first."""
    if not crowded(key):
        yield True
        return
    try:
        fd = os.open(
            _path(key, "lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError:
        yield True
        return
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= ends_at:
                    yield False
                    return
                time.sleep(POLL_S)
        yield True
    finally:
        os.close(fd)


def attempt_in_turn(
    key: str, ends_at: float, deadline: float, attempt: Callable[[], Completion | Failure]
) -> Completion | Failure:
    """``attempt()`` in its turn (:func:`in_turn`); a failure, not retried, when the
    server's other requests took past the deadline."""
    with in_turn(key, ends_at) as turn:
        if not turn:
            return Failure(
                "the server's other requests (one at a time: its shared cache ran full) "
                f"took past the {seconds(deadline)} s deadline",
                retryable=False,
            )
        return attempt()
