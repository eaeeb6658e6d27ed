"""The TLS context every SDK client of a process shares (anthropic and openai both build
their HTTP clients on httpx2)."""

from __future__ import annotations

import os
import ssl
import threading

import httpx2

_tls: tuple[int, ssl.SSLContext] | None = None
_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """The TLS context of this process's SDK clients, the one the SDKs would build
    themselves (``create_ssl_context()``: the CA bundle, and ``SSL_CERT_FILE``/
    ``SSL_CERT_DIR``).

    Built once per process: loading the CA bundle took ~25 ms of CPU, half of what a
    whole job costs, and a burst's jobs paid it each, sixteen at once on two cores
    (docs/design.md#burst).
    """
    global _tls
    with _tls_lock:
        if _tls is None or _tls[0] != os.getpid():
            _tls = (os.getpid(), httpx2.create_ssl_context())
        return _tls[1]
