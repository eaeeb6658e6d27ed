"""Running the ``memoryd`` command in-process, for tests."""

from __future__ import annotations

import io
import shlex
import sys
from pathlib import Path

from memoryd.cli import main


def cli(*argv: str) -> tuple[int, str]:
    """Run main() with ``argv``; returns the exit code and what it printed on stdout."""
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()


def memoryd_on_path(folder: Path) -> Path:
    """A ``memoryd`` command in ``folder/bin`` that runs this checkout's memoryd with this
    interpreter, as an installed one would run; returns that bin folder, to put first on
    PATH for commands and clients that look ``memoryd`` up by name."""
    repo = Path(__file__).resolve().parents[2]
    bin_folder = folder / "bin"
    bin_folder.mkdir(parents=True, exist_ok=True)
    script = bin_folder / "memoryd"
    script.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH={shlex.quote(str(repo))} exec {shlex.quote(sys.executable)} -m memoryd "$@"\n'
    )
    script.chmod(0o755)
    return bin_folder
