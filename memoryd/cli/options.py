"""What every command does with the common options: the configuration it reads, its logging,
how it reads a JSON argument and how it prints a moment."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

    from memoryd.config.settings import LoadedSettings


def load_config(args: argparse.Namespace, **overrides: Any) -> LoadedSettings:
    """The configuration for this run: ``--config``, the environment, ``--log-format`` and
    ``overrides`` (flags by field name; None means not given)."""
    from memoryd.config.settings import load_settings

    return load_settings(args.config, {"log_format": args.log_format, **overrides})


def config_given(args: argparse.Namespace) -> bool:
    """True when this run was told which configuration to read (``--config`` or
    ``$MEMORYD_CONFIG``); otherwise status reports use the budget the daemon recorded."""
    import os

    from memoryd.config.sources import CONFIG_ENV

    return args.config is not None or bool(os.environ.get(CONFIG_ENV))


def log_to_stderr(args: argparse.Namespace) -> None:
    """One-shot commands keep stdout for their answer and log warnings only, on stderr."""
    import sys

    from memoryd.daemon.logs import configure_logging

    configure_logging(args.log_format or "json", "warning", sys.stderr)


def when(timestamp: int | None) -> str:
    """A timestamp in milliseconds as UTC time, or why not."""
    from datetime import UTC, datetime

    if timestamp is None:
        return "time unknown"
    try:
        moment = datetime.fromtimestamp(timestamp / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return f"timestamp {timestamp}"
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


_JSON_KINDS: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "true or false",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def json_argument(option: str, text: str, kind: type[T], expected: str) -> T:
    """The value of a JSON argument, a ``kind``; InputError (exit 2) naming ``option`` and
    the problem otherwise (``expected``: the kind in words)."""
    from memoryd import strict_json
    from memoryd.errors import InputError

    try:
        value = strict_json.loads(text)
    except strict_json.JSONProblem as problem:
        detail = f" ({problem.detail})" if problem.detail else ""
        raise InputError(f"{option}: {problem}{detail}") from None
    if not isinstance(value, kind):
        got = _JSON_KINDS.get(type(value), type(value).__name__)
        raise InputError(f"{option} must be {expected}, got {got}")
    return value
