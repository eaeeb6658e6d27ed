"""A logger that imports structlog only when a line is logged.

structlog (and what it imports) costs a one-shot command about as much CPU as the rest of
its start; a search that logs nothing, the usual case, need not pay it. The command says,
with :func:`before_first_line`, how logging is to be set up while it runs, and that is done
just before the first line (docs/design.md#sources).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Any

_pending: list[Callable[[], None]] = []


@contextlib.contextmanager
def before_first_line(configure: Callable[[], None]) -> Iterator[None]:
    """Inside, run ``configure`` (set up logging) before the first line any
    :class:`LazyLog` logs; never, when none is logged."""
    _pending[:] = [configure]
    try:
        yield
    finally:
        _pending.clear()


class LazyLog:
    """``structlog.get_logger()``, imported at the first line logged."""

    def __getattr__(self, name: str) -> Any:
        while _pending:
            _pending.pop()()
        import structlog

        return getattr(structlog.get_logger(), name)
