"""A source as a search reads it: which agent's folder a path is in, its index brought up
to date (or left to the daemon that tails it), what another process's first index means
for a search, and the files skipped (docs/design.md#sources)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from memoryd import strict_json
from memoryd.errors import InputError, MemorydError
from memoryd.search.database import connect_reader
from memoryd.search.lazylog import LazyLog
from memoryd.search.schema import SESSIONS, is_current, kept_current
from memoryd.search.sessions import store
from memoryd.search.sessions.layout import UNKNOWN, agent_root, by_layout, recognise, sources_in
from memoryd.search.sessions.listing import SyncResult, keep_folders, list_changes
from memoryd.search.sessions.places import STATUS_FILE, state_dir
from memoryd.search.sessions.store import Progress
from memoryd.value import Value

log = LazyLog()
TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Final, TypeVar

    T = TypeVar("T")
DAEMON_SLACK = 10.0
"""Seconds a daemon's status may be late beyond two rescan intervals."""
WAIT_STEP = 0.25
"""Seconds between two looks at another process's first index."""
SHOWN_NAMES = 5
"""Skipped files named in the line that says so; the rest are counted."""
CHECKPOINT_BYTES = 16 << 20
"""A pass that read this much folds the WAL back into the index (SQLite also does it on
its own every 1,000 pages)."""


class Target(Value):
    """A source as a search reads it: the agent's folder whose index it is, and the part
    of it asked for."""

    __slots__ = ("root", "source", "within")

    def __init__(self, root: Path, source: str, within: str | None = None) -> None:
        self.root: Final = root
        self.source: Final = source
        self.within: Final = within
        """The name (below ``root``) of the folder or file asked for; None for all of it."""


def resolve(path: Path | str, source: str | None = None) -> list[Target]:
    """The sources at ``path``: one, or one per agent's folder in it (a home folder, a
    backup of several agents' folders). A path inside an agent's folder is searched in
    that folder's index, narrowed to the path. InputError (one line, exit 2) when there
    is none."""
    given = Path(path).expanduser()
    if not given.exists():
        raise InputError(f"{given}: no such file or folder")
    given = given.resolve()
    found = by_layout(given)
    if found is None and given.is_dir():
        inside = [(sub, kind) for sub, kind in sources_in(given) if source in (None, kind)]
        if inside:
            return [Target(sub, kind) for sub, kind in inside]
    found = found or recognise(given)
    if source is not None and found not in (None, source):
        raise InputError(f"{given}: holds {found} sessions, not {source}")
    found = found or source
    if found is None:
        raise InputError(
            f"{given}: no Claude Code, Codex or Gemini CLI session of any known kind here"
        )
    root = agent_root(given, found)
    if root == given:
        return [Target(given, found)]
    return [Target(root, found, given.relative_to(root).as_posix())]


def update(
    root: Path,
    source: str,
    *,
    wait: bool = True,
    changed: Iterable[Path] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SyncResult | None:
    """Bring the index of ``root`` up to date (only the ``changed`` paths, when given: what
    a watcher saw); None when another process is doing it and ``wait`` is False. A
    damaged index is removed and built again once. A long pass tells ``progress`` how far
    it is, and other processes through the index's progress file."""
    path = store.index_path(root, source)
    with store.writer_lock(path, blocking=wait) as held:
        if not held:
            return None

        def index(conn: sqlite3.Connection) -> SyncResult:
            listing = None
            if changed is None and root.is_dir():
                listing = list_changes(conn, root, source)
                if not listing.changed and not listing.gone:
                    keep_folders(conn, listing)
                    return SyncResult()  # nothing to read: no indexer loaded
            from memoryd.search.sessions.indexer import sync

            with store.progress_file(path, progress) as told:
                result = sync(conn, root, source, changed, told, listing)
            if result.bytes >= CHECKPOINT_BYTES:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            return result

        def rebuilding(reason: str) -> None:
            log.info("source_index_rebuilding", path=str(path), reason=reason)

        return kept_current(
            path,
            SESSIONS,
            index,
            create=store.create_file,
            connect=store.connect,
            rebuilding=rebuilding,
            meta=store.meta(root, source),
        )


FIGURES = ("sessions", "files", "lines", "messages", "bytes_indexed")


def figures(root: Path, source: str) -> dict[str, int]:
    """What the index of a source holds: sessions, files, lines read, messages indexed,
    bytes read; all 0 when there is no index yet."""
    path = store.index_path(root, source)
    if not path.exists():
        return dict.fromkeys(FIGURES, 0)
    conn = connect_reader(path)
    try:
        row = conn.execute(
            "SELECT count(DISTINCT session), count(*), coalesce(sum(lines), 0), "
            "coalesce(sum(messages), 0), coalesce(sum(size), 0) FROM archives"
        ).fetchone()
    finally:
        conn.close()
    return dict(zip(FIGURES, map(int, row), strict=True))


def with_source(
    root: Path,
    source: str,
    use: Callable[[sqlite3.Connection], T],
    notes: list[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> T:
    """``use`` on the up-to-date index of a source. When another process holds the
    writer's lock, what is indexed is read; but while that process builds the index for
    the first time, the search waits for it when ``progress`` is given (it is told how far
    the build is), else it reads what is built and says how much in ``notes``. An OSError
    or an SQLite error is a MemorydError naming the file or the index."""
    try:
        return _with_source(root, source, use, notes, progress)
    except OSError as exc:
        raise MemorydError(f"{exc.filename or root}: {exc.strerror or exc}") from None
    except sqlite3.Error as exc:
        raise MemorydError(f"the index of {root}: {exc}") from None


def _with_source(
    root: Path,
    source: str,
    use: Callable[[sqlite3.Connection], T],
    notes: list[str] | None,
    progress: Callable[[Progress], None] | None,
) -> T:
    path = store.index_path(root, source)
    if path.exists() and kept_by_daemon(root, source):
        pass  # the daemon's watch keeps it up to date: no look at the files
    elif update(root, source, wait=False, progress=progress) is None:
        log.info("source_index_busy", path=str(path))
        building = store.read_progress(path)
        first = building is not None and building.first
        if not path.exists() or (first and progress is not None):
            while update(root, source, wait=False, progress=progress) is None:
                building = store.read_progress(path) or building
                if progress is not None and building is not None:
                    progress(building)
                time.sleep(WAIT_STEP)
        elif first and building is not None and notes is not None:
            notes.append(
                f"the index of {root} is {building.percent}% built (another process is "
                "building it): these hits are from what is indexed so far"
            )
    conn = connect_reader(path)
    try:
        if is_current(conn, SESSIONS, store.meta(root, source)):
            return use(conn)
    finally:
        conn.close()
    update(root, source)  # made by the other process a moment ago: wait for its pass
    conn = connect_reader(path)
    try:
        return use(conn)
    finally:
        conn.close()


def kept_by_daemon(root: Path, source: str) -> bool:
    """True when a running daemon tails this source and has nothing pending: its watch
    sees every change, so a query needs no look at the files (docs/design.md#sources).
    What the daemon last wrote to ``daemon.json`` says so; a daemon gone, late (no write
    for two rescan intervals), failing or with changes pending does not."""
    try:
        record = strict_json.loads((state_dir() / STATUS_FILE).read_bytes())
        pid, written, rescan = record["pid"], record["written"], record["rescan_seconds"]
        entries = record["sources"]
        if time.time() - float(written) > 2 * float(rescan) + DAEMON_SLACK:
            return False
        os.kill(int(pid), 0)
    except PermissionError:
        pass  # alive, another user's
    except (OSError, KeyError, TypeError, ValueError, strict_json.JSONProblem):
        return False
    return any(
        isinstance(entry, dict)
        and entry.get("root") == os.fsdecode(root)
        and entry.get("kind") == source
        and entry.get("error") is None
        and entry.get("pending_changes") == 0
        and entry.get("last_pass") is not None
        for entry in entries
    )


def skipped(conn: sqlite3.Connection) -> list[str]:
    """The files of the index in no format their agent writes, by name."""
    return [
        name for (name,) in conn.execute("SELECT name FROM archives WHERE shape = ?", (UNKNOWN,))
    ]


def skipped_note(names: list[str]) -> str | None:
    """The one line that says which files were skipped (None for none)."""
    if not names:
        return None
    shown = ", ".join(names[:SHOWN_NAMES])
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    files = "file" if len(names) == 1 else "files"
    return f"skipped {len(names)} {files} of an unknown format: {shown}{more}"


def archives_within(conn: sqlite3.Connection, within: str | None) -> list[int] | None:
    if within is None:
        return None
    prefix = within.rstrip("/") + "/"
    return [
        file_id
        for file_id, name in conn.execute("SELECT id, name FROM archives")
        if name == within or name.startswith(prefix)
    ]
