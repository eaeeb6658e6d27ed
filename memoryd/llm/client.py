"""What every LLM backend is built on: its call limits (timeout, retries, deadline,
back-off), the one retry loop it runs them in, and what it keeps per process: its SDK
client, the lock around it and the random source of its back-off
(docs/design.md#summarizers).

A backend is built from plain values so that it can cross into a worker process; the SDK
client (sockets, a TLS context, threads) cannot, and a forked child must not share its
parent's. So the client is made on first use in the process that uses it, again after a
fork, and pickling carries the settings only.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from memoryd.errors import ConfigError
from memoryd.llm.completion import Completion, Failure, backoff_wait, complete_with_retries


class Closable(Protocol):
    def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=Closable)
SelfT = TypeVar("SelfT", bound="ProcessLocalClient[Any]")

_PER_PROCESS = ("_client", "_client_pid", "_lock", "_random")


class ProcessLocalClient(Generic[ClientT]):
    """The part every backend shares; a subclass calls :meth:`_set_limits` in its
    ``__init__``, gets its client from :meth:`_client_for_this_process` and sends each
    completion through :meth:`_with_retries`."""

    model: str
    timeout: float
    max_retries: int
    deadline: float
    backoff_base: float
    requests: int
    """Requests sent so far (each attempt, the failed ones too)."""
    _default_headers: dict[str, str]
    _client: ClientT | None
    _client_pid: int | None
    _lock: threading.Lock
    _random: random.Random

    def _set_limits(
        self,
        section: str,
        model: str,
        timeout: float,
        max_retries: int,
        default_headers: Mapping[str, str],
        deadline: float,
        backoff_base: float,
    ) -> None:
        """Check and keep the call limits of the backend configured in ``[section]``."""
        check_call_limits(section, timeout, max_retries, deadline, backoff_base)
        self.name = section
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._default_headers = dict(default_headers)
        self.deadline = float(deadline)
        self.backoff_base = float(backoff_base)
        self.requests = 0
        self._start_process_local()

    def _with_retries(
        self, label: str, attempt: Callable[[float, float], Completion | Failure]
    ) -> Completion:
        """``attempt(request_timeout, ends_at)`` in the one retry loop, within this
        backend's limits (:func:`~memoryd.llm.completion.complete_with_retries`)."""
        return complete_with_retries(
            attempt,
            label=label,
            timeout=self.timeout,
            max_retries=self.max_retries,
            deadline=self.deadline,
            wait_before_retry=lambda tried, retry_after: backoff_wait(
                tried, retry_after, self.backoff_base, self._random
            ),
        )

    def __enter__(self: SelfT) -> SelfT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
