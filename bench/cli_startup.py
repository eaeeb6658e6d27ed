"""Wall time of the commands an agent runs per message, against a bare interpreter.

Each round runs, in turn, ``python -c "import json"`` and every measured command as a
fresh process (the same interpreter, ``-m memoryd`` from this checkout), so that load on
the machine hits all of them alike; the figure is the median over the rounds and the
ratio is each command's median over the bare interpreter's. The workspace holds 200
messages of ~1 KB; the configuration is the default one (no file, no ``MEMORYD_*``), and
once the shipped ``config/memoryd.toml``. With ``--env`` every command runs as the systemd
unit and most users configure memoryd: the shipped file given by ``$MEMORYD_CONFIG`` and
``MEMORYD_*`` setting variables (``ENV_SETTINGS``) set, and the targets are those of
``ENV_TARGETS``. The commands run with their ``.pyc`` files
written (``PYTHONDONTWRITEBYTECODE`` is dropped from the environment, the warm-up round
writes them), as an installed package has them; with ``--source`` memoryd's are removed
and not written, so every run compiles memoryd from source (a checkout run with
``PYTHONDONTWRITEBYTECODE=1``).

Targets, as ratios to the bare interpreter: ``memoryd append`` and ``memoryd messages WS``
(the API view) at most 3x, ``memoryd status WS --json`` (what ``context_status`` answers)
at most 4x, ``memoryd recall WS WORD`` (its start-up: the workspace has no archive to
search) at most 5x; with ``--env``, ``append`` and ``messages`` at most 1.5x and
``status --json`` at most 2.5x. ``python -X importtime -m memoryd COMMAND ...`` shows where a
command's start goes (docs/design.md#startup).

    python bench/cli_startup.py [--rounds 40] [--source] [--env]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as common

TARGETS = {
    "memoryd append WS --role user --content hi": 3.0,
    "memoryd status WS --json": 4.0,
    "memoryd messages WS": 3.0,
    "memoryd recall WS parser": 5.0,
}
ENV_TARGETS = {
    "memoryd append WS --role user --content hi": 1.5,
    "memoryd status WS --json": 2.5,
    "memoryd messages WS": 1.5,
}
ENV_SETTINGS = {
    "MEMORYD_TOKEN_LIMIT": "120000",
    "MEMORYD_SUMMARIZER__BACKEND": "extractive",
    "MEMORYD_LOG_LEVEL": "warning",
    "MEMORYD_MASKING__EXCLUDE_TOOLS": '["TodoWrite"]',
}
"""The ``MEMORYD_*`` variables of ``--env``, beside ``MEMORYD_ROOTS`` (the scratch folder)
and ``MEMORYD_CONFIG`` (the shipped file)."""


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
    parser.add_argument("--source", action="store_true", help="no .pyc of memoryd's")
    parser.add_argument(
        "--env", action="store_true", help="a config file and MEMORYD_* variables set"
    )
    args = parser.parse_args()
    targets = ENV_TARGETS if args.env else TARGETS
    rounds = args.rounds
    common.install_exit_handlers()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "ANTHROPIC_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.source:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for cache in list((common.REPO / "memoryd").rglob("__pycache__")):
            shutil.rmtree(cache)
    env["PYTHONPATH"] = str(common.REPO)
    with common.scratch("cli-startup") as folder:
        env["XDG_CONFIG_HOME"] = str(folder / "xdg")
        if args.env:
            env |= ENV_SETTINGS
            env["MEMORYD_ROOTS"] = json.dumps([str(folder)])
            env["MEMORYD_CONFIG"] = str(common.REPO / "config" / "memoryd.toml")
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
    for name, target in targets.items():
        met = results[name]["ratio"] <= target
        print(
            f"{name}: {results[name]['ratio']:.2f}x (target <= {target}x): "
            f"{'met' if met else 'NOT met'}"
        )
    print(f"load average: {os.getloadavg()[0]:.1f} (1 min), on {os.cpu_count()} cores")
    saved = {
        "rounds": rounds,
        "source": args.source,
        "env": args.env,
        "results": results,
        "targets": targets,
    }
    path = common.save("cli_startup-env" if args.env else "cli_startup", saved)
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
