"""Profile the daemon in-process on N small workspaces: start (to READY), then idle.

Not a benchmark with a target: the tool behind the causes given in bench/README.md.
The main thread (the supervisor loop) runs under cProfile; a sampler thread records,
every 5 ms, the innermost memoryd/watchdog frames of every thread (the watchdog
observer and emitter threads included, which cProfile does not see). tracemalloc, when
asked, reports where the daemon's memory is at READY.

    python bench/profile_daemon.py [--workspaces 10000] [--idle 20] [--settle 0] [--tracemalloc]
        [--under DIR]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import io
import os
import pstats
import signal
import sys
import threading
import time
import tracemalloc
import warnings
from pathlib import Path

import _common as common

from memoryd.config.settings import load_settings
from memoryd.daemon.logs import configure_logging
from memoryd.daemon.supervisor import Supervisor


class Sampler(threading.Thread):
    """Counts (thread name, innermost interesting frame) every ``interval`` seconds."""

    def __init__(self, interval: float = 0.005) -> None:
        super().__init__(daemon=True, name="sampler")
        self.interval = interval
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.samples = 0
        self.stop = threading.Event()
        self.children: set[int] = set()
        """Every descendant seen: a worker orphaned by a dying forkserver is still ours."""

    def run(self) -> None:
        names = {}
        while not self.stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == self.ident:
                    continue
                self.counts[(names.get(ident, str(ident)), _where(frame))] += 1
            self.samples += 1
            if self.samples % 100 == 1:
                self.children.update(common.descendants(os.getpid()))

    def report(self, top: int = 15) -> str:
        lines = [f"{self.samples} samples of every thread, {self.interval * 1000:.0f} ms apart"]
        for (thread, where), count in self.counts.most_common(top):
            lines.append(f"{100 * count / max(1, self.samples):6.1f}%  {thread:<24} {where}")
        return "\n".join(lines)


def _where(frame: object) -> str:
    """The innermost frame, then the innermost memoryd/watchdog frame that led there."""
    stack = []
    current = frame
    while current is not None:
        code = current.f_code  # type: ignore[attr-defined]
        stack.append(f"{Path(code.co_filename).name}:{code.co_name}:{current.f_lineno}")  # type: ignore[attr-defined]
        current = current.f_back  # type: ignore[attr-defined]
    inner = stack[0]
    ours = next(
        (s for s in stack if s.split(":")[0] in OURS),
        "",
    )
    return inner if ours in ("", inner) else f"{inner}  <- {ours}"


OURS = {Path(p).name for p in os.listdir(common.REPO / "memoryd") if p.endswith(".py")} | {
    "inotify.py",
    "inotify_c.py",
    "runners.py",
    "events.py",
    "inotify_buffer.py",
}


def pstats_text(profile: cProfile.Profile, sort: str, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats(sort).print_stats(top)
    text = out.getvalue()
    return text[text.find("   ncalls") :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument(
        "--settle", type=float, default=0.0, help="seconds of loop, not profiled, before idle"
    )
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--under", type=Path, help="build the tree in this folder (e.g. /dev/shm)")
    args = parser.parse_args(argv)
    common.install_exit_handlers()
    warnings.simplefilter("ignore", RuntimeWarning)  # watchdog's, see bench/README.md

    conversation = b"".join(common.message_line(i, 400) for i in range(6))
    with common.scratch("profile", args.under) as folder:
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
        supervisor = Supervisor(loaded, cli_roots=[str(root)], env=env)
        sampler = Sampler()
        sampler.start()
        try:
            if args.tracemalloc:
                tracemalloc.start(8)
            start_profile = cProfile.Profile()
            began = time.perf_counter()
            start_profile.enable()
            supervisor.start()
            start_profile.disable()
            ready = time.perf_counter() - began
            snapshot = tracemalloc.take_snapshot() if args.tracemalloc else None
            if args.tracemalloc:
                tracemalloc.stop()
            start_samples = sampler.report()
            settle_began = time.perf_counter()
            while time.perf_counter() - settle_began < args.settle:
                supervisor.loop()
            sampler.counts.clear()
            sampler.samples = 0
            idle_profile = cProfile.Profile()
            cpu_before = time.process_time()
            idle_began = time.perf_counter()
            idle_profile.enable()
            while time.perf_counter() - idle_began < args.idle:
                supervisor.loop()
            idle_profile.disable()
            idle_cpu = time.process_time() - cpu_before
        finally:
            # Workers ignore SIGTERM, and one interrupted start left workers behind that
            # close() did not reach: every multiprocessing child seen goes too.
            supervisor.close()
            sampler.stop.set()
            for pid in sampler.children | set(common.descendants(os.getpid())):
                if "multiprocessing" in common.cmdline(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    print(f"== start: READY after {ready:.2f} s ({args.workspaces} workspaces)")
    print(pstats_text(start_profile, "cumulative", args.top))
    print(pstats_text(start_profile, "tottime", args.top))
    print("== start, all threads sampled")
    print(start_samples)
    if snapshot is not None:
        print("\n== memory at READY, by line (tracemalloc)")
        for stat in snapshot.statistics("lineno")[: args.top]:
            print(f"{stat.size / 2**20:8.1f} MB {stat.count:9,}  {stat.traceback}")
        print("\n== memory at READY, by file")
        for stat in snapshot.statistics("filename")[:15]:
            print(f"{stat.size / 2**20:8.1f} MB {stat.count:9,}  {stat.traceback}")
    print(
        f"\n== {args.idle:.0f} s, from {args.settle:.0f} s after READY: "
        f"process CPU {idle_cpu:.2f} s "
        f"({100 * idle_cpu / args.idle:.0f}% of one core), all threads"
    )
    print(pstats_text(idle_profile, "tottime", args.top))
    print("== after READY, all threads sampled")
    print(sampler.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
