"""What is not a source of other agents' sessions: the filesystem's root (it has a
``tmp`` folder, and session files somewhere below), the home folder, and a folder whose
``tmp`` holds no Gemini CLI project. A Gemini CLI home is still one."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_sessions import gemini_session, words_for

from memoryd.search.sessions.layout import recognise


def test_the_filesystem_root_and_the_home_folder_are_not_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    gemini_session(home / ".gemini", "0000-gemi-session", words_for("ge0"), "jsonl")
    monkeypatch.setenv("HOME", str(home))
    assert recognise(Path("/")) is None
    assert recognise(home) is None
    assert recognise(home / ".gemini") == "gemini"


def test_a_folder_with_a_tmp_that_holds_no_gemini_project_is_not_a_gemini_home(
    tmp_path: Path,
) -> None:
    """``/`` was taken for a Gemini CLI home for its ``/tmp``, and all of /tmp indexed."""
    folder = tmp_path / "like-root"
    (folder / "tmp" / "pytest-of-root").mkdir(parents=True)
    (folder / "tmp" / "build-cache" / "objects").mkdir(parents=True)
    assert recognise(folder) is None
    gemini_session(tmp_path / "gemini", "0000-gemi-session", words_for("ge0"), "jsonl")
    assert recognise(tmp_path / "gemini") == "gemini"
