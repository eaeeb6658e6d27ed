"""``memoryd demo``: a demo root with an example workspace, run with the offline summarizer.

The demo owns its folder: it takes a folder that does not exist or is empty, or one that
an earlier demo wrote (its ``memoryd.toml`` and ``example-agent/`` and nothing else), and
refuses any other, so that it never overwrites a file or summarizes a workspace it did not
create. Each run starts the example afresh, so the summarization shows again.

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript, llm, summary, compaction, daemon, status, mcp_server.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import tomli_w

from memoryd.errors import InputError

DEMO_TOKEN_LIMIT = 13_000
"""Small enough that the shipped conversation (~11,400 tokens) is past the 80% trigger.
Kept in the workspace's own ``.memoryd/config.toml``, so that every command (status with
or without ``--config``, the MCP server, the Python API) counts it against the same
budget as the daemon."""
CONFIG_NAME = "memoryd.toml"
WORKSPACE_NAME = "example-agent"
HEADER = "# Written by `memoryd demo`: the demo root and the offline summarizer.\n"
WORKSPACE_HEADER = "# Written by `memoryd demo`: the example's small budget.\n"


def prepare_demo(folder: Path) -> Path:
    """Create (or reset) ``folder`` with ``example-agent/`` (its budget in its own
    ``.memoryd/config.toml``) and a ``memoryd.toml``; returns the config (the workspace is
    ``example-agent`` beside it).

    Raises InputError (nothing changed) when ``folder`` is not a folder or holds anything
    an earlier demo did not write.
    """
    folder = folder.absolute()
    _check_demo_folder(folder)
    workspace = folder / WORKSPACE_NAME
    if workspace.exists():
        # The example as an earlier run left it (summarized, archived): start it afresh.
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    source = resources.files(__package__).joinpath(WORKSPACE_NAME, "conversation.jsonl")
    with source.open("rb") as src, (workspace / "conversation.jsonl").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    (workspace / ".memoryd").mkdir()
    budget = {"token_limit": DEMO_TOKEN_LIMIT}
    (workspace / ".memoryd" / "config.toml").write_text(
        WORKSPACE_HEADER + tomli_w.dumps(budget), encoding="utf-8"
    )
    config = folder / CONFIG_NAME
    settings = {
        "roots": [str(folder)],
        "checkin_interval": 1.0,
        "summarizer": {"backend": "extractive"},
    }
    config.write_text(HEADER + tomli_w.dumps(settings), encoding="utf-8")
    return config


def _check_demo_folder(folder: Path) -> None:
    if not folder.exists():
        return
    if not folder.is_dir() or folder.is_symlink():
        raise InputError(f"demo: {folder} is not a folder; give a new or empty folder")
    names = {entry.name for entry in folder.iterdir()}
    ours = {CONFIG_NAME, WORKSPACE_NAME}
    config = folder / CONFIG_NAME
    written_by_demo = config.is_file() and config.read_text(errors="replace").startswith(HEADER)
    if names and not (names <= ours and written_by_demo):
        raise InputError(
            f"demo: {folder} already holds other files; give a new or empty folder "
            "(the demo writes its own config and workspace there)"
        )
