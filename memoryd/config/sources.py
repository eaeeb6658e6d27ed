"""Where the configuration comes from: the file and the ``MEMORYD_*`` variables' names.

Plain Python (no pydantic), shared by the full loader (``memoryd.config.settings``) and the fast
path of the polled commands (``memoryd.config.fast``), so both find the same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from memoryd.errors import ConfigError

ENV_PREFIX = "MEMORYD_"
ENV_DELIMITER = "__"
CONFIG_ENV = "MEMORYD_CONFIG"
RESERVED_ENV = frozenset({CONFIG_ENV})
"""``MEMORYD_*`` variables that are not settings and so are not refused as unknown."""
LOG_LEVELS = ("debug", "info", "warning", "error")
WORKSPACE_KEYS = frozenset(
    {
        "token_limit",
        "strategy",
        "warning_at",
        "summarize_at",
        "critical_at",
        "keep_recent_ratio",
        "keep_first",
        "rolling",
        "checkpoint",
        "masking",
    }
)
"""The keys a workspace's ``.memoryd/config.toml`` may set: its budget and strategy."""
_HEADER_NAME_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def header_problem(headers: Mapping[str, str]) -> str | None:
    """Why ``headers`` cannot be sent as HTTP headers, or None (pure): a name must be an
    HTTP token, a value printable ASCII (a tab allowed) -- a line break would end the
    header and start another, a non-ASCII character cannot be encoded. Never quotes a
    value: it may be a credential."""
    for name, value in headers.items():
        if not name or not set(name) <= _HEADER_NAME_CHARS:
            return f"header name {name!r} is not an HTTP header name (letters, digits, -_.)"
        if "\r" in value or "\n" in value:
            return f"the value of header {name} holds a line break (CR or LF)"
        if any(not (" " <= char <= "~" or char == "\t") for char in value):
            return (
                f"the value of header {name} holds a character that is not printable ASCII "
                "(an HTTP header value cannot carry it)"
            )
    return None


def find_config_file(config_file: Path | None, env: Mapping[str, str]) -> tuple[Path | None, Path]:
    """(the file to read or None, the path considered); an explicit path must be a file."""
    if config_file is not None:
        explicit, given_by = Path(config_file).expanduser(), "--config"
    elif env.get(CONFIG_ENV):
        explicit, given_by = Path(env[CONFIG_ENV]).expanduser(), f"${CONFIG_ENV}"
    else:
        xdg = env.get("XDG_CONFIG_HOME", "")
        # The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else _home(env) / ".config"
        default = base / "memoryd" / "config.toml"
        if default.exists() and not default.is_file():
            raise ConfigError(f"config: {default}: not a regular file")
        return (default if default.is_file() else None), default
    if not explicit.exists():
        raise ConfigError(f"config: {explicit}: no such config file (given by {given_by})")
    if not explicit.is_file():
        raise ConfigError(f"config: {explicit}: not a regular file (given by {given_by})")
    return explicit, explicit


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()
