"""``memoryd demo``: a demo root with an example workspace, run with the offline summarizer."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

DEMO_TOKEN_LIMIT = 13_000
"""Small enough that the shipped conversation (~11,400 tokens) is past the 80% trigger."""


def prepare_demo(folder: Path) -> Path:
    """Create ``folder`` with ``example-agent/`` and a ``memoryd.toml``; returns the config
    (the workspace is ``example-agent`` beside it).

    An existing example conversation is left as it is, so a second run continues the demo.
    """
    folder = folder.absolute()
    workspace = folder / "example-agent"
    workspace.mkdir(parents=True, exist_ok=True)
    conversation = workspace / "conversation.jsonl"
    if not conversation.exists():
        source = resources.files(__package__).joinpath("example-agent", "conversation.jsonl")
        with source.open("rb") as src, conversation.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    config = folder / "memoryd.toml"
    config.write_text(
        "# Written by `memoryd demo`: the demo root, a small budget, the offline summarizer.\n"
        f'roots = ["{folder}"]\n'
        f"token_limit = {DEMO_TOKEN_LIMIT}\n"
        "checkin_interval = 1.0\n"
        '\n[summarizer]\nbackend = "extractive"\n',
        encoding="utf-8",
    )
    return config
