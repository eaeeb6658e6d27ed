"""sd_notify without a dependency: one datagram to ``$NOTIFY_SOCKET`` per message."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


def notify(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``READY=1``, ``STATUS=…``, ``WATCHDOG=1``, ``STOPPING=1``).

    Returns False, doing nothing, when memoryd is not run by systemd (no socket) or the
    socket cannot be reached; the daemon works the same either way.
    """
    address = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
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
