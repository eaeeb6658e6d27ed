"""Structured logging: one JSON object per line (or console lines for people).

The stdlib loggers of our dependencies (watchdog, the Anthropic SDK, httpx2) go through
the same renderer, so every line a process writes has one shape. When the stream is the
journal's (``$JOURNAL_STREAM``, see sd-daemon(3)), each line starts with its syslog
priority, ``<3>`` to ``<7>``, which journald strips and records as PRIORITY, so that
``journalctl -p err`` finds errors (docs/design.md#daemon).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import structlog

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


JOURNAL_STREAM_ENV = "JOURNAL_STREAM"
SYSLOG_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a stdlib level: 3 error, 4 warning, 6 info, 7 debug."""
    for level in sorted(SYSLOG_PRIORITY, reverse=True):
        if levelno >= level:
            return SYSLOG_PRIORITY[level]
    return 7


def is_journal_stream(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` is the journal's stream: its device and inode are the ones in
    ``$JOURNAL_STREAM`` (a child whose output was redirected elsewhere is not)."""
    value = (os.environ if environ is None else environ).get(JOURNAL_STREAM_ENV, "")
    device, _, inode = value.partition(":")
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(device), int(inode))
    except (OSError, ValueError, AttributeError):
        # No descriptor (a StringIO), a closed stream or a malformed variable.
        return False


class _JournalFormatter(structlog.stdlib.ProcessorFormatter):
    """Prefixes each rendered line with ``<priority>`` for journald."""

    def format(self, record: logging.LogRecord) -> str:
        return f"<{syslog_priority(record.levelno)}>{super().format(record)}"


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger to write to ``stream`` (stdout).

    Call it once per process (the daemon, each worker, a one-shot command); a later call
    replaces the configuration.
    """
    out = stream or sys.stdout
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=False)
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.dict_tracebacks,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.INFO)),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    formatter = _JournalFormatter if is_journal_stream(out) else structlog.stdlib.ProcessorFormatter
    handler.setFormatter(
        formatter(
            processor=renderer,
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS.get(level, logging.INFO))
    # The SDKs' HTTP clients log every request at INFO with its URL, and the SDKs log
    # request options (prompt text) at DEBUG; keep those out.
    for noisy in ("httpx", "httpx2", "httpcore", "anthropic", "openai"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def debug_enabled() -> bool:
    """Whether debug lines are written: a caller about to log thousands of them (a start
    on many workspaces) skips building each one when they are not."""
    return logging.getLogger().isEnabledFor(logging.DEBUG)
