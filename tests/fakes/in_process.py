"""The ``memoryd`` command run through ``memoryd.cli.main`` in this process, as its own
process would run it: stdout, stderr and the exit code captured, the process's state put
back afterwards."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from memoryd.cli import main


@dataclass(frozen=True, slots=True)
class Ran:
    """What one ``memoryd`` command gave: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def run_in_process(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> Ran:
    """``memoryd ARGV`` as its own process would run it, through main() in this one: in
    ``cwd``, with ``env`` added to the environment, an empty stdin, stdout and stderr
    captured. The working folder, the environment and the logging that main() configures
    are put back afterwards, so that a fixture of any scope may call it. As a process
    does before it exits, it waits for the threads main() started that are not daemon
    threads (a commit's drain, the index update after a job). An exception main() lets
    out propagates (a process would have printed its traceback)."""
    extra = dict(env or {})
    saved_env = {name: os.environ.get(name) for name in extra}
    saved_cwd = os.getcwd()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    saved_structlog = structlog.get_config()
    out, err = io.StringIO(), io.StringIO()
    threads_before = set(threading.enumerate())
    try:
        os.environ.update(extra)
        os.chdir(cwd)
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            _empty_stdin(),
        ):
            code = main(list(argv), out)
            _join_new_threads(threads_before)
    finally:
        os.chdir(saved_cwd)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        structlog.configure(**saved_structlog)
    return Ran(code, out.getvalue(), err.getvalue())


THREAD_WAIT = 120.0
"""Seconds a command's last thread may take after main() returned (the test's timeout)."""


def _join_new_threads(before: set[threading.Thread]) -> None:
    """Wait for every thread not in ``before`` that is not a daemon thread to end."""
    for thread in set(threading.enumerate()) - before:
        if not thread.daemon:
            thread.join(THREAD_WAIT)
            assert not thread.is_alive(), f"thread {thread.name} still running after main()"


@contextlib.contextmanager
def _empty_stdin() -> Iterator[None]:
    """sys.stdin at its end, as for a process started with stdin from /dev/null."""
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved
