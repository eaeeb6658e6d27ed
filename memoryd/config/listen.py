"""The metrics endpoint's ``listen`` address: parsed, and whether it stays on this host."""

from __future__ import annotations

import ipaddress


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as (host, port); ValueError naming the problem."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host:
        raise ValueError("must be host:port, e.g. 127.0.0.1:9477")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range")
    return host, port


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere
