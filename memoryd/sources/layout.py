"""Where an agent keeps its sessions: recognising a folder or a file, and listing the
session files below it (docs/design.md#sources).

Nothing here follows a symlink below the path the user named, nor opens anything but a
regular file (a FIFO would block the reader); this module imports no SQLite, so that
``memoryd recall`` decides cheaply whether a path is a workspace or a source.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memoryd.errors import InputError

SOURCES = ("claude-code", "codex", "gemini")
MAX_DEPTH = 8
"""Folders below the named path that are walked, at most."""
SNIFF_BYTES = 1 << 16
SNIFF_FILES = 20
"""Files read to recognise a folder whose layout does not say what it is."""
WHOLE = "document"
"""A file rewritten whole (a Gemini CLI ``.json`` session): indexed again when it changes."""
SPILL = "spill"
"""A tool's output Claude Code spilled to ``<session>/tool-results/``: one message."""
LINES = "lines"
"""An append-only JSONL session file."""


@dataclass(frozen=True, slots=True)
class SessionFile:
    """A file of a source: where it is and how it is read."""

    name: str
    """Its path relative to the source's root ("" when the root is the file)."""
    path: Path
    shape: str
    """:data:`LINES`, :data:`WHOLE` or :data:`SPILL`."""
    size: int
    inode: tuple[int, int]
    mtime_ns: int


def _sniff(path: Path) -> str | None:
    """The source whose first line ``path`` holds, reading at most SNIFF_BYTES."""
    from memoryd.sources import claude, codex, gemini
    from memoryd.sources.record import load

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.pread(fd, SNIFF_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    first = head.split(b"\n", 1)[0] if path.suffix == ".jsonl" else head
    value, _ = load(first)
    for module in (codex, claude, gemini):
        if module.looks_like(value):
            return str(module.SOURCE)
    if path.suffix == ".json" and head.lstrip().startswith(b"{") and b'"projectHash"' in head:
        return gemini.SOURCE  # a legacy document longer than the sniff
    return None


def _by_name(path: Path) -> str | None:
    name = path.name
    if name.startswith("rollout-") and name.endswith(".jsonl"):
        return "codex"
    if "chats" in path.parts[-3:-1] and name.endswith((".json", ".jsonl")):
        return "gemini"
    return None


def recognise(path: Path) -> str | None:
    """The source ``path`` is (``claude-code``, ``codex``, ``gemini``), or None.

    A file by its name or its first line; a folder by its layout (``projects/``,
    ``sessions/``, ``tmp/*/chats/``, ``chats/``) or else by the first session-like files
    below it. A memoryd workspace is never a source, nor the filesystem's root or the
    home folder: sessions somewhere below them do not make every file there one.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        return _by_name(path) or _sniff(path)
    if not stat.S_ISDIR(st.st_mode):
        return None
    if os.path.lexists(path / "conversation.jsonl") or os.path.lexists(path / ".memoryd"):
        return None
    if _too_wide(path):
        return None
    if (path / "projects").is_dir() and path.name != "tmp":
        return "claude-code"
    if (path / "sessions").is_dir() or (path / "archived_sessions").is_dir():
        return "codex"
    if (path / "chats").is_dir() or path.name == "chats" or _gemini_tmp(path / "tmp"):
        return "gemini"
    for count, (found, _) in enumerate(_walk(path, max_depth=4)):
        if count >= SNIFF_FILES:
            break
        kind = _by_name(found) or _sniff(found)
        if kind is not None:
            return kind
    return None


def _too_wide(path: Path) -> bool:
    try:
        real = path.resolve()
        return real == Path(real.anchor) or real == Path.home().resolve()
    except (OSError, RuntimeError):
        return False


GEMINI_TMP_LOOK = 256
"""Entries of a ``tmp`` folder looked at for a Gemini CLI project (``<hash>/chats/``)."""


def _gemini_tmp(tmp: Path) -> bool:
    """True when ``tmp`` holds a Gemini CLI project folder (``<hash>/chats/``) among its
    first entries: any folder with a ``tmp`` in it (``/`` has ``/tmp``) is not a home."""
    try:
        with os.scandir(tmp) as entries:
            for count, entry in enumerate(entries):
                if count >= GEMINI_TMP_LOOK:
                    return False
                if entry.is_dir(follow_symlinks=False) and (Path(entry.path) / "chats").is_dir():
                    return True
    except OSError:
        return False
    return False


def _walk(root: Path, max_depth: int = MAX_DEPTH) -> Iterator[tuple[Path, os.stat_result]]:
    """Every regular ``*.json``/``*.jsonl`` file below ``root`` and every file in a
    ``tool-results`` folder, never through a symlink; unreadable folders are skipped."""
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth < max_depth and entry.name not in (".memoryd", ".git"):
                    stack.append((Path(entry.path), depth + 1))
            elif stat.S_ISREG(st.st_mode) and (
                entry.name.endswith((".jsonl", ".json")) or folder.name == "tool-results"
            ):
                yield Path(entry.path), st


def _subroots(root: Path, source: str) -> list[Path]:
    """The folders of ``root`` that hold sessions (``~/.claude`` holds much else)."""
    inner = {"claude-code": ("projects",), "codex": ("sessions", "archived_sessions")}
    found = [root / name for name in inner.get(source, ()) if (root / name).is_dir()]
    if source == "gemini" and (root / "tmp").is_dir():
        found.append(root / "tmp")
    return found or [root]


def _shape(source: str, path: Path) -> str | None:
    if path.parent.name == "tool-results":
        return SPILL if source == "claude-code" else None
    if source == "gemini":
        if "chats" not in path.parts:
            return None
        return WHOLE if path.suffix == ".json" else LINES
    return LINES if path.suffix == ".jsonl" else None


def _entry(root: Path, source: str, path: Path, found: os.stat_result) -> SessionFile | None:
    shape = _shape(source, path) if path != root else (WHOLE if path.suffix == ".json" else LINES)
    if shape is None:
        return None
    name = "" if path == root else path.relative_to(root).as_posix()
    inode = (found.st_dev, found.st_ino)
    return SessionFile(name, path, shape, found.st_size, inode, found.st_mtime_ns)


def session_files(root: Path, source: str) -> list[SessionFile]:
    """The session files of ``source`` below ``root`` (or ``root`` itself), by name."""
    try:
        st = os.stat(root)
    except OSError as exc:
        raise InputError(f"{root}: {exc.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        walked = [(root, st)]
    elif stat.S_ISDIR(st.st_mode):
        walked = [found for sub in _subroots(root, source) for found in _walk(sub)]
    else:
        raise InputError(f"{root}: is not a regular file or a folder")
    files = [entry for path, found in walked if (entry := _entry(root, source, path, found))]
    return sorted(files, key=lambda file: file.name)


def changed_file(root: Path, source: str, path: Path) -> tuple[str, SessionFile | None] | None:
    """The name of ``path`` below ``root`` and the session file there now (None when it is
    gone or is no session file); None when ``path`` is not where sessions are (outside,
    too deep, or reached through a symlink)."""
    if path == root:
        name = ""
    else:
        subroot = next((sub for sub in _subroots(root, source) if path.is_relative_to(sub)), None)
        if subroot is None or len(path.relative_to(subroot).parts) > MAX_DEPTH + 1:
            return None
        name = path.relative_to(root).as_posix()
        for parent in path.relative_to(root).parents:
            if parent != Path(".") and (root / parent).is_symlink():
                return None
    try:
        found = os.lstat(path)
    except OSError:
        return name, None
    return name, _entry(root, source, path, found) if stat.S_ISREG(found.st_mode) else None


def session_name(file: SessionFile) -> str:
    """The session a file belongs to when its lines do not say: its stem, or for a
    subagent's or a spilled output's file the session folder it lies in."""
    parts = Path(file.name or file.path.name).parts
    for marker in ("subagents", "tool-results"):
        if marker in parts[:-1]:
            at = parts.index(marker)
            if at > 0:
                return parts[at - 1]
    return file.path.stem
