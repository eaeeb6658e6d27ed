"""The install guide (docs/guides/systemd.md, which the README's service section points
to): pipx (not pip --user), Python >= 3.11, the journal fallbacks, and a venv alternative
whose ExecStart drop-in, made exactly as the guide spells it, really replaces the unit's
ExecStart."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECTION = (REPO / "docs" / "guides" / "systemd.md").read_text()


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def test_install_uses_pipx_and_says_which_python() -> None:
    first = shell_blocks(SECTION)[0]
    assert first.splitlines()[0].startswith("pipx install .")
    assert "pip install --user" not in first
    assert "Python 3.11 or newer" in SECTION


def test_the_journal_fallbacks_are_given() -> None:
    assert "journalctl --user-unit memoryd" in SECTION
    assert "journalctl _SYSTEMD_USER_UNIT=memoryd.service" in SECTION


def test_the_venv_drop_in_replaces_exec_start(tmp_path: Path) -> None:
    """Run the venv block's drop-in lines with HOME in tmp_path; systemd-analyze verify
    then passes with memoryd only in the venv (it refuses an ExecStart that is missing)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    venv_block = next(b for b in shell_blocks(SECTION) if "venv.conf" in b)
    lines = venv_block.replace("\\\n", "").splitlines()
    drop_in_lines = [line for line in lines if line.startswith(("mkdir", "printf"))]
    assert len(drop_in_lines) == 2
    home = tmp_path / "home"
    binary = home / ".local" / "share" / "memoryd" / "venv" / "bin" / "memoryd"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    subprocess.run(["bash", "-c", "\n".join(drop_in_lines)], env=env, check=True, timeout=30)
    units = home / ".config" / "systemd" / "user"
    shutil.copy(REPO / "systemd" / "memoryd.service", units)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    done = subprocess.run(
        [analyze, "verify", "--user", str(units / "memoryd.service")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    # Without the drop-in the same check fails: the default ExecStart is not there.
    (units / "memoryd.service.d" / "venv.conf").unlink()
    done = subprocess.run(
        [analyze, "verify", "--user", str(units / "memoryd.service")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
