"""An agent that appends to conversation.jsonl, for tests: ``writers.py WS ID COUNT``.

Appends COUNT lines ``{"id": "<ID>-<n>", ...}`` to ``WS/conversation.jsonl``. By default
each line is written under ``flock(LOCK_EX)`` on ``WS/.memoryd/lock`` (open, append,
close), the writers' protocol (docs/design.md#locks); ``--no-lock`` opens with O_APPEND, writes and
closes each line without any lock. ``--delay S`` sleeps between lines. It deliberately
does not import memoryd: it stands for an agent written by someone else.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import time
from pathlib import Path


def line_content(writer: str, n: int) -> str:
    """The deterministic text of line ``n`` of ``writer`` (tests check it)."""
    return f"{writer} says {n} " + "lorem ipsum é " * (n % 37)


def line_bytes(writer: str, n: int) -> bytes:
    record = {
        "id": f"{writer}-{n}",
        "role": "user",
        "content": line_content(writer, n),
        "timestamp": time.time(),
    }
    return json.dumps(record).encode() + b"\n"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append(conversation: Path, data: bytes) -> None:
    fd = os.open(conversation, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("workspace", type=Path)
    parser.add_argument("writer_id")
    parser.add_argument("count", type=int)
    parser.add_argument("--no-lock", action="store_true")
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()

    conversation = args.workspace / "conversation.jsonl"
    lock = args.workspace / ".memoryd" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    for n in range(args.count):
        data = line_bytes(args.writer_id, n)
        if args.no_lock:
            append(conversation, data)
        else:
            lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                append(conversation, data)
            finally:
                os.close(lock_fd)
        if args.delay:
            time.sleep(args.delay)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
