"""The ``/metrics`` endpoint: a small threaded HTTP server that no client can starve.

prometheus_client's threaded WSGI server keeps one thread and one descriptor per
connection for as long as the client keeps it open, with no timeout: a thousand idle
connections took every descriptor of a daemon under systemd's default limit, and with
them its appends, its jobs and its scrapes. This server bounds what clients can hold
(docs/design.md#metrics-endpoint):

- at most :data:`MAX_CONNECTIONS` connections at a time; when all are taken, a new one
  replaces the oldest that has not yet sent its request line (a scrape sends it at once,
  an idle client never does), and is refused only when every connection is being
  answered;
- a connection must have sent its request within :data:`REQUEST_SECONDS` and be done
  within :data:`CONNECTION_SECONDS`, however slowly it trickles bytes (slowloris), and
  each read or write waits at most :data:`REQUEST_SECONDS`;
- a connection is taken only while :data:`DESCRIPTOR_RESERVE` descriptors stay free for
  the daemon's own work (files, pipes, workers);
- any path but ``/metrics`` is 404.

The accepting thread sleeps in ``accept()`` while no connection is open (an idle daemon
does nothing between scrapes); while some are, it wakes at their next deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

MAX_CONNECTIONS = 8
"""Connections served at once (Prometheus scrapes one at a time)."""
REQUEST_SECONDS = 5.0
"""Seconds a connection has to send its whole request; also the limit of any one wait
for a read or a write."""
CONNECTION_SECONDS = 30.0
"""Seconds a connection may last in all, its answer included."""
DESCRIPTOR_RESERVE = 64
"""Descriptors that must stay free for the daemon's own work before a connection is taken."""

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def only_metrics(app: WSGIApp) -> WSGIApp:
    """``app`` at ``/metrics``; 404 for every other path."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: memoryd serves /metrics only\n"]
        return app(environ, start_response)

    return serve


def free_descriptors() -> int | None:
    """Descriptors this process may still open (None when it cannot tell)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    return soft - used


@dataclass(slots=True)
class _Connection:
    accepted: float
    answering: bool = False
    """Its whole request has arrived: it is a scrape being answered, not an idle client."""
    cut: bool = False
    """Cut off; its thread is ending."""


class _Handler(WSGIRequestHandler):
    """One request per connection, no access log (the daemon's stdout carries its JSON
    log lines only). The server sets the socket's timeout for each read and write."""

    server: BoundedServer

    def parse_request(self) -> bool:
        complete = super().parse_request()  # the request line and every header are in
        if complete:
            self.server.answering(self.request)
        return complete

    def log_message(self, format: str, *args: Any) -> None:
        pass


class BoundedServer(WSGIServer):
    """A WSGI server with a thread per connection and the bounds of the module docstring
    (the defaults; smaller ones for tests)."""

    request_queue_size = 128
    """The listen backlog: connections waiting there cost the daemon no descriptor, and a
    short one makes a burst of clients wait seconds for SYN retries."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_seconds: float = REQUEST_SECONDS,
        connection_seconds: float = CONNECTION_SECONDS,
        reserve: int = DESCRIPTOR_RESERVE,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)
        self.max_connections = max_connections
        self.request_seconds = request_seconds
        self.connection_seconds = connection_seconds
        self.reserve = reserve
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Connection] = {}

    # ----- the accepting thread --------------------------------------------------------

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                time.sleep(0.1)  # no descriptor to accept with: do not spin on the backlog
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        now = time.monotonic()
        with self._lock:
            self._reap(now)
            alive = sum(1 for connection in self._open.values() if not connection.cut)
            if alive >= self.max_connections and not self._evict_idle():
                self.shutdown_request(request)  # every connection is being answered
                return
            free = free_descriptors()
            if free is not None and free < self.reserve:
                self.shutdown_request(request)
                return
            self._open[request] = _Connection(now)
        request.settimeout(self.request_seconds)  # each read and write
        threading.Thread(
            target=self._serve, args=(request, client_address), name="memoryd-scrape", daemon=True
        ).start()

    def next_wake(self, now: float) -> float | None:
        """Seconds until the next connection's deadline; None while none is open."""
        with self._lock:
            deadlines = [self._deadline(c) for c in self._open.values() if not c.cut]
        return max(0.01, min(deadlines) - now) if deadlines else None

    def reap(self, now: float) -> None:
        """Cut off the connections past their deadline."""
        with self._lock:
            self._reap(now)

    def cut_all(self) -> None:
        """Cut off every open connection (the server is closing)."""
        with self._lock:
            self._reap(float("inf"))

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer is no news; never a traceback on stderr

    # ----- one connection --------------------------------------------------------------

    def answering(self, request: socket.socket) -> None:
        """``request`` sent its request line (called by its handler)."""
        with self._lock:
            connection = self._open.get(request)
            if connection is not None:
                connection.answering = True

    def _serve(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # the client left or timed out: nothing to report
            pass
        finally:
            with self._lock:
                self._open.pop(request, None)
            self.shutdown_request(request)

    # ----- under the lock --------------------------------------------------------------

    def _deadline(self, connection: _Connection) -> float:
        limit = self.connection_seconds if connection.answering else self.request_seconds
        return connection.accepted + limit

    def _reap(self, now: float) -> None:
        for request, connection in self._open.items():
            if not connection.cut and self._deadline(connection) <= now:
                connection.cut = True
                _cut(request)

    def _evict_idle(self) -> bool:
        idle = [(c.accepted, r) for r, c in self._open.items() if not (c.answering or c.cut)]
        if not idle:
            return False
        _, oldest = min(idle, key=lambda pair: pair[0])
        _cut(oldest)
        del self._open[oldest]  # its thread is ending; its place is the new connection's
        return True


def _cut(request: socket.socket) -> None:
    """Wake the thread blocked on ``request``: its reads end, its writes fail. The thread
    closes the socket itself (closing it here could hand its number to another file)."""
    with contextlib.suppress(OSError):
        request.shutdown(socket.SHUT_RDWR)
