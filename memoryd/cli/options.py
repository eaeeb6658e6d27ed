"""What every command does with the common options: the configuration it reads, its logging,
and how it prints a moment."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
