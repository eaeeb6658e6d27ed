"""The path of one job through memoryd, module by module.

A workspace under a stepped in-process ``Supervisor`` gets appends past its trigger; the
pool's ``submit`` runs the job in this process, so that its path is traced with the rest.
``sys.setprofile`` records the module of every call from the append until the job's
result is handled. Prints the memoryd modules in the order they are first entered, how
many there are, and how many distinct module-to-module calls the path makes
(docs/design.md#data-flow)::

    python bench/job_path.py
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import Any

from memoryd.config.settings import load_settings
from memoryd.daemon.pool import WorkerPool
from memoryd.daemon.supervisor import Supervisor


def _submit_here(_pool: WorkerPool, fn: Callable[..., Any], *args: Any) -> tuple[int, Future[Any]]:
    future: Future[Any] = Future()
    try:
        future.set_result(fn(*args))
    except Exception as error:  # the job's own failure is its result
        future.set_exception(error)
    return 1, future


def _line(number: int) -> str:
    role = "user" if number % 2 == 0 else "assistant"
    text = f"message {number} " + "word " * 60
    message = {"id": f"m{number}", "role": role, "content": text, "timestamp": number}
    return json.dumps(message) + "\n"


def trace() -> list[str]:
    """The modules of memoryd the job's calls go through, consecutive repeats folded."""
    setattr(WorkerPool, "submit", _submit_here)  # noqa: B010  (the job runs here)
    folder = Path(tempfile.mkdtemp())
    root, workspace = folder / "root", folder / "root" / "ws"
    workspace.mkdir(parents=True)
    (workspace / "conversation.jsonl").write_text("".join(_line(i) for i in range(3)))
    env = {name: str(folder / name) for name in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME")}
    overrides = {
        "roots": [str(root)],
        "workers": 1,
        "token_limit": 2000,
        "coalesce_ms": 0,
        "drain_seconds": 0,
        "summarizer.backend": "extractive",
        "summarizer.max_summary_tokens": 200,
    }
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    supervisor.start()
    for _ in range(10):
        supervisor.loop(wait=0.05)
    calls: list[str] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        module = frame.f_globals.get("__name__") or ""
        if event == "call" and module.startswith("memoryd") and calls[-1:] != [module]:
            calls.append(module)

    with (workspace / "conversation.jsonl").open("a") as conversation:
        conversation.write("".join(_line(i) for i in range(3, 40)))
    sys.setprofile(profile)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            supervisor.loop(wait=0.05)
            tracked = supervisor.scheduler.get(workspace)
            heartbeat = workspace / "HEARTBEAT.md"
            done = heartbeat.exists() and "completed" in heartbeat.read_text().lower()
            if done and tracked is not None and not tracked.running:
                break
    finally:
        sys.setprofile(None)
        supervisor.close()
    return calls


def main() -> None:
    calls = trace()
    modules = list(dict.fromkeys(calls))
    hops = set(itertools.pairwise(calls))
    print(" > ".join(module.removeprefix("memoryd.") for module in modules))
    print(f"{len(modules)} modules, {len(hops)} distinct module-to-module calls")


if __name__ == "__main__":
    main()
