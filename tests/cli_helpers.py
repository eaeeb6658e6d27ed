"""Running the ``memoryd`` command in-process, for tests."""

from __future__ import annotations

import io

from memoryd.cli import main


def cli(*argv: str) -> tuple[int, str]:
    """Run main() with ``argv``; returns the exit code and what it printed on stdout."""
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()
