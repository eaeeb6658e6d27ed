"""The /metrics endpoint cannot be starved: real sockets on 127.0.0.1 against the real
server. Idle connections give way to a scrape, a slow client is cut off, connections
are bounded, the descriptor reserve is kept, and only /metrics is served. The daemon
under a 1,024-descriptor limit with a thousand idle clients is in
tests/daemon/test_daemon_hostile_files.py."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from daemon_harness import wait_until

from memoryd.daemon.metrics import DaemonView, Metrics
from memoryd.daemon.metrics_server import BoundedServer, only_metrics

pytestmark = pytest.mark.timeout(60)


def view() -> DaemonView:
    return DaemonView(
        roots=["/r"], workspaces=[], jobs_in_flight=0, jobs_queued=0, pool_workers=1,
        polled_roots=0,
    )  # fmt: skip


def hello(environ: dict[str, object], start_response: object) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])  # type: ignore[operator]
    return [b"memoryd_up 1\n"]


@contextlib.contextmanager
def serving(**bounds: float) -> Iterator[int]:
    """A BoundedServer on 127.0.0.1 with ``bounds``, served the way Metrics serves it."""
    server = BoundedServer(("127.0.0.1", 0), **bounds)  # type: ignore[arg-type]
    server.set_app(only_metrics(hello))
    closing = threading.Event()

    def loop() -> None:
        while not closing.is_set():
            server.timeout = server.next_wake(time.monotonic())
            server.handle_request()
            server.reap(time.monotonic())

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    port = int(server.server_address[1])
    try:
        yield port
    finally:
        closing.set()
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        thread.join(10)
        server.cut_all()
        server.server_close()


def scrape(port: int, path: str = "/metrics") -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        data: bytes = reply.read()
        return data


def scrape_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "memoryd-scrape")


def closed_by_server(client: socket.socket) -> bool:
    """True once the server has shut the connection (EOF or reset)."""
    try:
        return client.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_only_metrics_is_served_anything_else_is_404() -> None:
    metrics = Metrics(view)
    _, port = metrics.serve("127.0.0.1", 0)
    try:
        assert b"memoryd_jobs_in_flight" in scrape(port)
        for path in ("/", "/metrics/x", "/favicon.ico", "/../etc/passwd"):
            with pytest.raises(urllib.error.HTTPError) as error:
                scrape(port, path)
            assert error.value.code == 404
            error.value.close()
    finally:
        metrics.close()


def test_idle_connections_give_way_to_a_scrape_and_stay_bounded() -> None:
    """Two hundred clients that connect and say nothing: the server holds at most its
    bound of them, and a scrape is answered at once instead of waiting them out."""
    with serving(max_connections=4, request_seconds=30, connection_seconds=60) as port:
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        try:
            wait_until(lambda: scrape_threads() <= 4, 10, "the idle connections bounded")
            assert scrape(port) == b"memoryd_up 1\n"
            # The connections cut to make room close their sockets at once; their threads
            # end a moment later, which on a busy machine a count can catch.
            wait_until(lambda: scrape_threads() <= 4 + 1, 10, "the connections bounded again")
        finally:
            for client in idle:
                client.close()


def test_a_client_that_trickles_its_request_is_cut_off() -> None:
    """Slowloris: a byte every 0.1 s never trips a per-read timeout; the deadline for
    the whole request cuts it off."""
    with serving(request_seconds=0.5, connection_seconds=5) as port:
        client = socket.create_connection(("127.0.0.1", port))
        client.settimeout(0.1)
        cut = False
        try:
            for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n" * 100:
                try:
                    client.send(bytes([byte]))
                except OSError:
                    cut = True
                    break
                if closed_by_server(client):
                    cut = True
                    break
        finally:
            client.close()
        assert cut, "the server kept a trickling client for the whole request"
        assert scrape(port) == b"memoryd_up 1\n"


def test_a_client_that_sends_nothing_is_cut_off_at_its_deadline() -> None:
    with serving(request_seconds=0.3) as port:
        client = socket.create_connection(("127.0.0.1", port))
        client.settimeout(0.1)
        try:
            wait_until(lambda: closed_by_server(client), 10, "the idle client cut off")
        finally:
            client.close()


def test_no_connection_is_taken_into_the_descriptor_reserve() -> None:
    """With fewer free descriptors than the reserve, a connection is closed at once."""
    with serving(reserve=10**9) as port:
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            scrape(port)
        assert scrape_threads() == 0
    with serving() as port:
        assert scrape(port) == b"memoryd_up 1\n"
