"""The ops of a file-system record and the record itself (docs/design.md#power-cut).

A file is named by a *file id* (one per inode, a new one for each file created); a name
that carries an inode number keeps it as ``{ino:ID}`` (see :mod:`powerloss_record`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DIR = -1
"""The file id of a folder in a namespace."""


@dataclass(frozen=True, slots=True)
class Create:
    """A new, empty regular file ``path`` (a change to its folder)."""

    path: str
    fid: int


@dataclass(frozen=True, slots=True)
class Mkdir:
    """A new folder ``path`` (a change to its parent)."""

    path: str


@dataclass(frozen=True, slots=True)
class Write:
    """``data`` written to file ``fid`` at ``offset``."""

    fid: int
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Truncate:
    """File ``fid`` cut (or extended) to ``size`` bytes."""

    fid: int
    size: int


@dataclass(frozen=True, slots=True)
class Fsync:
    """fsync of file ``fid``: its data ops so far are on disk."""

    fid: int


@dataclass(frozen=True, slots=True)
class FsyncDir:
    """fsync of folder ``path``: its entries' changes so far are on disk."""

    path: str


@dataclass(frozen=True, slots=True)
class Rename:
    """File ``fid`` renamed from ``src`` to ``dst`` (replacing what was there)."""

    src: str
    dst: str
    fid: int


@dataclass(frozen=True, slots=True)
class Link:
    """A second name ``dst`` for file ``fid``."""

    dst: str
    fid: int


@dataclass(frozen=True, slots=True)
class Unlink:
    """The name ``path`` removed."""

    path: str


@dataclass(frozen=True, slots=True)
class Returned:
    """A write the caller was told is done: ``data`` appended to ``path`` (whole lines), or,
    with ``replaced``, ``path`` replaced by ``data``."""

    path: str
    data: bytes
    replaced: bool = False


@dataclass(frozen=True, slots=True)
class Unit:
    """The files SQLite keeps (the recall index) after a transaction: one unit, as SQLite
    makes its own writes atomic and durable; ``None`` for a file that is not there."""

    files: tuple[tuple[str, bytes | None], ...]


Op = Create | Mkdir | Write | Truncate | Fsync | FsyncDir | Rename | Link | Unlink | Returned | Unit
TEMPLATE_RE = re.compile(r"\{ino:(?P<fid>\d+)\}")
"""An inode number in a name, as the file id whose inode it is."""


@dataclass(slots=True)
class Recording:
    """The folder as it was when the record started (all of it durable), and the ops since."""

    names: dict[str, int]
    """Path (relative to the recorded folder) to file id, or DIR."""
    data: dict[int, bytes]
    units: dict[str, bytes]
    """The ignored (SQLite) files at the start."""
    ops: list[Op] = field(default_factory=list)
    acknowledged: list[Returned] = field(default_factory=list)
    """Writes acknowledged before the record began that the files at the start may not
    show as such (a line in a replaced file that recovery is to carry)."""

    def fids(self) -> set[int]:
        """Every file id the recording knows."""
        found = set(self.data)
        found.update(op.fid for op in self.ops if isinstance(op, Create))
        return found
