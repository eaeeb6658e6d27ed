"""A workspace's folder and its ``.memoryd``, each opened once: what the daemon reads when
it starts tracking a workspace, and what its tidy after READY reads and writes.

Every file is opened relative to a descriptor of one of the two folders, with
``O_NOFOLLOW``: the same refusal of symlinks below the workspace as the walk of
:mod:`memoryd.files.fsutil`, done once per workspace instead of once per file. What a start
on thousands of workspaces costs is then the reads it must make, and, on a first start,
the files it must create (docs/design.md#scale-start).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memoryd import strict_json
from memoryd.commit.draining import FOLDER as DRAINING
from memoryd.commit.recovery import leftover
from memoryd.conversation.reader import Counted
from memoryd.discovery import Found
from memoryd.errors import InputError, MemorydError, UnsafePathError
from memoryd.files.fsutil import create_in, replace_in
from memoryd.files.paths import SYMLINK_REFUSED
from memoryd.files.regular import not_regular
from memoryd.published.heartbeat import is_clean_idle, parse
from memoryd.published.state import STATE_MAX_BYTES, WorkspaceState, state_bytes
from memoryd.workspace import HEARTBEAT, META

FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
CONFIG = "config.toml"
STATE = "state.json"

TidyStep = Literal["none", "create", "clean", "locked"]


@dataclass(frozen=True, slots=True)
class Seed:
    """What a workspace's files give the daemon when it starts tracking it."""

    config: bytes | None
    """The bytes of ``.memoryd/config.toml``; None when the workspace has none."""
    state: dict[str, Any]
    """``.memoryd/state.json`` as read back; empty when missing or not a JSON object."""
    heartbeat: bytes | None
    """The bytes of HEARTBEAT.md; None when there is none."""
    leftovers: bool
    """Something :func:`memoryd.commit.recovery.recover` may act on is there."""


def read_seed(found: Found) -> Seed:
    """What the daemon needs of a workspace it starts tracking, reading only what the
    listing of its folder (``found``) says is there: ``.memoryd`` is opened once, listed,
    and its config.toml and state.json read when listed; HEARTBEAT.md read when listed.

    Raises UnsafePathError for a symlinked (or non-folder) ``.memoryd`` or a
    ``config.toml`` that is a symlink or not a regular file, and OSError when
    ``config.toml`` exists but cannot be read. A state.json or HEARTBEAT.md that cannot be
    read counts as missing or garbled: both are rebuilt.
    """
    path = os.fspath(found.path)
    heartbeat = None
    if found.heartbeat:
        try:
            heartbeat = _read(None, f"{path}/{HEARTBEAT}", path) or b""
        except (OSError, UnsafePathError):
            heartbeat = b""  # garbled: replaced by a clean one
    leftovers = found.temp or (found.memory and _holds_leftovers(None, "memory", path))
    meta = _open_folder(None, f"{path}/{META}") if found.meta else None
    if meta is None:
        return Seed(None, {}, heartbeat, leftovers)
    try:
        names = os.listdir(meta)
        config = _read(meta, CONFIG, f"{path}/{META}") if CONFIG in names else None
        state: Any = {}
        if STATE in names:
            try:
                raw = _read(meta, STATE, f"{path}/{META}", STATE_MAX_BYTES)
                state = strict_json.loads(raw or b"")
            except (OSError, ValueError, MemorydError):
                state = {}  # as memoryd.published.state.read_state: rebuilt (docs/design.md#state)
        leftovers = (
            leftovers
            or any(leftover(META, name) for name in names)
            or ("archive" in names and _holds_leftovers(meta, "archive", f"{path}/{META}"))
            or (DRAINING in names and _holds_leftovers(meta, DRAINING, f"{path}/{META}"))
        )
    finally:
        os.close(meta)
    return Seed(config, state if isinstance(state, dict) else {}, heartbeat, leftovers)


def tidy_step(seed: Seed, interrupted: bool) -> TidyStep:
    """What the tidy after READY must do for a workspace (pure): ``locked`` (recovery,
    or a job a dead daemon left running: under the job lock), ``create`` (no
    HEARTBEAT.md: create a clean one), ``clean`` (a garbled one: replace it under the
    heartbeat lock) or ``none``."""
    parsed = None
    if seed.heartbeat is not None:
        if not seed.leftovers and is_clean_idle(seed.heartbeat):
            return "none"  # what memoryd wrote, unchanged: no parse (idle, not active)
        parsed = parse(seed.heartbeat.decode("utf-8", errors="replace"))
    if seed.leftovers or (interrupted and parsed is not None and parsed.status == "active"):
        return "locked"
    if seed.heartbeat is None:
        return "create"
    return "clean" if parsed is None else "none"


class Folders:
    """The open folder of a workspace and its ``.memoryd`` (made when missing), for the
    tidy's writes; a context manager that closes both."""

    def __init__(self, path: Path) -> None:
        self.path = os.fspath(path)
        # The workspace itself may be reached through symlinks (the user named its root).
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.meta: int | None = None
        self.made_meta = False
        """``.memoryd`` was made here: nothing in it has a mode to keep."""

    def __enter__(self) -> Folders:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.meta is not None:
            os.close(self.meta)
        os.close(self.fd)

    def ensure_meta(self) -> int:
        """The descriptor of ``.memoryd``, created (mode 0755) when missing.

        Not fsynced here: a first start creates it in every workspace and puts only
        derived files in it. The first durable line in it fsyncs the folders above it
        (fsutil.append_line), and so does a durable HEARTBEAT.md, which every job writes
        before it starts (docs/design.md#power-cut)."""
        if self.meta is None:
            try:
                os.mkdir(META, 0o755, dir_fd=self.fd)
                self.made_meta = True
            except FileExistsError:
                pass
            meta = f"{self.path}/{META}"
            self.meta = _open_folder(self.fd, meta)
            if self.meta is None:
                raise FileNotFoundError(errno.ENOENT, "vanished while being made", meta)
        return self.meta

    def create_heartbeat(self, text: str) -> bool:
        """Create HEARTBEAT.md with ``text`` unless someone made one meanwhile (True when
        created). Staged in ``.memoryd``, which is not watched: the watcher sees one event."""
        return create_in(self.fd, HEARTBEAT, text.encode(), staging=self.ensure_meta())

    def write_state(self, state: WorkspaceState, counted: Counted | None = None) -> None:
        """Replace state.json atomically, not fsynced (derived: rebuilt at start). In a
        ``.memoryd`` made here there is no old file whose mode to look up and keep."""
        meta = self.ensure_meta()
        mode = 0o644 if self.made_meta else None
        replace_in(meta, STATE, state_bytes(state, counted), mode, durable=False)


def _open_folder(parent: int | None, path: str) -> int | None:
    """A descriptor of the folder ``path`` (by its last name relative to the open
    ``parent``, or whole when None), never through a symlink; None when it does not
    exist. The workspace itself may be reached through symlinks (the user named its
    root): ``O_NOFOLLOW`` holds for the last name only."""
    try:
        if parent is None:
            return os.open(path, FOLDER_FLAGS)
        return os.open(os.path.basename(path), FOLDER_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        # O_DIRECTORY makes a symlink ENOTDIR too: say which it is.
        if os.path.islink(path):
            raise UnsafePathError(f"{path}: {SYMLINK_REFUSED}") from None
        raise UnsafePathError(f"{path}: is not a folder") from None


def _holds_leftovers(parent: int | None, kind: str, where: str) -> bool:
    """Whether the folder ``kind`` of ``where`` (open as ``parent``, or None) holds a file
    :func:`leftover` names; a folder that cannot be read counts as holding one (the full
    recovery then says why)."""
    try:
        fd = _open_folder(parent, f"{where}/{kind}")
    except (OSError, UnsafePathError):
        return True
    if fd is None:
        return False
    try:
        return any(leftover(kind, name) for name in os.listdir(fd))
    except OSError:
        return True
    finally:
        os.close(fd)


def _read(folder: int | None, name: str, where: str, max_bytes: int | None = None) -> bytes | None:
    """The bytes of the regular file ``name`` (in the open ``folder``, or a whole path when
    None; ``where`` names the folder in errors); None when it is missing. A symlink, FIFO,
    socket or device is refused (UnsafePathError) without a wait, as
    :mod:`memoryd.files.regular` refuses them (docs/design.md#regular-files); with
    ``max_bytes``, so is a longer file (InputError)."""
    shown = f"{where}/{os.path.basename(name)}"
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{shown}: {SYMLINK_REFUSED}") from None
        if exc.errno == errno.ENXIO:  # a socket: there, but nothing to open
            raise not_regular(shown) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(shown)
        limit = st.st_size if max_bytes is None else min(st.st_size, max_bytes)
        # One read for the size it has, and more only if it grew meanwhile.
        data = os.read(fd, limit + 1)
        chunks, total = [data], len(data)
        if total > limit:
            while (max_bytes is None or total <= max_bytes) and (chunk := os.read(fd, 1 << 16)):
                chunks.append(chunk)
                total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise InputError(f"{shown}: is larger than {max_bytes:,} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
