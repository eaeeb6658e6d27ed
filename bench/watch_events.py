"""What a first start's own writes cost the watcher, per workspace.

``--workspaces`` folders, each with a one-line conversation, are watched by memoryd's
watcher (``memoryd.daemon.fs_events.start_observer``: watchdog's recursive inotify observer with
memoryd's event filter and handler, hidden folders unwatched). Then, for every
workspace, the writes a first start makes are done by the daemon's own code
(``memoryd.daemon.folders.Folders``): ``.memoryd`` created, HEARTBEAT.md staged there
and moved into place, state.json replaced there (neither fsynced). Reported: the
changes that reach the daemon's loop (after the handler dropped memoryd's own files),
and the process CPU spent on the watcher's threads (process CPU minus the writing
thread's own).

    python bench/watch_events.py [--workspaces 3000] [--folder /dev/shm/...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shutil
import sys
import time
from pathlib import Path

import _common as common

from memoryd.daemon.folders import Folders
from memoryd.daemon.fs_events import WATCHED_EVENTS, start_observer
from memoryd.files.fsutil import replace_in


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=3000)
    parser.add_argument("--folder", type=Path, default=None, help="default: bench/results/tmp")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.folder is None:
            folder = stack.enter_context(common.scratch("watch-events"))
        else:
            folder = args.folder / f"watch-events-{os.getpid()}"
            folder.mkdir(parents=True)
            stack.callback(shutil.rmtree, folder, True)
        root = folder / "root"
        workspaces = [root / f"ws{i:05d}" for i in range(args.workspaces)]
        for workspace in workspaces:
            workspace.mkdir(parents=True)
            (workspace / "conversation.jsonl").write_bytes(common.message_line(0, 100))
        changes: queue.SimpleQueue[object] = queue.SimpleQueue()
        observer, polling = start_observer(root, changes)
        assert not polling, "inotify watches ran out; raise fs.inotify.max_user_watches"
        try:
            cpu_start, writer_start = time.process_time(), time.thread_time()
            for workspace in workspaces:
                with Folders(workspace) as folders:
                    folders.create_heartbeat("---\nstatus: idle\n---\n")
                    replace_in(folders.ensure_meta(), "state.json", b"{}\n", durable=False)
            writer = time.thread_time() - writer_start
            reached = 0
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < 1.0:
                try:
                    changes.get(timeout=0.1)
                except queue.Empty:
                    continue
                reached += 1
                quiet_since = time.monotonic()
            watcher_cpu = time.process_time() - cpu_start - writer
        finally:
            observer.stop()
            observer.join(timeout=10)
    n = args.workspaces
    print(
        common.table(
            ("measure", "value"),
            [
                ("workspaces", n),
                ("watched event classes", ", ".join(cls.__name__ for cls in WATCHED_EVENTS)),
                ("changes that reached the loop", reached),
                ("  per workspace", round(reached / n, 2)),
                ("watcher threads' CPU (s)", round(watcher_cpu, 3)),
                ("  per workspace (ms)", round(1000 * watcher_cpu / n, 3)),
                ("writing thread's CPU (s)", round(writer, 3)),
            ],
        )
    )
    out = common.save(
        "watch-events",
        {
            "workspaces": n,
            "events": [cls.__name__ for cls in WATCHED_EVENTS],
            "reached_loop": reached,
            "watcher_cpu_s": watcher_cpu,
            "writer_cpu_s": writer,
        },
    )
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
