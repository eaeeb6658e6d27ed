"""A configuration file's parsed TOML, kept in ``$XDG_CACHE_HOME/memoryd/`` as ``marshal``
data, so that a per-message command reads it without importing ``tomllib`` (which costs
about a bare interpreter's start; docs/design.md#startup).

An entry holds the file's bytes and what they parse to, and is used only when the file's
bytes are exactly the cached ones: any change, however small, is parsed again. A missing,
torn or foreign entry is a miss, never an error, and a cache that cannot be written is
skipped: the cache only ever saves time. Values TOML can hold that ``marshal`` cannot
(dates and times) are not cached, and neither is a file that names an API key: a secret
is never copied out of the file its owner put it in.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import zlib
from pathlib import Path

from memoryd.errors import MemorydError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

VERSION = 1
"""Raised when what an entry holds changes."""
SECRET = "api_key"
"""A file that sets a key of this name (``anthropic.api_key``, ``openai.api_key``), in any
table, is not cached."""


def parsed(raw: bytes, path: Path, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """``raw`` (the bytes of the configuration file ``path``) parsed as TOML, from the
    cache when it holds these very bytes. Raises what ``tomllib.loads`` raises."""
    entry = entry_path(path, env)
    if entry is not None:
        try:
            with open(entry, "rb") as cached:
                held = marshal.load(cached)
            if type(held) is tuple and held[:2] == (VERSION, raw) and type(held[2]) is dict:
                data: dict[str, Any] = held[2]
                return data
        except (OSError, EOFError, ValueError, TypeError, IndexError):
            pass
    import tomllib

    data = tomllib.loads(raw.decode())
    if entry is not None and not _holds_a_secret(data):
        _store(entry, (VERSION, raw, data))
    return data


def _holds_a_secret(data: Mapping[str, Any]) -> bool:
    return any(
        key == SECRET or (isinstance(value, dict) and _holds_a_secret(value))
        for key, value in data.items()
    )


def entry_path(path: Path, env: Mapping[str, str]) -> Path | None:
    """Where the entry of the configuration file ``path`` lives (one per absolute path),
    or None when there is no cache folder to use."""
    base = env.get("XDG_CACHE_HOME", "")
    if not (base and os.path.isabs(base)):
        home = env.get("HOME") or os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    name = os.path.abspath(path).encode(errors="surrogateescape")
    return Path(base, "memoryd", f"config-{zlib.crc32(name):08x}.marshal")


def _store(entry: Path, held: tuple[int, bytes, dict[str, Any]]) -> None:
    try:
        data = marshal.dumps(held)
    except ValueError:
        return  # a date or a time: parsed each time
    from memoryd.files.fsutil import atomic_write  # here: a cache hit never writes

    with contextlib.suppress(OSError, MemorydError):
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(entry, data, 0o600, root=entry.parent, durable=False)
