"""Record a scenario, then check its crash states: all of them when they are few, else
the extremes of every cut and a seeded sample (docs/design.md#power-cut).

Used by tests/powerloss/test_powerloss.py and bench/power_cut.py.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crash_states import CrashState, Model, materialize
from powerloss_checks import check_after_cut, expectations
from powerloss_ops import Recording
from powerloss_scenarios import Scenario

from memoryd.config.settings import Settings

SHM = Path("/dev/shm")
ENUMERATE_UP_TO = 50_000
"""A recording with at most this many crash states has every one of them checked."""


@dataclass(slots=True)
class Report:
    """What checking one scenario's crash states found."""

    scenario: str
    ops: int
    states: int
    """Crash states of the recording (choices, before removing the ones that look alike)."""
    enumerated: bool
    drawn: int = 0
    """States enumerated or sampled."""
    checked: int = 0
    """Distinct states among them, each materialized, recovered and checked."""
    jobs: int = 0
    """Of those, how many also ran a job as their next command."""
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0


@contextlib.contextmanager
def scratch_folder(fallback: Path) -> Iterator[Path]:
    """Where crash states are laid out: a tmpfs when there is one (fsync costs nothing
    there, and every state is thrown away after its check), else ``fallback``."""
    base = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else fallback
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=base, prefix="memoryd-power-cut-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def crash_states(model: Model, *, samples: int, seed: int, limit: int) -> Iterator[CrashState]:
    """Every state when there are at most ``limit``; else each cut's extremes and
    ``samples`` states drawn with ``random.Random(seed)``."""
    if model.count() <= limit:
        yield from model.enumerate_states()
        return
    rng = random.Random(seed)
    yield from model.extremes()
    for _ in range(samples):
        yield model.sample(rng)


def check_recording(
    name: str,
    recording: Recording,
    scratch: Path,
    settings: Settings,
    *,
    states: Iterator[CrashState] | None = None,
    samples: int = 10_000,
    seed: int = 0,
    limit: int = ENUMERATE_UP_TO,
    job_every: int | None = None,
    failures: Path | None = None,
) -> Report:
    """Check the crash states of ``recording`` (or the given ``states``) in ``scratch``.

    Every ``job_every``-th distinct state also runs a job as its next command (a job
    costs tens of milliseconds; recovery and the other commands a few); by default every
    state when they are all enumerated, every 10th when sampled. Each state that fails is
    saved in ``failures`` with its recording, for :func:`replay`.
    """
    started = time.monotonic()
    model = Model(recording)
    total = model.count()
    report = Report(name, len(recording.ops), total, total <= limit)
    expected = expectations(recording)
    if job_every is None:
        job_every = 1 if report.enumerated else 10
    chosen = (
        states
        if states is not None
        else crash_states(model, samples=samples, seed=seed, limit=limit)
    )
    seen: set[tuple[object, ...]] = set()
    for state in chosen:
        report.drawn += 1
        key = state.key()
        if key in seen:
            continue
        seen.add(key)
        job = report.checked % job_every == 0
        folder = scratch / f"state-{report.checked}"
        materialize(state, folder)
        problems = check_after_cut(folder, state, expected, settings, job=job)
        shutil.rmtree(folder)
        report.checked += 1
        report.jobs += job
        if problems:
            saved = ""
            if failures is not None:
                failures.mkdir(parents=True, exist_ok=True)
                path = failures / f"{name.replace(' ', '-')}-{len(report.violations)}.pickle"
                path.write_bytes(pickle.dumps((recording, state.choices)))
                saved = f" (saved: {path})"
            report.violations.append(f"{state.choices.describe()}{saved}: {'; '.join(problems)}")
    report.seconds = round(time.monotonic() - started, 1)
    return report


def record(scenario: Scenario, scratch: Path, settings: Settings) -> Recording:
    """Record ``scenario`` in ``scratch/recorded`` (removed afterwards: the record keeps
    what the checks need)."""
    root = scratch / "recorded"
    root.mkdir(parents=True)
    try:
        return scenario.record(root, settings)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def replay(saved: Path, scratch: Path, settings: Settings) -> list[str]:
    """Check again a crash state that :func:`check_recording` saved; returns its problems."""
    recording, choices = pickle.loads(saved.read_bytes())
    state = Model(recording).build(choices)
    folder = scratch / "replayed"
    materialize(state, folder)
    try:
        return check_after_cut(folder, state, expectations(recording), settings, job=True)
    finally:
        shutil.rmtree(folder)


def sampled(model: Model, count: int, seed: int) -> Iterator[CrashState]:
    """``count`` states drawn with ``random.Random(seed)``."""
    rng = random.Random(seed)
    return (model.sample(rng) for _ in range(count))
