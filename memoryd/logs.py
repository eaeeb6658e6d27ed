"""Structured logging: one JSON object per line (or console lines for people).

The stdlib loggers of our dependencies (watchdog, the Anthropic SDK, httpx2) go through
the same renderer, so every line a process writes has one shape.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


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
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS.get(level, logging.INFO))
    # The SDK's HTTP client logs every request at INFO with its URL; keep those out.
    for noisy in ("httpx", "httpx2", "httpcore", "anthropic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
