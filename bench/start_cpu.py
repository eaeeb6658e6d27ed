"""The CPU time of a start of many workspaces, on this checkout and on others, in turn.

A busy machine stretches every wall-clock figure of ``bench/scale.py``, its floors
included, and by a different factor from one minute to the next; the CPU time of the
daemon's process tree moves far less. This bench compares codes on it: for each round,
each checkout in turn builds a fresh tree (``--layout`` flat or nested, the conversations
of ``bench/scale.py``), starts the daemon of that checkout on it (``PYTHONPATH`` names
the checkout), waits until the tree is quiet (as ``bench/scale.py`` does), stops it, and
starts it again on the same tree (a restart on unchanged workspaces). It reports, for
each start, the tree's CPU time from the spawn to quiet, the seconds to quiet, and when
each phase's log line came.

    python bench/start_cpu.py [--code DIR ...] [--rounds 2] [--workspaces 10000]
                              [--layout flat|nested] [--under /dev/shm]

``--code`` names another checkout (a ``git worktree add /tmp/old COMMIT``, say); this
checkout is always the first. ``--under /dev/shm`` keeps the disk out of it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import _common as common
import scale


def one_code(code: Path, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """A first start and a restart of ``code``'s daemon on a fresh tree."""
    root = folder / "root"
    conversation = b"".join(common.message_line(i, 400) for i in range(6))
    scale.build(root, args.workspaces, args.layout, conversation)
    env = {
        "MEMORYD_SUMMARIZER__BACKEND": "extractive",
        "XDG_CONFIG_HOME": str(folder / "xdg"),
        "PYTHONPATH": str(code),
    }
    load = os.getloadavg()[0]
    daemon, first = scale.start(root, env)
    daemon.stop()
    again, restart = scale.start(root, env)
    again.stop()
    return {"code": str(code), "load": load, "first": first, "restart": restart}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--code", type=Path, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--layout", choices=("flat", "nested"), default="flat")
    parser.add_argument("--under", type=Path)
    args = parser.parse_args(argv)
    common.install_exit_handlers()
    codes = [common.REPO, *(code.resolve() for code in args.code)]
    runs: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for code in codes:
            with common.scratch("start-cpu", args.under) as folder:
                run = one_code(code, args, folder)
            runs.append(run)
            first, restart = run["first"], run["restart"]
            print(
                f"{code}: first start CPU {first['cpu_s']:.2f} s, quiet {first['quiet_s']:.2f} s;"
                f" restart CPU {restart['cpu_s']:.2f} s, quiet {restart['quiet_s']:.2f} s;"
                f" load average {run['load']:.2f}",
                flush=True,
            )
            for name in ("first", "restart"):
                phases = ", ".join(f"{k} {v:.2f}" for k, v in run[name]["phases_s"].items())
                print(f"    {name}: {phases}", flush=True)
    rows = []
    for code in codes:
        mine = [run for run in runs if run["code"] == str(code)]
        rows.append(
            (
                str(code),
                " / ".join(f"{run['first']['cpu_s']:.2f}" for run in mine),
                " / ".join(f"{run['restart']['cpu_s']:.2f}" for run in mine),
                " / ".join(f"{run['load']:.1f}" for run in mine),
            )
        )
    print()
    print(
        common.table(
            ("code", "first start: tree CPU (s)", "restart: tree CPU (s)", "load average"), rows
        )
    )
    out = common.save(f"start-cpu-{args.workspaces}", {"runs": runs, "layout": args.layout})
    print(f"\nresults: {out.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
