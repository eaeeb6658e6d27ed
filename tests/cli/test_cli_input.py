"""Text that cannot be written as JSON is refused with exit 2 and one line, nothing
written: bytes that are not UTF-8 (in argv or on stdin), nesting too deep for Python,
NaN, Infinity and numbers beyond a double."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import cli
from conftest import WorkspaceFactory

from memoryd.conversation.lines import append_message
from memoryd.errors import InputError


def memoryd_bytes(*argv: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """A real run with raw bytes in argv (as a shell passes $'caf\\xe9')."""
    command = [os.fsencode(sys.executable), b"-m", b"memoryd"]
    command += [os.fsencode(a) if isinstance(a, str) else a for a in argv]
    done = subprocess.run(command, input=stdin, capture_output=True, timeout=60, check=False)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_append_with_undecodable_bytes_in_argv_is_refused(workspace: WorkspaceFactory) -> None:
    folder = workspace(3, 50)
    before = snapshot(folder)
    done = memoryd_bytes("append", str(folder), "--role", "user", "--content", b"caf\xe9")
    assert done.returncode == 2
    assert "--content: not UTF-8 text" in one_line(done.stderr)
    assert snapshot(folder) == before


def test_append_with_undecodable_bytes_on_stdin_is_refused(workspace: WorkspaceFactory) -> None:
    folder = workspace(3, 50)
    before = snapshot(folder)
    done = memoryd_bytes("append", str(folder), "--role", "user", stdin=b"caf\xe9\n")
    assert done.returncode == 2
    assert "stdin is not UTF-8" in one_line(done.stderr)
    assert snapshot(folder) == before


@pytest.mark.parametrize(
    ("action", "named"),
    [
        (["start", b"caf\xe9"], "description"),
        (["complete", "--result", b"caf\xe9"], "--result"),
        (["fail", b"caf\xe9"], "reason"),
    ],
)
def test_heartbeat_with_undecodable_bytes_is_refused(
    tmp_path: Path, action: list[str | bytes], named: str
) -> None:
    assert cli("heartbeat", str(tmp_path), "start", "a task")[0] == 0
    before = snapshot(tmp_path)
    done = memoryd_bytes("heartbeat", str(tmp_path), *action)
    assert done.returncode == 2
    assert f"memoryd: {named}: not UTF-8 text" in one_line(done.stderr)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("blocks", "problem"),
    [
        ("[" * 30_000 + "]" * 30_000, "--blocks: too deeply nested"),
        ('[{"type":"text","text":"x","n":NaN}]', "--blocks: NaN is not JSON"),
        ('[{"type":"text","text":"x","n":Infinity}]', "--blocks: Infinity is not JSON"),
        ('[{"type":"text","text":"x","n":1e400}]', "--blocks: number out of range"),
        ('[{"type":"text"', "--blocks: not valid JSON (Expecting"),
    ],
)
def test_blocks_that_cannot_be_written_as_json_are_refused(
    workspace: WorkspaceFactory,
    capsys: pytest.CaptureFixture[str],
    blocks: str,
    problem: str,
) -> None:
    folder = workspace(3, 50)
    before = snapshot(folder)
    code, _ = cli("append", str(folder), "--role", "user", "--blocks", "--content", blocks)
    assert code == 2
    assert one_line(capsys.readouterr().err).startswith(f"memoryd: {problem}")
    assert snapshot(folder) == before


def test_the_python_api_never_writes_nan_or_undecodable_text(workspace: WorkspaceFactory) -> None:
    folder = workspace(3, 50)
    before = snapshot(folder)
    with pytest.raises(InputError, match="NaN and Infinity are not JSON"):
        append_message(folder, "user", [{"type": "text", "text": "x", "n": float("nan")}])
    with pytest.raises(InputError, match="not valid UTF-8"):
        append_message(folder, "user", "caf\udce9")
    assert snapshot(folder) == before
