"""Getting back what was summarized: recall (ranked search over the archive) and expand
(a message back to its original lines), over a SQLite FTS5 index kept as a cache
(docs/design.md#recall).

- :mod:`~memoryd.search.recall`: ``recall`` and ``expand`` (also ``from memoryd import
  recall, expand``);
- :mod:`~memoryd.search.history`: a workspace's lines in order, archives first;
- :mod:`~memoryd.search.index`, :mod:`~memoryd.search.schema`: the index and what it holds;
- :mod:`~memoryd.search.query`, :mod:`~memoryd.search.rank`, :mod:`~memoryd.search.text`:
  the query language, the ranking, how text is cut and read.

May import: core, files, workspace, commit, published, receipts, config, stores.
"""
