"""Creating files cheaply and safely: temp names with no system call each, a file made
with its mode when the umask allows, a rename that never replaces (with a hard link
where the system cannot), the one time format, the clean heartbeat's template, and the
watcher reading a storm of events in batches, and a restart that knows a clean idle
heartbeat without parsing it (docs/design.md#scale-start)."""

from __future__ import annotations

import os
import queue
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from watchdog.observers.inotify_c import CallbackId, InotifyConstants, Mask

from memoryd.clock import iso_ms
from memoryd.commit.recovery import TEMP_PID_RE
from memoryd.daemon.folders import Seed, tidy_step
from memoryd.daemon.fs_events import FsChange, start_observer
from memoryd.daemon.inotify_tree import STORM_GAP, STORM_WAIT, BatchedInotifyFD
from memoryd.files import creating
from memoryd.files.creating import open_new, rename_noreplace
from memoryd.files.fsutil import create_in, replace_in, temp_name
from memoryd.published.heartbeat import Heartbeat, is_clean_idle, parse, render, render_idle


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the process's umask (and the cached copy of it) after the test."""
    old = os.umask(0o022)
    os.umask(old)
    creating._umask.cache_clear()
    yield
    os.umask(old)
    creating._umask.cache_clear()


def test_temp_names_are_unique_and_name_their_process(tmp_path: Path) -> None:
    names = [temp_name(tmp_path / "state.json").name for _ in range(2000)]
    assert len(set(names)) == len(names)
    for name in names[:5]:
        match = TEMP_PID_RE.search(name)
        assert match is not None and int(match["pid"]) == os.getpid()
        assert name.startswith(".state.json.memoryd-tmp-")


def test_a_forked_child_draws_its_own_temp_names(tmp_path: Path) -> None:
    parent = temp_name(tmp_path / "f").name
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first temp name, then leave at once
        try:
            os.write(write, temp_name(tmp_path / "f").name.encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 1000).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    match = TEMP_PID_RE.search(child)
    assert match is not None and int(match["pid"]) == pid
    prefix = re.compile(r"-[0-9a-f]{8}-")
    assert prefix.findall(child) != prefix.findall(parent)


@pytest.mark.usefixtures("umask")
def test_a_file_is_made_with_its_mode_when_the_umask_allows_it(tmp_path: Path, folder: int) -> None:
    os.umask(0o022)
    fd, needs_chmod = open_new("a", 0o644, folder)
    os.close(fd)
    assert not needs_chmod
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o644


@pytest.mark.usefixtures("umask")
def test_under_a_stricter_umask_a_file_is_private_until_its_mode_is_set(
    tmp_path: Path, folder: int
) -> None:
    os.umask(0o077)
    fd, needs_chmod = open_new("a", 0o644, folder)
    os.close(fd)
    assert needs_chmod
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o600
    replace_in(folder, "b", b"data", 0o644, durable=False)
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o644
    assert create_in(folder, "c", b"data", staging=folder)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o644


def test_rename_noreplace_never_replaces(tmp_path: Path, folder: int) -> None:
    (tmp_path / "src").write_bytes(b"new")
    (tmp_path / "dst").write_bytes(b"old")
    with pytest.raises(FileExistsError):
        rename_noreplace("src", "dst", folder, folder)
    assert (tmp_path / "dst").read_bytes() == b"old"
    assert (tmp_path / "src").read_bytes() == b"new"
    os.unlink(tmp_path / "dst")
    assert rename_noreplace("src", "dst", folder, folder)
    assert sorted(os.listdir(tmp_path)) == ["dst"]


def test_without_renameat2_a_new_file_is_linked_into_place(
    tmp_path: Path, folder: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the C library has no renameat2 (or the file system refuses the flag), the
    file is hard-linked to its name and its temp name removed: still never a replace."""
    monkeypatch.setattr(creating, "_renameat2", lambda: None)
    assert not rename_noreplace("x", "y", folder, folder)
    assert create_in(folder, "HEARTBEAT.md", b"first", staging=folder)
    assert not create_in(folder, "HEARTBEAT.md", b"second", staging=folder)
    assert os.listdir(tmp_path) == ["HEARTBEAT.md"]
    assert (tmp_path / "HEARTBEAT.md").read_bytes() == b"first"


def _strftime_iso_ms(epoch_seconds: float) -> str:
    total_ms = int(epoch_seconds * 1000)
    whole = time.gmtime(total_ms // 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", whole) + f".{total_ms % 1000:03d}Z"


@given(st.lists(st.floats(0, 4_102_444_800), min_size=1, max_size=20))
def test_iso_ms_is_strftimes_text(moments: list[float]) -> None:
    """The same text as ``time.strftime`` gives, whatever second came before (each
    second's text is kept for the next call)."""
    for moment in [*moments, *sorted(moments)]:
        assert iso_ms(moment) == _strftime_iso_ms(moment)


def test_iso_ms_across_a_second_boundary() -> None:
    assert iso_ms(1_795_000_000.999) == "2026-11-18T11:06:40.999Z"
    assert iso_ms(1_795_000_001.0) == "2026-11-18T11:06:41.000Z"
    assert iso_ms(1_795_000_000.5) == "2026-11-18T11:06:40.500Z"


@given(st.text(max_size=40))
def test_the_clean_heartbeat_template_renders_what_render_does(last_checkin: str) -> None:
    assert render_idle(last_checkin) == render(Heartbeat(last_checkin=last_checkin))


def test_events_of_a_storm_are_read_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event pending within a few milliseconds of the last read waits a little so
    that the rest of the storm is read with it; one after a quiet spell is read at once."""
    reader = BatchedInotifyFD()  # not started: its check is called here by hand
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    try:
        mask = Mask(InotifyConstants.IN_ALL_EVENTS)
        reader.add_callback(os.fsencode(tmp_path), mask, _Ignore(), CallbackId(1))
        (tmp_path / "a").write_bytes(b"")
        assert reader._check_inotify_fd()  # quiet before: read at once
        assert slept == []
        assert reader._check_inotify_fd()  # at once again: a storm, gather it
        assert slept == [STORM_WAIT]
        reader.last_read -= STORM_GAP  # a quiet spell since
        assert reader._check_inotify_fd()
        assert slept == [STORM_WAIT]
        assert reader.reads == 3
    finally:
        reader.close()


class _Ignore:
    """A watch callback that takes every event and does nothing."""

    def on_event(self, event: object) -> None:
        pass

    def on_watch_deleted(self, wd: int) -> None:
        pass

    def on_queue_overflow(self) -> None:
        pass


def test_a_storm_of_changes_all_reach_the_loop(tmp_path: Path) -> None:
    """Read in batches, none is lost: 300 new workspaces at once each come through."""
    root = tmp_path / "root"
    root.mkdir()
    changes: queue.SimpleQueue[object] = queue.SimpleQueue()
    observer, polling = start_observer(root, changes)
    assert not polling
    try:
        for i in range(300):
            (root / f"ws{i:03d}").mkdir()
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 300 and time.monotonic() < deadline:
            try:
                change = changes.get(timeout=1)
            except queue.Empty:
                continue
            assert isinstance(change, FsChange)
            seen.add(Path(change.path).name)
        assert seen == {f"ws{i:03d}" for i in range(300)}
    finally:
        observer.stop()
        observer.join(timeout=10)


@given(st.floats(0, 4_102_444_800))
def test_a_clean_idle_heartbeat_is_known_without_a_parse(moment: float) -> None:
    text = render_idle(iso_ms(moment)).encode()
    assert is_clean_idle(text)
    parsed = parse(text.decode())
    assert parsed is not None and parsed.status == "idle"


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_the_shortcut_never_calls_a_heartbeat_clean_that_a_parse_refuses(data: bytes) -> None:
    if is_clean_idle(data):
        parsed = parse(data.decode())
        assert parsed is not None and parsed.status == "idle"


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace(b"status: idle", b"status: active"),
        lambda text: text.replace(b"Z\n", b"Z\nnotes: mine\n", 1),
        lambda text: text + b"an agent's line\n",
        lambda text: text[:-1],
    ],
)
def test_a_heartbeat_edited_by_hand_takes_the_parse(edit: Callable[[bytes], bytes]) -> None:
    assert not is_clean_idle(edit(render_idle(iso_ms(1_795_000_000)).encode()))


def test_the_tidy_of_a_clean_idle_heartbeat_is_nothing_unless_leftovers_are_there() -> None:
    clean = render_idle(iso_ms(1_795_000_000)).encode()
    assert tidy_step(Seed(None, {}, clean, leftovers=False), interrupted=True) == "none"
    assert tidy_step(Seed(None, {}, clean, leftovers=True), interrupted=False) == "locked"
    assert tidy_step(Seed(None, {}, b"garbled", leftovers=False), interrupted=False) == "clean"
    assert tidy_step(Seed(None, {}, None, leftovers=False), interrupted=False) == "create"
