"""``memoryd config``: the effective configuration, secrets masked, with sources."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from memoryd.cli.options import load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json``."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print every effective value with where it came from."""
    from memoryd.config.view import config_as_dict, render_config

    loaded = load_config(args)
    if args.json:
        json.dump(config_as_dict(loaded), out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(render_config(loaded))
    return 0
