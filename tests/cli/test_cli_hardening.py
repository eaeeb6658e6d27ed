"""What a new user trips on at the command line: an unknown option names the command it
was given to, and ``memoryd run`` that cannot start (the openai backend chosen, its
package missing) says why and never logs that a daemon stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import cli
from daemon_harness import clean_env


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["status", "{ws}", "--jsno"], "memoryd: status: unrecognized arguments: --jsno"),
        (["recall", "{ws}", "word", "--limt", "3"],
         "memoryd: recall: unrecognized arguments: --limt 3"),
        (["history", "{ws}", "extra-word"], "memoryd: history: unrecognized arguments: extra-word"),
    ],
)  # fmt: skip
def test_an_unknown_argument_names_its_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    (tmp_path / "conversation.jsonl").write_bytes(b"")
    words = [word.replace("{ws}", str(tmp_path)) for word in argv]
    assert cli(*words) == (2, "")
    assert capsys.readouterr().err == line + "\n"


def test_run_that_cannot_start_logs_no_daemon_stopped(tmp_path: Path) -> None:
    """The openai backend chosen and its package hidden: one line on stderr, exit 2, and
    no ``daemon_stopped`` on stdout (the daemon never started)."""
    root = tmp_path / "agents"
    root.mkdir()
    env = clean_env(
        tmp_path / "home",
        {
            "MEMORYD_SUMMARIZER__BACKEND": "openai",
            "MEMORYD_OPENAI__BASE_URL": "http://127.0.0.1:9/v1",
            "MEMORYD_OPENAI__MODEL": "m",
        },
    )
    code = (
        "import sys; sys.modules['openai'] = None; from memoryd.cli import main; sys.exit(main())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "run", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2, done
    assert "the openai package is not installed" in done.stderr
    assert "daemon_stopped" not in done.stdout + done.stderr
