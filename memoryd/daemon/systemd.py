"""sd_notify without a dependency: one datagram to ``$NOTIFY_SOCKET`` per message."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger()

_warned: set[str] = set()
"""The sockets a failed send was already reported for (once each, not per ping)."""


def notify(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``READY=1``, ``STATUS=…``, ``WATCHDOG=1``, ``STOPPING=1``).

    Returns False, doing nothing, when memoryd is not run by systemd (no socket) or the
    socket cannot be reached; the daemon works the same either way, but a send that fails
    while ``$NOTIFY_SOCKET`` is set is logged as a warning, once: systemd would otherwise
    time the start out, or kill the daemon for a missed watchdog ping, without a word.
    """
    configured = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not configured:
        return False
    address = "\0" + configured[1:] if configured.startswith("@") else configured
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as exc:
        if configured not in _warned:
            _warned.add(configured)
            log.warning(
                "sd_notify_failed",
                socket=configured,
                message=message.split("=", 1)[0],
                error=exc.strerror or type(exc).__name__,
            )
        return False
    return True


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``$WATCHDOG_USEC``), or None.

    Honours ``$WATCHDOG_PID``: the pings are for this process only.
    """
    environ = os.environ if env is None else env
    usec = environ.get("WATCHDOG_USEC", "")
    pid = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2_000_000
