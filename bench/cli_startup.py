"""Wall time of the commands an agent runs per message, against a bare interpreter.

Each round runs, in turn, ``python -c "import json"`` and every measured command as a
fresh process (the same interpreter, ``-m memoryd`` from this checkout), so that load on
the machine hits all of them alike; the figure is the median over the rounds and the
ratio is each command's median over the bare interpreter's. The workspace holds 200
messages of ~1 KB; the configuration is the default one (no file, no ``MEMORYD_*``), and
once the shipped ``config/memoryd.toml``.

Target: ``memoryd append``, ``memoryd status WS --json``, ``memoryd messages WS`` and
``memoryd recall WS WORD`` (its start-up: the workspace has no archive to search) at most
5x the bare interpreter.

    python bench/cli_startup.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as common

TARGET_RATIO = 5.0


def commands(workspace: Path) -> dict[str, list[str]]:
    memoryd = [sys.executable, "-m", "memoryd"]
    ws = str(workspace)
    return {
        'python -c "import json"': [sys.executable, "-c", "import json"],
        "memoryd append WS --role user --content hi": [
            *memoryd,
            "append",
            ws,
            "--role",
            "user",
            "--content",
            "hi",
        ],
        "memoryd status WS --json": [*memoryd, "status", ws, "--json"],
        "memoryd status WS --json --config config/memoryd.toml": [
            *memoryd,
            "status",
            ws,
            "--json",
            "--config",
            str(common.REPO / "config" / "memoryd.toml"),
        ],
        "memoryd heartbeat WS checkin": [*memoryd, "heartbeat", ws, "checkin"],
        "memoryd messages WS": [*memoryd, "messages", ws],
        "memoryd status WS": [*memoryd, "status", ws],
        "memoryd recall WS parser": [*memoryd, "recall", ws, "parser"],
    }


def wall_time(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    rounds = parser.parse_args().rounds
    common.install_exit_handlers()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(common.REPO)
    with common.scratch("cli-startup") as folder:
        env["XDG_CONFIG_HOME"] = str(folder / "xdg")
        workspace = folder / "ws"
        workspace.mkdir()
        common.write_conversation(workspace / "conversation.jsonl", 200 * 1024)
        runs = commands(workspace)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for argv in runs.values():  # warm the page cache and the .pyc files
            wall_time(argv, env)
        for _ in range(rounds):
            for name, argv in runs.items():
                times[name].append(wall_time(argv, env))
    bare = common.median(times['python -c "import json"'])
    rows = []
    results: dict[str, dict[str, Any]] = {}
    for name, values in times.items():
        median = common.median(values)
        ratio = median / bare
        rows.append([name, median * 1000, common.percentile(values, 90) * 1000, ratio])
        results[name] = {"median_ms": median * 1000, "ratio": ratio, "samples": values}
    print(common.table(["command", "median ms", "p90 ms", "x bare"], rows))
    targets = (
        "memoryd append WS --role user --content hi",
        "memoryd status WS --json",
        "memoryd messages WS",
        "memoryd recall WS parser",
    )
    for name in targets:
        met = results[name]["ratio"] <= TARGET_RATIO
        print(
            f"{name}: {results[name]['ratio']:.2f}x (target <= {TARGET_RATIO}x): "
            f"{'met' if met else 'NOT met'}"
        )
    path = common.save("cli_startup", {"rounds": rounds, "results": results})
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
