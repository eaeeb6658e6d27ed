"""Creating a new file: its temp name, its mode, and a rename that never replaces.

The pieces :mod:`memoryd.files.fsutil` builds its writes from, each made to cost no
system call beyond the ones the write needs: a start tidies thousands of workspaces
with them (docs/design.md#scale-start).
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
from collections.abc import Callable

NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
"""Flags for a file memoryd creates: never an existing file, never through a symlink."""


class _TempNames:
    """The process's part of every temp name: its pid (which recovery reads back to
    know whether the writer still runs) and a random tag drawn once, then a counter.
    Unique within the process, and across processes that reuse a pid; no system call
    per name (docs/design.md#scale-start). Drawn again in a forked child."""

    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        # os.urandom is what secrets.token_hex draws from; secrets would import hashlib.
        self.prefix = f"{os.getpid()}-{os.urandom(4).hex()}-"
        self.counter = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter)}"


_names = _TempNames()
os.register_at_fork(after_in_child=_names.renew)


def next_temp_tag() -> str:
    """The next ``PID-TAG-N`` for a temp name of this process."""
    return _names.next()


@functools.cache
def _umask() -> int | None:
    """This process's umask, read once and without changing it (``Umask:`` of
    /proc/self/status, Linux 4.7 and later; memoryd never changes its own); None when it
    cannot be read."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        return None
    return None


os.register_at_fork(after_in_child=_umask.cache_clear)


def open_new(name: str, mode: int, folder: int) -> tuple[int, bool]:
    """Create ``name`` in ``folder`` for writing; (its descriptor, whether it still
    needs ``fchmod(mode)``). When the umask leaves ``mode`` as it is, the file is created
    with it and needs no fchmod; else it is created 0o600 until its owner sets ``mode``."""
    umask = _umask()
    if umask is not None and mode & umask == 0:
        return os.open(name, NEW_FILE_FLAGS, mode, dir_fd=folder), False
    return os.open(name, NEW_FILE_FLAGS, 0o600, dir_fd=folder), True


_RENAME_NOREPLACE = 1


@functools.cache
def _renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    """glibc's ``renameat2`` (2.28 and later), looked up once per process (ctypes is
    imported then, not by every command that imports this module); None where there
    is none."""
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
    function.argtypes += (ctypes.c_uint,)
    function.restype = ctypes.c_int
    return function


def rename_noreplace(src: str, dst: str, src_folder: int, dst_folder: int) -> bool:
    """Rename ``src`` (in the open ``src_folder``) to ``dst`` (in ``dst_folder``) unless
    ``dst`` exists: True when renamed, FileExistsError when ``dst`` exists, False when
    this system or file system cannot refuse to replace (the caller then links)."""
    function = _renameat2()
    if function is None:
        return False
    result = function(src_folder, os.fsencode(src), dst_folder, os.fsencode(dst), _RENAME_NOREPLACE)
    if result == 0:
        return True
    import ctypes  # loaded already, by _renameat2

    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM):
        return False  # no RENAME_NOREPLACE here (an old kernel, some network file systems)
    raise OSError(code, os.strerror(code), dst)
