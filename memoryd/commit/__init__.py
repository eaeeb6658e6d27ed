"""The commit protocol: the lossless rewrite of a file that agents keep appending to,
and the recovery after a commit that was interrupted (docs/design.md#commit).

- :mod:`~memoryd.commit.snapshot`: what a job read of a file, and whether it is still that file;
- :mod:`~memoryd.commit.rewrite`: the rewrite itself (archive, temp file, rename, carry-over);
- :mod:`~memoryd.commit.draining`: the drain window and its marks;
- :mod:`~memoryd.commit.recovery`: cleaning up after a commit that did not finish.

May import: core, files, workspace.
"""
