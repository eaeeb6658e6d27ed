"""A power cut at any moment loses nothing (docs/design.md#power-cut).

Each scenario's file-system ops are recorded during one real run; every crash state a
journaling file system could leave is built from the record, laid out in a fresh folder,
recovered as a daemon's start does it, checked, put through the next commands and checked
again (tests/powerloss/powerloss_checks.py). The default run checks a seeded sample of each
scenario; ``-m slow`` checks every state (or, where there are too many, each cut's extremes
and 10,000 seeded samples). The regression tests below are the crash states that found
each missing fsync and the duplicated carry.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from crash_states import Choices, DataChoice, Model, materialize, pieces
from powerloss_checks import check_after_cut, expectations
from powerloss_ops import (
    DIR,
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
    Unlink,
    Write,
)
from powerloss_record import recording
from powerloss_run import check_recording, record, sampled, scratch_folder
from powerloss_scenarios import (
    CONVERSATION,
    EVENTS,
    SCENARIOS,
    Scenario,
    append_command,
    commit_unlocked,
    job_settings,
    memory_store,
    message_line,
    receipts_and_events,
)

from memoryd.commit.recovery import recover
from memoryd.commit.rewrite import rewrite
from memoryd.commit.snapshot import read_snapshot
from memoryd.config.settings import Settings
from memoryd.conversation import lines as conversation
from memoryd.conversation.lines import append_message
from memoryd.errors import MemorydError
from memoryd.workspace import Workspace

FAST_SAMPLE = 40
SEED = 22


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """Where crash states are laid out (a tmpfs when there is one; see scratch_folder)."""
    with scratch_folder(tmp_path) as folder:
        yield folder


@pytest.fixture
def settings(clean_environment: Path) -> Settings:
    """The defaults (the first message pinned), no drain wait, no index thread."""
    return job_settings(clean_environment)


# --- every scenario -------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_seeded_sample_of_crash_states_is_recovered_with_nothing_lost(
    scenario: Scenario, scratch: Path, settings: Settings, tmp_path: Path
) -> None:
    """The fast stage: 40 crash states of each scenario, drawn with a fixed seed."""
    recorded = record(scenario, scratch, settings)
    report = check_recording(
        scenario.name,
        recorded,
        scratch,
        settings,
        states=sampled(Model(recorded), FAST_SAMPLE, SEED),
        job_every=4,
        failures=tmp_path / "failures",
    )
    print(f"{scenario.name}: {report.states:,} crash states, checked {report.checked}")
    assert report.checked > 0
    assert report.violations == []


@pytest.mark.slow
@pytest.mark.timeout(900)  # the busy workspace's 10,000 samples: 1-3 minutes on 2 cores
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_crash_state_is_recovered_with_nothing_lost(
    scenario: Scenario, scratch: Path, settings: Settings, tmp_path: Path
) -> None:
    """Every crash state of the scenario, or, past 50,000, each cut's least and most
    and 10,000 seeded samples; bench/power_cut.py prints the same as a table."""
    recorded = record(scenario, scratch, settings)
    report = check_recording(
        scenario.name, recorded, scratch, settings, seed=SEED, failures=tmp_path / "failures"
    )
    how = "all enumerated" if report.enumerated else f"sampled (seed {SEED})"
    print(
        f"{scenario.name}: {report.ops} ops, {report.states:,} crash states, {how}: "
        f"{report.drawn:,} drawn, {report.checked:,} distinct checked "
        f"({report.jobs} with a job), {len(report.violations)} violations"
    )
    assert report.violations == []


# --- the crash states that found the fixes ---------------------------------------------


def _problems(
    recorded: Recording, choices: Choices, scratch: Path, settings: Settings
) -> list[str]:
    state = Model(recorded).build(choices)
    folder = scratch / "state"
    materialize(state, folder)
    return check_after_cut(folder, state, expectations(recorded), settings, job=True)


def _after(recorded: Recording, found: Callable[[Op], bool], start: int = 0) -> int:
    """The cut just after the first op from ``start`` on that ``found`` accepts."""
    return next(i for i, op in enumerate(recorded.ops) if i >= start and found(op)) + 1


def _recorded(
    scenario: Callable[[Path, Settings], Recording], scratch: Path, settings: Settings
) -> Recording:
    return record(Scenario(scenario.__name__, scenario), scratch, settings)


def test_the_first_append_to_a_new_conversation_keeps_its_name_after_a_power_cut(
    scratch: Path, settings: Settings
) -> None:
    """``memoryd append`` into a workspace without conversation.jsonl returned, then the
    power went before anything else reached the disk: the file's name must have."""
    recorded = _recorded(append_command, scratch, settings)
    cut = _after(recorded, lambda op: isinstance(op, Returned))
    assert _problems(recorded, Model(recorded).least(cut), scratch, settings) == []


@pytest.mark.parametrize(
    ("scenario", "path"),
    [
        (memory_store, "ws/memory/todos.jsonl"),
        (receipts_and_events, EVENTS),
        (receipts_and_events, "ws/.memoryd/receipts.jsonl"),
    ],
    ids=["a new store", "events.jsonl in a new .memoryd", "receipts"],
)
def test_the_first_line_of_a_new_log_and_its_new_folder_survive_a_power_cut(
    scenario: Callable[[Path, Settings], Recording], path: str, scratch: Path, settings: Settings
) -> None:
    """A memory write, an event, a receipt into a file (and folder) that did not exist
    returned; then the power went with nothing unsynced on disk."""
    recorded = _recorded(scenario, scratch, settings)
    cut = _after(recorded, lambda op: isinstance(op, Returned) and op.path == path)
    assert _problems(recorded, Model(recorded).least(cut), scratch, settings) == []


def _carry_write(recorded: Recording) -> Write:
    """The drain's write of the late bytes of the replaced file into the new one."""
    late = message_line(102)[100:]
    replaced = recorded.names[CONVERSATION]
    return next(
        op
        for op in recorded.ops
        if isinstance(op, Write) and op.fid != replaced and op.data.startswith(late)
    )


def test_a_line_fsynced_into_the_replaced_file_survives_a_cut_that_kept_the_rename_only(
    scratch: Path, settings: Settings
) -> None:
    """A writer that does not lock finished a line in the old inode after the commit's
    rename and fsynced it; the power went with the rename on disk but not the drain
    mark's link: the mark must be durable before the rename."""
    recorded = _recorded(commit_unlocked, scratch, settings)
    cut = _after(recorded, lambda op: isinstance(op, Returned) and op.data == message_line(102))
    model = Model(recorded)
    choices = model.most(cut, keep=lambda op: not isinstance(op, Link))
    assert _problems(recorded, choices, scratch, settings) == []


def test_a_carry_that_reached_the_disk_is_not_carried_again_after_a_power_cut(
    scratch: Path, settings: Settings
) -> None:
    """The drain's append of the late lines was fsynced; the power went before the mark
    moved on: recovery must find them carried, not append them twice."""
    recorded = _recorded(commit_unlocked, scratch, settings)
    write = _carry_write(recorded)
    start = recorded.ops.index(write)
    cut = _after(recorded, lambda op: op == Fsync(write.fid), start=start)
    assert _problems(recorded, Model(recorded).least(cut), scratch, settings) == []


def test_a_carry_cut_short_by_a_power_cut_is_cut_back_and_carried_once(
    scratch: Path, settings: Settings
) -> None:
    """The drain's append of the late lines reached the disk only in part: recovery cuts
    the piece off and carries the lines again, whole and once."""
    recorded = _recorded(commit_unlocked, scratch, settings)
    write = _carry_write(recorded)
    assert pieces(write)
    cut = recorded.ops.index(write) + 1
    model = Model(recorded)
    torn = DataChoice(model.pending(write.fid, cut).index(cut - 1), pieces(write)[0])
    data = tuple((fid, torn if fid == write.fid else c) for fid, c in model.least(cut).data)
    choices = Choices(cut, data, frozenset(model.optional(cut)))
    assert _problems(recorded, choices, scratch, settings) == []


def test_recovery_keeps_a_torn_line_ending_the_live_file_apart_from_the_lines_it_carries(
    tmp_path: Path,
) -> None:
    """After a power cut the live file ends with half a line (an append cut short) while
    a drain mark holds a whole line past its offset: the half stays a line of its own and
    the carried line follows it whole."""
    ws = Workspace(tmp_path / "ws")
    (ws.meta / "draining").mkdir(parents=True)
    old = tmp_path / "old"
    old.write_bytes(message_line(1) + message_line(2))
    torn = message_line(3)[:50]
    ws.conversation.write_bytes(message_line(0) + torn)
    ino = old.stat().st_ino
    os.link(
        old, ws.meta / "draining" / f"conversation.jsonl.999999999.{ino}.{len(message_line(1))}"
    )
    old.unlink()
    recover(ws)
    assert ws.conversation.read_bytes() == message_line(0) + torn + b"\n" + message_line(2)
    assert list((ws.meta / "draining").iterdir()) == []


def test_an_append_whose_new_file_name_cannot_be_synced_says_the_message_was_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first line is written and fsynced; when the folder's fsync then fails the error
    says so instead of "nothing was written"."""

    def broken(root: Path, folder: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(conversation, "fsync_folder_in", broken)
    with pytest.raises(MemorydError, match="the message was appended, but the folder"):
        append_message(tmp_path, "user", "hello")
    assert b'"content":"hello"' in (tmp_path / "conversation.jsonl").read_bytes()


def test_a_drain_mark_whose_folder_cannot_be_synced_is_removed_and_the_commit_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unsynced mark could outlive its drain and be carried twice: it goes, the commit
    drains unmarked (as when a mark cannot be made at all)."""
    ws = Workspace(tmp_path)
    ws.conversation.write_bytes(message_line(0) + message_line(1))
    snapshot, _ = read_snapshot(ws.conversation, root=ws.path)
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/draining"):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    result = rewrite(snapshot, [message_line(9)], lock=ws.lock, archive=None, drain_seconds=0)
    assert result.new_size == len(message_line(9))
    assert ws.conversation.read_bytes() == message_line(9)
    assert list((ws.meta / "draining").iterdir()) == []


# --- the record and the model -----------------------------------------------------------


def test_a_record_holds_every_change_memoryd_can_make_to_a_folder(tmp_path: Path) -> None:
    """Creates, writes (plain, appending, copied), truncations, fsyncs of files and
    folders, renames, links, unlinks and mkdirs, each once and in order."""
    (tmp_path / "old").write_bytes(b"0123456789")
    with recording(tmp_path) as rec:
        folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        os.mkdir("sub", dir_fd=folder)
        fd = os.open("new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=folder)
        os.write(fd, b"abc")
        src = os.open(tmp_path / "old", os.O_RDONLY)
        os.copy_file_range(src, fd, 4, 2)
        os.close(src)
        os.ftruncate(fd, 5)
        os.fsync(fd)
        os.close(fd)
        appender = os.open(tmp_path / "old", os.O_WRONLY | os.O_APPEND)
        os.write(appender, b"xy")
        os.close(appender)
        os.rename("new", "sub/moved", src_dir_fd=folder, dst_dir_fd=folder)
        os.link(tmp_path / "old", tmp_path / "sub" / "second")
        os.unlink(tmp_path / "old")
        os.fsync(folder)
        os.close(folder)
    recorded = rec.recording
    assert recorded.names == {"old": 1}
    assert recorded.ops == [
        Mkdir("sub"),
        Create("new", 2),
        Write(2, 0, b"abc"),
        Write(2, 3, b"2345"),
        Truncate(2, 5),
        Fsync(2),
        Write(1, 10, b"xy"),
        Rename("new", "sub/moved", 2),
        Link("sub/second", 1),
        Unlink("old"),
        FsyncDir(""),
    ]


def _toy() -> Recording:
    """A file written, fsynced, written again; another created and renamed, then its
    folder fsynced."""
    return Recording(
        {"f": 1},
        {1: b""},
        {},
        [
            Write(1, 0, b"a" * 600),
            Fsync(1),
            Write(1, 600, b"b" * 600),
            Create("t", 2),
            Write(2, 0, b"new"),
            Rename("t", "g", 2),
            FsyncDir(""),
        ],
    )


def test_a_write_is_cut_short_only_at_block_boundaries() -> None:
    """4096-byte blocks of the file, or 512-byte sectors for a write shorter than a block."""
    assert pieces(Write(1, 0, b"x" * 10_000)) == [4096, 8192]
    assert pieces(Write(1, 4000, b"x" * 5000)) == [96, 4192]
    assert pieces(Write(1, 600, b"x" * 600)) == [424]
    assert pieces(Write(1, 0, b"x" * 100)) == []


def test_fsynced_bytes_are_in_every_crash_state_and_unsynced_ones_in_some() -> None:
    """The model's promise, enumerated: what an fsync covered is always there; what it
    did not may be absent, cut at a boundary, or there."""
    model = Model(_toy())
    states = list(model.enumerate_states())
    assert len(states) == model.count()
    seen_f = set()
    for state in states:
        content = state.data[1]
        if state.choices.cut >= 2:
            assert content.startswith(b"a" * 600)
        seen_f.add(content)
    a, b = b"a" * 600, b"b" * 600
    assert seen_f == {b"", a[:512], a, a + b[:424], a + b}


def test_a_rename_is_optional_until_its_folder_is_fsynced() -> None:
    """Before the folder's fsync the new name may be missing (the old one kept); after
    it, always there."""
    model = Model(_toy())
    before = {tuple(sorted(s.names)) for s in model.enumerate_states() if s.choices.cut == 6}
    after = {tuple(sorted(s.names)) for s in model.enumerate_states() if s.choices.cut == 7}
    assert before == {("f",), ("f", "t"), ("f", "g")}
    assert after == {("f", "g")}


def test_a_crash_state_is_laid_out_with_links_and_inode_numbers_in_names(
    tmp_path: Path,
) -> None:
    """Two names of one file are hard links; a name that carries an inode number carries
    the number of the file laid out."""
    recorded = Recording(
        {"d": DIR, "d/a": 1, "d/x.jsonl.7.{ino:1}.pending": 2},
        {1: b"one", 2: b"two"},
        {},
        [Link("d/b", 1)],
    )
    state = Model(recorded).build(Model(recorded).most(1))
    materialize(state, tmp_path / "out")
    a, b = tmp_path / "out/d/a", tmp_path / "out/d/b"
    assert a.read_bytes() == b"one" and a.stat().st_ino == b.stat().st_ino
    assert (tmp_path / f"out/d/x.jsonl.7.{a.stat().st_ino}.pending").read_bytes() == b"two"
