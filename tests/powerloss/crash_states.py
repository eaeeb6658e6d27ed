"""Every state a power cut could leave, built from a recording (docs/design.md#power-cut).

The model is the usual one of a journaling file system (ext4 ``data=ordered``, xfs,
btrfs), taken at its weakest:

- the power goes after any op of the recording (the *cut*); what the ops before it did
  is on disk or not as follows;
- a file's data ops (writes, truncations) keep their order: after its last fsync before
  the cut, any prefix of them is on disk, the last one of that prefix possibly cut short
  at a block boundary (4096 bytes; 512 for a write shorter than a block): never garbage,
  never a later write without an earlier one;
- a change to a folder (a create, mkdir, rename, link, unlink) is on disk once that folder
  was fsynced after it; before that each one may or may not be, independently of the
  others (a rename is all or nothing); an entry in a folder whose own creation is not on
  disk is lost with it;
- the recall index's SQLite files change as units (:class:`~powerloss_record.Unit`), of
  which the last one may be lost: SQLite's own journal makes its transactions atomic.

A crash state is one choice for each of these; :func:`count` says how many there are,
:func:`enumerate_states` lists them all and :func:`sample` draws one with a seeded
``random.Random``.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from powerloss_ops import (
    DIR,
    TEMPLATE_RE,
    Create,
    Fsync,
    FsyncDir,
    Link,
    Mkdir,
    Op,
    Recording,
    Rename,
    Returned,
    Truncate,
    Unit,
    Unlink,
    Write,
)

BLOCK = 4096
SECTOR = 512


def pieces(write: Write) -> list[int]:
    """The lengths (neither 0 nor all of it) to which a power cut may shorten ``write``."""
    step = BLOCK if len(write.data) >= BLOCK else SECTOR
    end = write.offset + len(write.data)
    first = (write.offset // step + 1) * step
    return [boundary - write.offset for boundary in range(first, end, step)]


def _folders(op: Op) -> tuple[str, ...]:
    """The folders whose entries ``op`` changes."""
    if isinstance(op, Create | Mkdir | Unlink):
        return (_parent(op.path),)
    if isinstance(op, Link):
        return (_parent(op.dst),)
    if isinstance(op, Rename):
        return tuple({_parent(op.src), _parent(op.dst)})
    return ()


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


@dataclass(frozen=True, slots=True)
class DataChoice:
    """How much of a file's unsynced data ops reached the disk."""

    applied: int
    """Ops applied whole, after those before the file's last fsync."""
    piece: int = 0
    """Bytes of the next write applied as well."""


@dataclass(frozen=True, slots=True)
class Choices:
    """One crash state: the cut and what of the unsynced ops before it is on disk."""

    cut: int
    data: tuple[tuple[int, DataChoice], ...]
    persisted: frozenset[int]
    """Indices of the optional folder changes that are on disk."""
    unit_lost: bool = False
    """The last SQLite unit before the cut did not reach the disk."""

    def describe(self) -> str:
        """A line that names the state (for a failure message)."""
        data = ", ".join(
            f"file {fid}: {c.applied} ops + {c.piece} bytes"
            for fid, c in self.data
            if c.applied or c.piece
        )
        kept = sorted(self.persisted)
        lost = "; the last index unit lost" if self.unit_lost else ""
        return (
            f"power cut after op {self.cut}; unsynced data on disk: {data or 'none'}; "
            f"unsynced folder changes on disk: {kept or 'none'}{lost}"
        )


@dataclass(frozen=True, slots=True)
class CrashState:
    """What a crash left: names (templates) to file ids or DIR, the files' bytes."""

    choices: Choices
    names: dict[str, int]
    data: dict[int, bytes]
    units: dict[str, bytes]
    acknowledged: tuple[tuple[int, Returned], ...]
    """The writes acknowledged before the cut, with their op index."""

    def key(self) -> tuple[object, ...]:
        """Equal for states that look the same on disk and acknowledged the same writes."""
        order: dict[int, int] = {}
        entries = []
        for path, fid in sorted(self.names.items()):
            if fid == DIR:
                entries.append((path, "dir"))
            else:
                canonical = order.setdefault(fid, len(order))
                entries.append((path, f"{canonical}:{hash(self.data[fid])}"))
        return (tuple(entries), tuple(sorted(self.units.items())), len(self.acknowledged))


class Model:
    """The crash states of one recording."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.ops = recording.ops
        self._data_ops: dict[int, list[int]] = {}
        self._fsyncs: dict[int, list[int]] = {}
        self._dir_fsyncs: dict[str, list[int]] = {}
        self._units: list[int] = []
        self._optional: dict[int, list[int]] = {}
        for index, op in enumerate(self.ops):
            if isinstance(op, Write | Truncate):
                self._data_ops.setdefault(op.fid, []).append(index)
            elif isinstance(op, Fsync):
                self._fsyncs.setdefault(op.fid, []).append(index)
            elif isinstance(op, FsyncDir):
                self._dir_fsyncs.setdefault(op.path, []).append(index)
            elif isinstance(op, Unit):
                self._units.append(index)

    @property
    def cuts(self) -> range:
        """Every place the power may go: before the first op, ..., after the last."""
        return range(len(self.ops) + 1)

    def _last_before(self, indices: list[int], cut: int, after: int = -1) -> int:
        found = after
        for index in indices:
            if index >= cut:
                break
            found = max(found, index)
        return found

    def pending(self, fid: int, cut: int) -> list[int]:
        """The data ops of ``fid`` before ``cut`` and after its last fsync before it."""
        synced = self._last_before(self._fsyncs.get(fid, []), cut)
        return [i for i in self._data_ops.get(fid, []) if synced < i < cut]

    def data_options(self, fid: int, cut: int) -> list[DataChoice]:
        """What of ``fid``'s unsynced data ops a power cut at ``cut`` may have kept."""
        pending = self.pending(fid, cut)
        options = []
        for applied in range(len(pending) + 1):
            options.append(DataChoice(applied))
            if applied < len(pending):
                op = self.ops[pending[applied]]
                if isinstance(op, Write):
                    options.extend(DataChoice(applied, piece) for piece in pieces(op))
        return options

    def optional(self, cut: int) -> list[int]:
        """The folder changes before ``cut`` that no fsync of their folder made durable."""
        cached = self._optional.get(cut)
        if cached is not None:
            return cached
        found = self._optional[cut] = []
        for index in range(cut):
            op = self.ops[index]
            folders = _folders(op)
            if not folders:
                continue
            durable = all(
                any(index < i < cut for i in self._dir_fsyncs.get(folder, [])) for folder in folders
            )
            if not durable:
                found.append(index)
        return found

    def fids_at(self, cut: int) -> list[int]:
        """The files with data ops before ``cut``."""
        return sorted(fid for fid, ops in self._data_ops.items() if ops and ops[0] < cut)

    def _unit_options(self, cut: int) -> list[bool]:
        return [False, True] if any(i < cut for i in self._units) else [False]

    def count_at(self, cut: int) -> int:
        """How many crash states a power cut at ``cut`` has."""
        total = (1 << len(self.optional(cut))) * len(self._unit_options(cut))
        for fid in self.fids_at(cut):
            total *= len(self.data_options(fid, cut))
        return total

    def count(self) -> int:
        """How many crash states the recording has, over every cut."""
        return sum(self.count_at(cut) for cut in self.cuts)

    def enumerate_states(self) -> Iterator[CrashState]:
        """Every crash state, cut by cut (use only when :meth:`count` is small)."""
        for cut in self.cuts:
            fids = self.fids_at(cut)
            optional = self.optional(cut)
            per_fid = [self.data_options(fid, cut) for fid in fids]
            for data in itertools.product(*per_fid):
                for kept in itertools.product((False, True), repeat=len(optional)):
                    persisted = frozenset(i for i, keep in zip(optional, kept, strict=True) if keep)
                    for lost in self._unit_options(cut):
                        yield self.build(
                            Choices(cut, tuple(zip(fids, data, strict=True)), persisted, lost)
                        )

    def least(self, cut: int) -> Choices:
        """At ``cut``, nothing that was not synced reached the disk."""
        data = tuple((fid, DataChoice(0)) for fid in self.fids_at(cut))
        return Choices(cut, data, frozenset(), len(self._unit_options(cut)) > 1)

    def most(self, cut: int, keep: Callable[[Op], bool] = lambda _op: True) -> Choices:
        """At ``cut``, all of it did, but the folder changes that ``keep`` refuses."""
        data = tuple((fid, DataChoice(len(self.pending(fid, cut)))) for fid in self.fids_at(cut))
        kept = frozenset(i for i in self.optional(cut) if keep(self.ops[i]))
        return Choices(cut, data, kept)

    def extremes(self) -> Iterator[CrashState]:
        """For every cut, the least and the most that may have reached the disk."""
        for cut in self.cuts:
            yield self.build(self.least(cut))
            yield self.build(self.most(cut))

    def sample(self, rng: random.Random) -> CrashState:
        """One crash state drawn with ``rng``: a cut, then every choice at random."""
        cut = rng.choice(self.cuts)
        fids = self.fids_at(cut)
        data = tuple((fid, rng.choice(self.data_options(fid, cut))) for fid in fids)
        persisted = frozenset(i for i in self.optional(cut) if rng.random() < 0.5)
        lost = rng.choice(self._unit_options(cut))
        return self.build(Choices(cut, data, persisted, lost))

    def build(self, choices: Choices) -> CrashState:
        """The names, bytes and acknowledged writes of one crash state."""
        cut = choices.cut
        optional = set(self.optional(cut))
        names = dict(self.recording.names)
        units = dict(self.recording.units)
        acknowledged = [(-1, op) for op in self.recording.acknowledged]
        unit_indices = [i for i in self._units if i < cut]
        if choices.unit_lost:
            unit_indices = unit_indices[:-1]
        if unit_indices:
            last = self.ops[unit_indices[-1]]
            assert isinstance(last, Unit)
            units = {path: data for path, data in last.files if data is not None}
        for index in range(cut):
            op = self.ops[index]
            if isinstance(op, Returned):
                acknowledged.append((index, op))
            elif _folders(op) and (index not in optional or index in choices.persisted):
                _apply_name(names, op)
        chosen = dict(choices.data)
        data = {}
        for fid in _referenced(names):
            data[fid] = self._content(fid, cut, chosen.get(fid))
        return CrashState(choices, names, data, units, tuple(acknowledged))

    def final_content(self, fid: int) -> bytes:
        """The bytes of ``fid`` with every op of the recording applied."""
        content = bytearray(self.recording.data.get(fid, b""))
        for index in self._data_ops.get(fid, []):
            _apply_data(content, self.ops[index])
        return bytes(content)

    def _content(self, fid: int, cut: int, choice: DataChoice | None) -> bytes:
        content = bytearray(self.recording.data.get(fid, b""))
        pending = self.pending(fid, cut)
        first_pending = pending[0] if pending else cut
        durable = [i for i in self._data_ops.get(fid, []) if i < first_pending]
        applied = choice.applied if choice is not None else 0
        for index in (*durable, *pending[:applied]):
            _apply_data(content, self.ops[index])
        if choice is not None and choice.piece:
            op = self.ops[pending[applied]]
            assert isinstance(op, Write)
            _apply_data(content, Write(op.fid, op.offset, op.data[: choice.piece]))
        return bytes(content)


def _apply_name(names: dict[str, int], op: Op) -> None:
    def parent_exists(path: str) -> bool:
        parent = _parent(path)
        return parent == "" or names.get(parent) == DIR

    if isinstance(op, Create) and parent_exists(op.path):
        names[op.path] = op.fid
    elif isinstance(op, Mkdir) and parent_exists(op.path):
        names[op.path] = DIR
    elif isinstance(op, Link) and parent_exists(op.dst):
        names[op.dst] = op.fid
    elif isinstance(op, Unlink):
        names.pop(op.path, None)
    elif isinstance(op, Rename):
        names.pop(op.src, None)
        if parent_exists(op.dst):
            names[op.dst] = op.fid


def _apply_data(content: bytearray, op: Op) -> None:
    if isinstance(op, Write):
        if op.offset > len(content):
            content.extend(bytes(op.offset - len(content)))
        content[op.offset : op.offset + len(op.data)] = op.data
    elif isinstance(op, Truncate):
        if op.size < len(content):
            del content[op.size :]
        else:
            content.extend(bytes(op.size - len(content)))


def _referenced(names: dict[str, int]) -> set[int]:
    """File ids that a name holds or that a name carries the inode number of."""
    found = {fid for fid in names.values() if fid != DIR}
    for path in names:
        found.update(int(m["fid"]) for m in TEMPLATE_RE.finditer(path))
    return found


def materialize(state: CrashState, folder: Path) -> None:
    """Lay ``state`` out in the empty ``folder``: real files, hard links where two names
    share a file, and inode numbers filled into the names that carry one."""
    holders = folder / ".crash-state-holders"
    holders.mkdir(parents=True)
    inode = {}
    for fid, content in state.data.items():
        holder = holders / str(fid)
        holder.write_bytes(content)
        inode[fid] = holder.stat().st_ino
    for path, fid in sorted(state.names.items()):
        real = folder / TEMPLATE_RE.sub(lambda m: str(inode[int(m["fid"])]), path)
        if fid == DIR:
            real.mkdir()
        else:
            os.link(holders / str(fid), real)
    for path, content in state.units.items():
        (folder / path).write_bytes(content)
    shutil.rmtree(holders)


def log_count(count: int) -> str:
    """A count for a table: exact when small, ``~10^N`` when not."""
    return f"{count:,}" if count < 10**9 else f"~10^{math.floor(math.log10(count))}"
