"""The command line itself: global options anywhere, one prefix, usage, --version, and the
configuration reaching every command that has a setting for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import cli
from conftest import WorkspaceFactory

import memoryd
from memoryd.cli import COMMANDS, build_parser, command_in


def memoryd_process(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
        check=False,
    )


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "memoryd.toml"
    path.write_text("token_limit = 4321\n[memory]\nthreshold = 5\nkeep_bookmarks = 2\n")
    return path


@pytest.mark.parametrize("where", ["before", "after"])
def test_config_and_log_format_work_before_and_after_the_command(
    config_file: Path, where: str
) -> None:
    """`memoryd --config F config` and `memoryd config --config F` read the same file."""
    options = ["--config", str(config_file), "--log-format", "console"]
    argv = [*options, "config", "--json"] if where == "before" else ["config", "--json", *options]
    code, out = cli(*argv)
    assert code == 0
    shown = json.loads(out)
    assert shown["config_file"] == str(config_file)
    assert shown["settings"]["token_limit"] == 4321
    assert shown["settings"]["log_format"] == "console"


def test_run_accepts_config_after_the_command(tmp_path: Path) -> None:
    """`memoryd run --config F` (as the README spells it) is parsed, not refused."""
    args = build_parser("run").parse_args(["run", "--config", "F", "--root", str(tmp_path)])
    assert args.config == Path("F")
    assert args.root == [tmp_path]


def test_a_value_before_the_command_is_not_overwritten_by_the_subcommand_default() -> None:
    args = build_parser("status").parse_args(["--config", "F", "status", "--json"])
    assert args.config == Path("F")
    assert args.log_format is None


def test_the_command_word_is_found_after_global_options() -> None:
    assert command_in(["--config", "status", "append", "ws"]) == "append"
    assert command_in(["--log-format", "json", "heartbeat", "ws", "show"]) == "heartbeat"
    assert command_in(["--version"]) is None


def test_a_usage_error_has_one_memoryd_prefix_naming_the_subcommand() -> None:
    done = memoryd_process("append", "ws")
    assert done.returncode == 2
    assert done.stderr.startswith("memoryd: append: ")
    assert "memoryd: memoryd" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_bare_memoryd_prints_the_usage_and_exits_2() -> None:
    done = memoryd_process()
    assert done.returncode == 2
    assert done.stderr.startswith("usage: memoryd")
    for name in COMMANDS:
        assert name in done.stderr


def test_version_prints_the_package_version() -> None:
    done = memoryd_process("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"memoryd {memoryd.__version__}"


def test_every_command_has_a_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Every registered module imports and describes its arguments."""
    for name in COMMANDS:
        assert cli(name, "--help")[0] == 0
        assert f"usage: memoryd {name}" in capsys.readouterr().out


def write_bookmarks(folder: Path, count: int) -> None:
    for i in range(count):
        code, _ = cli(
            "memory",
            "write",
            "--store",
            "bookmarks",
            "--workspace",
            str(folder),
            "--entry",
            json.dumps({"task": i}),
        )
        assert code == 0


def test_memory_write_reports_the_configured_threshold(tmp_path: Path, config_file: Path) -> None:
    """[memory] threshold = 5 in the file: the 6th entry reports compact_needed."""
    folder = tmp_path / "ws"
    folder.mkdir()
    write_bookmarks(folder, 5)
    code, out = cli(
        "--config",
        str(config_file),
        "memory",
        "write",
        "--store",
        "bookmarks",
        "--workspace",
        str(folder),
        "--entry",
        '{"task": 5}',
    )
    assert code == 0
    result = json.loads(out)
    assert result["threshold"] == 5
    assert result["compact_needed"] is True


def test_memory_compact_uses_the_configured_threshold_and_keep_bookmarks(
    workspace: WorkspaceFactory, config_file: Path
) -> None:
    """threshold 5, keep_bookmarks 2: 8 bookmarks are compacted, 6 of them summarized."""
    folder = workspace(2, 100)
    write_bookmarks(folder, 8)
    code, out = cli("memory", "compact", "--workspace", str(folder), "--config", str(config_file))
    assert code == 0
    assert json.loads(out)["summaries_created"]["bookmarks"] == 6


@pytest.mark.parametrize(
    "argv",
    [
        ["append", "{ws}", "--role", "user", "--content", "x"],
        ["heartbeat", "{ws}", "start", "a task"],
        ["memory", "read", "--store", "todos", "--workspace", "{ws}"],
    ],
)
def test_a_missing_config_file_is_refused_by_every_command(
    workspace: WorkspaceFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    folder = workspace(2, 50)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    missing = tmp_path / "nope.toml"
    code, _ = cli(*[a.format(ws=folder) for a in argv], "--config", str(missing))
    assert code == 2
    assert "no such config file" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
