"""Careful file primitives: atomic replace (temp file, fsync, rename, fsync of the
folder), all-or-nothing appends, the writers' lock, and reads that open only a regular
file and never wait on a FIFO (docs/design.md#layout).

- :mod:`~memoryd.files.paths`: opening and creating inside a workspace, never through a
  symlink out of it;
- :mod:`~memoryd.files.fsutil`: writing and locking;
- :mod:`~memoryd.files.creating`: temp names, modes and renames that never replace, for
  fsutil's writes;
- :mod:`~memoryd.files.regular`: reading a file that someone else may replace.

May import: core.
"""
