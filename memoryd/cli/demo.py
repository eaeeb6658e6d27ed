"""``memoryd demo``: prepare a demo root, then run the daemon on it (its logs in console
format on a terminal, JSON otherwise)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TextIO


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo folder."""
    parser.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=Path("memoryd-demo"),
        help="(default: ./memoryd-demo)",
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Write the demo root and run the daemon on it until Ctrl-C."""
    from memoryd.config.settings import load_settings
    from memoryd.daemon.supervisor import run_daemon
    from memoryd.demo import prepare_demo

    config = prepare_demo(args.folder)
    workspace = config.parent / "example-agent"
    memoryd = this_command()
    print(
        f"memoryd demo: root {config.parent}, config {config}\n"
        "  the example workspace is past its trigger and is summarized right away;\n"
        f"  in another terminal:  {memoryd} --config {shlex.quote(str(config))} status\n"
        f"  add a message:        {memoryd} append {shlex.quote(str(workspace))} "
        '--role user --content "hello"\n'
        "  stop with Ctrl-C.",
        file=out,
        flush=True,
    )
    loaded = load_settings(config, {"log_format": args.log_format})
    chosen = demo_log_format(loaded.sources.get("log_format", "default"), sys.stdout.isatty())
    if chosen is not None:
        loaded = load_settings(config, {"log_format": chosen})
    result: int = run_daemon(loaded, config_file=config)
    return result


def demo_log_format(source: str, terminal: bool) -> str | None:
    """``"console"`` when no flag, variable or file chose a log format (``source`` is
    ``"default"``) and the logs go to a terminal: a person is reading them. None keeps the
    format as loaded (JSON, as the daemon logs, or what was chosen)."""
    return "console" if source == "default" and terminal else None


def this_command() -> str:
    """How to run the memoryd that is running now, for a shell: the script's absolute path,
    or ``python -m memoryd`` with this interpreter."""
    script = Path(sys.argv[0])
    if script.name == "__main__.py" or not script.name:
        return f"{shlex.quote(sys.executable)} -m memoryd"
    return shlex.quote(str(script.absolute()))
