"""Where an agent keeps its sessions: recognising a folder or a file, and listing the
session files below it (docs/design.md#sources).

Nothing here follows a symlink below the path the user named, nor opens anything but a
regular file (a FIFO would block the reader); this module imports no SQLite, so that
``memoryd recall`` decides cheaply whether a path is a workspace or a source.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from memoryd.errors import InputError, UnsafePathError
from memoryd.files.regular import open_for_reading
from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Final

SOURCES = ("claude-code", "codex", "gemini")
MAX_DEPTH = 8
"""Folders below the named path that are walked, at most."""
SNIFF_BYTES = 1 << 16
SNIFF_FILES = 20
"""Files read to recognise a folder whose layout does not say what it is."""
AGENT_HOMES = {
    "claude-code": (("projects",), ".claude", ("history.jsonl", "settings.json", "todos")),
    "codex": (
        ("sessions", "archived_sessions"),
        ".codex",
        ("config.toml", "history.jsonl", "version.json", "auth.json"),
    ),
    "gemini": (("tmp",), ".gemini", ("settings.json", "installation_id", "google_accounts.json")),
}
"""Per source: the folders of its home that hold sessions, the home's usual name, and
files only its home holds (a home moved by ``CLAUDE_CONFIG_DIR`` or ``CODEX_HOME``)."""
SCAN_ENTRIES = 1000
"""Entries of a folder looked at to find agents' folders in it."""
WHOLE = "document"
"""A file rewritten whole (a Gemini CLI ``.json`` session, a Codex CLI 0.1.x rollout):
indexed again when it changes."""
SPILL = "spill"
"""A tool's output spilled to a file of its own (Claude Code's ``<session>/tool-results/``,
Gemini CLI's ``tool-outputs/session-<id>/`` and ``tool-outputs/`` itself): one message."""
LINES = "lines"
"""An append-only JSONL session file."""
UNKNOWN = "unknown"
"""A file where sessions are whose first line is in no format its agent writes: skipped
(and said) until it changes."""


class SessionFile(Value):
    """A file of a source: where it is and how it is read."""

    __slots__ = ("inode", "mtime_ns", "name", "path", "shape", "size")

    def __init__(
        self, name: str, path: Path, shape: str, size: int, inode: tuple[int, int], mtime_ns: int
    ) -> None:
        self.name: Final = name
        """Its path relative to the source's root ("" when the root is the file)."""
        self.path: Final = path
        self.shape: Final = shape
        """:data:`LINES`, :data:`WHOLE` or :data:`SPILL`."""
        self.size: Final = size
        self.inode: Final = inode
        self.mtime_ns: Final = mtime_ns


def _sniff(path: Path) -> str | None:
    """The source whose first line ``path`` holds, reading at most SNIFF_BYTES."""
    from memoryd.search.sessions import claude, codex, gemini
    from memoryd.search.sessions.record import load

    try:
        fd = open_for_reading(path, follow_symlinks=False)
    except (OSError, UnsafePathError):
        return None
    try:
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
    if path.suffix == ".json" and head.lstrip().startswith(b"{"):  # longer than the sniff
        if b'"projectHash"' in head:
            return gemini.SOURCE
        if re.match(rb'\{\s*"session"\s*:\s*\{', head):
            return codex.SOURCE
    return None


def _by_name(path: Path) -> str | None:
    name = path.name
    if name.startswith("rollout-") and name.endswith((".jsonl", ".json")):
        return "codex"
    if "chats" in path.parts[-3:-1] and name.endswith((".json", ".jsonl")):
        return "gemini"
    return None


def _gemini_tmp(folder: Path) -> bool:
    """True when ``folder/tmp`` holds a Gemini CLI project (``tmp/<hash>/chats``); a
    system's ``/tmp`` is not one."""
    try:
        with os.scandir(folder / "tmp") as entries:
            for count, entry in enumerate(entries):
                if count >= SCAN_ENTRIES:
                    break
                if entry.is_dir(follow_symlinks=False) and os.path.isdir(
                    os.path.join(entry.path, "chats")
                ):
                    return True
    except OSError:
        return False
    return False


def by_layout(path: Path) -> str | None:
    """The source a folder is by its layout alone (``projects/``, ``sessions/``,
    ``tmp/*/chats/``, ``chats/``), or a file by its name; None when that does not say.
    A memoryd workspace is never a source."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        return _by_name(path)
    if not stat.S_ISDIR(st.st_mode):
        return None
    if os.path.lexists(path / "conversation.jsonl") or os.path.lexists(path / ".memoryd"):
        return None
    if (path / "projects").is_dir() and path.name != "tmp":
        return "claude-code"
    if (path / "sessions").is_dir() or (path / "archived_sessions").is_dir():
        return "codex"
    if (path / "chats").is_dir() or path.name == "chats" or path.parent.name == "tool-outputs":
        return "gemini"
    if path.name == ".gemini" or ((path / "tmp").is_dir() and _gemini_tmp(path)):
        return "gemini"
    return None


def recognise(path: Path) -> str | None:
    """The source ``path`` is (``claude-code``, ``codex``, ``gemini``), or None.

    A file by its name or its first line; a folder by its layout (``projects/``,
    ``sessions/``, ``tmp/*/chats/``, ``chats/``) or else by the first session-like files
    below it. A memoryd workspace is never a source, and the filesystem's root and the
    home folder are never walked: sessions somewhere below them do not make every file
    there one.
    """
    found = by_layout(path)
    if found is not None:
        return found
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        return _sniff(path)
    if not stat.S_ISDIR(st.st_mode):
        return None
    if os.path.lexists(path / "conversation.jsonl") or os.path.lexists(path / ".memoryd"):
        return None
    if _too_wide(path):
        return None
    for count, (found_file, _) in enumerate(_walk(path, max_depth=4)):
        if count >= SNIFF_FILES:
            break
        kind = _by_name(found_file) or _sniff(found_file)
        if kind is not None:
            return kind
    return None


def _too_wide(path: Path) -> bool:
    try:
        real = path.resolve()
        return real == Path(real.anchor) or real == Path.home().resolve()
    except (OSError, RuntimeError):
        return False


def sources_in(folder: Path) -> list[tuple[Path, str]]:
    """The agents' folders directly in ``folder`` (``~`` holds ``.claude``, ``.codex`` and
    ``.gemini``; a backup may hold several), recognised by their layout, by name."""
    found = []
    try:
        with os.scandir(folder) as scan:
            entries = sorted(
                (entry for _, entry in zip(range(SCAN_ENTRIES), scan, strict=False)),
                key=lambda entry: entry.name,
            )
    except OSError:
        return []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            kind = by_layout(Path(entry.path))
            if kind is not None:
                found.append((Path(entry.path), kind))
    return found


def agent_root(path: Path, source: str) -> Path:
    """The agent's folder ``path`` lies in (``~/.claude`` for a project or a session file
    of it), so that every path inside one folder is searched in that folder's one index;
    ``path`` itself when it lies in none (a copy of some session files)."""
    inner, home, markers = AGENT_HOMES[source]
    for parent in path.parents:
        rest = path.relative_to(parent).parts
        if rest[0] not in inner or (source == "gemini" and not _gemini_tmp(parent)):
            continue
        if parent.name == home or any(os.path.lexists(parent / name) for name in markers):
            return parent
    return path


def _walk(root: Path, max_depth: int = MAX_DEPTH) -> Iterator[tuple[Path, os.stat_result]]:
    """Every regular ``*.json``/``*.jsonl`` file below ``root`` and every file where a
    tool's output is spilled (``tool-results/``, ``tool-outputs/…/``), never through a
    symlink; unreadable folders are skipped."""
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
                entry.name.endswith((".jsonl", ".json")) or spill_folder(folder)
            ):
                yield Path(entry.path), st


def subroots(root: Path, source: str) -> list[Path]:
    """The folders of ``root`` that hold sessions (``~/.claude`` holds much else)."""
    inner = {"claude-code": ("projects",), "codex": ("sessions", "archived_sessions")}
    found = [root / name for name in inner.get(source, ()) if (root / name).is_dir()]
    if source == "gemini" and (root / "tmp").is_dir():
        found.append(root / "tmp")
    return found or [root]


def spill_folder(folder: Path) -> bool:
    """True for a folder of spilled tool outputs: Claude Code's ``<session>/tool-results``,
    Gemini CLI's ``tool-outputs`` and its ``tool-outputs/session-<id>``."""
    return folder.name in ("tool-results", "tool-outputs") or folder.parent.name == "tool-outputs"


def _shape(source: str, path: Path) -> str | None:
    if path.parent.name == "tool-results":
        return SPILL if source == "claude-code" else None
    if source == "gemini" and "tool-outputs" in path.parts[-3:-1]:
        return SPILL
    if source == "gemini":
        if "chats" not in path.parts:
            return None
        return WHOLE if path.suffix == ".json" else LINES
    if source == "codex" and path.suffix == ".json" and path.name.startswith("rollout-"):
        return WHOLE  # a Codex CLI 0.1.x rollout
    return LINES if path.suffix == ".jsonl" else None


def entry_of(root: Path, source: str, path: Path, found: os.stat_result) -> SessionFile | None:
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
        walked = [found for sub in subroots(root, source) for found in _walk(sub)]
    else:
        raise InputError(f"{root}: is not a regular file or a folder")
    files = [entry for path, found in walked if (entry := entry_of(root, source, path, found))]
    return sorted(files, key=lambda file: file.name)


def changed_file(root: Path, source: str, path: Path) -> tuple[str, SessionFile | None] | None:
    """The name of ``path`` below ``root`` and the session file there now (None when it is
    gone or is no session file); None when ``path`` is not where sessions are (outside,
    too deep, or reached through a symlink)."""
    if path == root:
        name = ""
    else:
        subroot = next((sub for sub in subroots(root, source) if path.is_relative_to(sub)), None)
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
    return name, entry_of(root, source, path, found) if stat.S_ISREG(found.st_mode) else None


def storable(name: str) -> str:
    """``name`` as the index keeps and shows it: itself when it is UTF-8, else with each
    byte that is not UTF-8 written as ``\\xNN`` (a file name is any bytes on Linux; SQLite
    text and JSON output take UTF-8 only). The bytes themselves are kept beside it."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name


def session_name(file: SessionFile) -> str | None:
    """The session a file belongs to when its lines do not say: its stem, or for a
    subagent's or a spilled output's file the session folder it lies in; None for an
    output Gemini CLI wrote straight into ``tool-outputs/`` (``<tool>_<n>.txt``), which
    names no session."""
    if file.shape == SPILL and file.path.parent.name == "tool-outputs":
        return None
    parts = Path(file.name or file.path.name).parts
    for marker in ("subagents", "tool-results"):
        if marker in parts[:-1]:
            at = parts.index(marker)
            if at > 0:
                return storable(parts[at - 1])
    if "tool-outputs" in parts[:-2]:  # Gemini CLI: tool-outputs/session-<id>/<file>
        return storable(parts[-2].removeprefix("session-"))
    return storable(file.path.stem)


COPY_MARKS = frozenset({"isSidechain", "agentId", "slug"})
"""What Claude Code changes in the lines a subagent's file repeats from its session (a side
question's fork marks each copy as a sidechain of its agent): not what the line says."""


def copy_key(data: bytes) -> bytes:
    """What every copy of a line has in common: the line without :data:`COPY_MARKS`, its
    keys in order; a line that is not a JSON object is its own bytes (pure)."""
    from memoryd import strict_json

    try:
        value = strict_json.loads(data)
    except strict_json.JSONProblem:
        return data
    if not isinstance(value, dict):
        return data
    kept = {key: item for key, item in value.items() if key not in COPY_MARKS}
    return json.dumps(kept, sort_keys=True).encode("utf-8", "surrogatepass")
