"""The daemon's bytes per tracked workspace, and what holds them.

An in-process ``Supervisor`` (extractive backend) on ``--workspaces`` folders of a
6-message conversation, as bench/scale.py builds them. tracemalloc (1 frame) is started
before the Supervisor is built; once ``start()`` is done and every workspace is tidied
(the loop stepped until the backlog of first writes is empty), the Python heap traced
since then, divided by the number of workspaces, is the daemon's cost of one idle
workspace (watchdog's watch tables included). The largest allocation sites follow.

    python bench/footprint.py [--workspaces 10000] [--top 12]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import tracemalloc
import warnings

import _common as common

from memoryd.config.settings import load_settings
from memoryd.daemon.logs import configure_logging
from memoryd.daemon.supervisor import Supervisor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    common.install_exit_handlers()
    warnings.simplefilter("ignore", RuntimeWarning)

    conversation = b"".join(common.message_line(i, 400) for i in range(6))
    with common.scratch("footprint") as folder:
        root = folder / "root"
        for i in range(args.workspaces):
            workspace = root / f"ws{i:05d}"
            workspace.mkdir(parents=True)
            (workspace / "conversation.jsonl").write_bytes(conversation)
        env = {
            **os.environ,
            "MEMORYD_SUMMARIZER__BACKEND": "extractive",
            "XDG_CONFIG_HOME": str(folder / "xdg"),
        }
        loaded = load_settings(None, {"roots": [str(root)]}, env)
        configure_logging("json", "warning", open(os.devnull, "w"))  # noqa: SIM115
        gc.collect()
        tracemalloc.start(1)
        supervisor = Supervisor(loaded, cli_roots=[str(root)], env=env)
        try:
            supervisor.start()
            while supervisor.workspaces.pending_init:
                supervisor.loop(wait=0)
            gc.collect()
            traced, _peak = tracemalloc.get_traced_memory()
            snapshot = tracemalloc.take_snapshot()
            tracked = len(supervisor.scheduler)
            polled = sorted(map(str, supervisor.watchers.polling))
        finally:
            tracemalloc.stop()
            supervisor.close()
            for pid in common.descendants(os.getpid()):
                if "multiprocessing" in common.cmdline(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    per_workspace = traced / tracked
    print(f"{tracked:,} workspaces tracked; Python heap traced since the Supervisor was built")
    if polled:
        print(f"NOTE: polled roots (inotify limit reached; not the usual case): {polled}")
    print(
        common.table(
            ("measure", "value"),
            [
                ("heap (MB)", traced / 2**20),
                ("bytes per workspace", round(per_workspace)),
            ],
        )
    )
    print("\nlargest allocation sites (bytes per workspace)")
    rows = []
    for stat in snapshot.statistics("lineno")[: args.top]:
        frame = stat.traceback[0]
        where = f"{os.path.relpath(frame.filename, common.REPO)}:{frame.lineno}"
        rows.append((where, round(stat.size / tracked), round(stat.count / tracked, 2)))
    print(common.table(("site", "bytes/ws", "blocks/ws"), rows))
    out = common.save(
        "footprint",
        {
            "workspaces": tracked,
            "heap_bytes": traced,
            "bytes_per_workspace": per_workspace,
            "polled_roots": polled,
            "sites": [{"site": r[0], "bytes_per_ws": r[1], "blocks_per_ws": r[2]} for r in rows],
        },
    )
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
