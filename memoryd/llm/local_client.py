"""What an LLM backend keeps per process: its SDK client, the lock around it and the random
source of its back-off (docs/design.md#summarizers).

A backend is built from plain values so that it can cross into a worker process; the SDK
client (sockets, a TLS context, threads) cannot, and a forked child must not share its
parent's. So the client is made on first use in the process that uses it, again after a
fork, and pickling carries the settings only.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from memoryd.errors import ConfigError


class Closable(Protocol):
    def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=Closable)

_PER_PROCESS = ("_client", "_client_pid", "_lock", "_random")


class ProcessLocalClient(Generic[ClientT]):
    """The per-process part of a backend; a subclass calls :meth:`_start_process_local`
    in its ``__init__`` and gets its client from :meth:`_client_for_this_process`."""

    _client: ClientT | None
    _client_pid: int | None
    _lock: threading.Lock
    _random: random.Random

    def _start_process_local(self) -> None:
        self._client = None
        self._client_pid = None
        self._lock = threading.Lock()
        self._random = random.Random()

    def _client_for_this_process(self, make: Callable[[], ClientT]) -> ClientT:
        """The SDK client of this process, made by ``make`` on first use (and in a fork)."""
        with self._lock:
            if self._client is None or self._client_pid != os.getpid():
                self._client = make()
                self._client_pid = os.getpid()
            return self._client

    def close(self) -> None:
        """Close the SDK client's connections, if this process opened any."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._client_pid == os.getpid():
            client.close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only: a client, its sockets and a lock do not cross processes."""
        state = self.__dict__.copy()
        for name in _PER_PROCESS:
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start_process_local()


def check_call_limits(
    section: str, timeout: float, max_retries: int, deadline: float, backoff_base: float
) -> None:
    """Refuse, in one line naming the setting, limits no backend can work with."""
    if timeout <= 0:
        raise ConfigError(f"{section}.timeout: {timeout!r} is not a positive number")
    if max_retries < 0:
        raise ConfigError(f"{section}.max_retries: {max_retries!r} is negative")
    if deadline <= 0:
        raise ConfigError(f"summarizer deadline: {deadline!r} is not a positive number")
    if backoff_base < 0:
        raise ConfigError(f"backoff_base: {backoff_base!r} is negative")
