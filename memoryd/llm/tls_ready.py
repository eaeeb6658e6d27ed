"""Imported by the pool's forkserver with the SDK: builds the process's TLS context there,
once, so that every worker forked from it starts with it (docs/design.md#burst)."""

from memoryd.llm.tls import tls_context

tls_context()
