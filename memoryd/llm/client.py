"""What every LLM backend is built on: its settings and the check of them, its call
limits (timeout, retries, deadline, back-off) and the one retry loop it runs them in, one
request with what the SDK raises as a failed attempt, and what it keeps per process: its
SDK client, the lock around it and the random source of its back-off
(docs/design.md#summarizers).

A backend is built from plain values so that it can cross into a worker process; the SDK
client (sockets, a TLS context, threads) cannot, and a forked child must not share its
parent's. So the client is made on first use in the process that uses it, again after a
fork, and pickling carries the settings only.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar, cast

import httpx2

from memoryd.errors import ConfigError
from memoryd.llm.completion import (
    Completion,
    CompletionBackend,
    Failure,
    backoff_wait,
    complete_with_retries,
    seconds,
)
from memoryd.llm.retries import is_retryable_status, parse_retry_after
from memoryd.llm.sse import StreamStopped


class Closable(Protocol):
    def close(self) -> None: ...


class StatusError(Protocol):
    """What either SDK's ``APIStatusError`` (an HTTP error answer) carries."""

    status_code: int
    type: str | None
    body: object
    message: str

    @property
    def response(self) -> httpx2.Response: ...


class SdkErrors(NamedTuple):
    """The errors an SDK raises for a request that got no answer (both SDKs are built
    from one template and name them alike)."""

    timeout: type[Exception]
    connection: type[Exception]
    status: type[Exception]


ClientT = TypeVar("ClientT", bound=Closable)
SelfT = TypeVar("SelfT", bound="ProcessLocalClient[Any]")

_PER_PROCESS = ("_client", "_client_pid", "_lock", "_random")
_SHORT_NAME = re.compile(r"[A-Za-z_][\w.-]{0,63}")


class ProcessLocalClient(CompletionBackend, Generic[ClientT]):
    """The part every backend shares: its settings, checked when it is made; its SDK
    client (:meth:`_sdk_client`, made in :meth:`_new_client`); one request with what the
    SDK raises as a :class:`Failure` (:meth:`_request`); and the retry loop around the
    attempts (:meth:`_with_retries`).

    A subclass names its configuration ``[section]`` (:attr:`name`), the API in messages
    (:attr:`label`) and its SDK's errors, and says which of a key and a URL it needs
    (:meth:`_endpoint`).
    """

    label: ClassVar[str]
    sdk_errors: ClassVar[SdkErrors]
    model: str
    timeout: float
    max_retries: int
    deadline: float
    backoff_base: float
    requests: int
    """Requests sent so far (each attempt, the failed ones too)."""
    base_url: str | None
    _api_key: str
    _default_headers: dict[str, str]
    _client: ClientT | None
    _client_pid: int | None
    _lock: threading.Lock
    _random: random.Random

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        model: str,
        timeout: float,
        max_retries: int,
        default_headers: Mapping[str, str],
        deadline: float,
        backoff_base: float = 1.0,
    ) -> None:
        """Made from plain values, so that it can be made (or unpickled) inside a worker
        process. ``deadline`` bounds a whole :meth:`complete` call, retries and waits
        included. Raises ConfigError, naming the setting, for settings no call can work
        with."""
        self._api_key, self.base_url = self._endpoint(api_key, base_url or None)
        if not model:
            raise ConfigError(f"{self.name}.model: must not be empty")
        check_call_limits(self.name, timeout, max_retries, deadline, backoff_base)
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._default_headers = dict(default_headers)
        self.deadline = float(deadline)
        self.backoff_base = float(backoff_base)
        self.requests = 0
        self._start_process_local()

    @abstractmethod
    def _endpoint(self, api_key: str | None, base_url: str | None) -> tuple[str, str | None]:
        """The key to send and the URL to send to; ConfigError when one this backend
        needs is missing."""

    @abstractmethod
    def _new_client(self, settings: dict[str, Any]) -> ClientT:
        """A new SDK client made with ``settings`` (key, URL, timeout, headers, no
        retries of its own)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, "
            f"timeout={self.timeout}, max_retries={self.max_retries}, deadline={self.deadline})"
        )

    def _with_retries(self, attempt: Callable[[float, float], Completion | Failure]) -> Completion:
        """``attempt(request_timeout, ends_at)`` in the one retry loop, within this
        backend's limits (:func:`~memoryd.llm.completion.complete_with_retries`)."""
        return complete_with_retries(
            attempt,
            label=self.label,
            timeout=self.timeout,
            max_retries=self.max_retries,
            deadline=self.deadline,
            wait_before_retry=lambda tried, retry_after: backoff_wait(
                tried, retry_after, self.backoff_base, self._random
            ),
        )

    def _request(
        self,
        request_timeout: float,
        send: Callable[[], Completion | Failure],
        on_status: Callable[[StatusError], Failure | None] = lambda error: None,
    ) -> Completion | Failure:
        """One request, ``send()``, counted, with what the SDK or the stream's reader
        raises as a Failure: a timeout, a connection error, an HTTP error answer (as
        ``on_status`` judges it, else by its status), or a stream stopped."""
        self.requests += 1
        where = self.base_url or f"the {self.label}"
        try:
            return send()
        except (self.sdk_errors.timeout, httpx2.TimeoutException):
            return Failure(f"timed out after {seconds(request_timeout)} s", retryable=True)
        except self.sdk_errors.connection as error:
            cause = type(error.__cause__).__name__ if error.__cause__ else "unknown"
            return Failure(f"connection error to {where} ({cause})", retryable=True)
        except httpx2.TransportError as error:
            return Failure(f"connection error to {where} ({type(error).__name__})", True)
        except self.sdk_errors.status as error:
            answer = cast(StatusError, error)
            return on_status(answer) or status_failure(answer)
        except StreamStopped as stopped:
            return stopped.failure

    def __enter__(self: SelfT) -> SelfT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start_process_local(self) -> None:
        self._client = None
        self._client_pid = None
        self._lock = threading.Lock()
        self._random = random.Random()

    def _sdk_client(self) -> ClientT:
        """The SDK client of this process, made on first use (and in a fork)."""
        with self._lock:
            if self._client is None or self._client_pid != os.getpid():
                self._client = self._new_client(
                    {
                        "api_key": self._api_key,
                        "base_url": self.base_url,
                        "timeout": self.timeout,
                        "max_retries": 0,
                        "default_headers": self._default_headers,
                    }
                )
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


def status_failure(error: StatusError) -> Failure:
    """An HTTP error answer as a failed attempt: its status and the error's type as the
    server named it (a short identifier, never its message), retried as the status and
    ``x-should-retry`` say, after the wait the server asks."""
    status = error.status_code
    headers = error.response.headers
    kind = error.type if isinstance(error.type, str) and _SHORT_NAME.fullmatch(error.type) else None
    return Failure(
        f"HTTP {status} {kind or 'error'}",
        retryable=is_retryable_status(status, headers.get("x-should-retry")),
        status=status,
        retry_after=parse_retry_after(headers, time.time()),
    )


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
