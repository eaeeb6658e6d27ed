"""Memory stores (bookmarks, todos, decisions, lessons): appends, reads, and deterministic
compaction through the lossless rewrite (docs/design.md#memory-stores).

- :mod:`~memoryd.stores.entries`: what a store's lines are (pure);
- :mod:`~memoryd.stores.compaction`: which entries become which summary lines (pure);
- :mod:`~memoryd.stores.disk`: the stores on disk.

May import: core, files, workspace, commit, published, receipts, config.
"""
