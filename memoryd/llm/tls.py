"""The TLS context every SDK client of a process shares (anthropic and openai both build
their HTTP clients on httpx2)."""

from __future__ import annotations

import ssl
import threading

import httpx2

_tls: ssl.SSLContext | None = None
_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """The TLS context of this process's SDK clients, the one the SDKs would build
    themselves (``create_ssl_context()``: the CA bundle, and ``SSL_CERT_FILE``/
    ``SSL_CERT_DIR``).

    Built once: loading the CA bundle took ~25 ms of CPU, half of what a whole job costs,
    and a burst's jobs paid it each, sixteen at once on two cores. The pool's forkserver
    builds it as it starts (:mod:`memoryd.llm.tls_ready`), so every worker forked from it
    inherits it (docs/design.md#burst).
    """
    global _tls
    with _tls_lock:
        if _tls is None:
            _tls = httpx2.create_ssl_context()
        return _tls


def tls_built() -> bool:
    """Whether this process holds its TLS context already (built here, or inherited)."""
    return _tls is not None
