"""The one search engine of recall: ranked search over past messages, and expand (a
message back to its original lines), over SQLite FTS5 indexes kept as caches
(docs/design.md#recall).

One engine, two feeds. The engine: :mod:`~memoryd.search.schema` (what an index holds),
:mod:`~memoryd.search.database` (opening an index file), :mod:`~memoryd.search.query`,
:mod:`~memoryd.search.cost`, :mod:`~memoryd.search.rank` and :mod:`~memoryd.search.text`
(the query language, its cost bound, the ranking, how text is cut and read). The feeds:

- a workspace's archive: :mod:`~memoryd.search.archive` (``recall`` and ``expand``, also
  ``from memoryd import recall, expand``), :mod:`~memoryd.search.archive_index` (its index
  in ``.memoryd/index.sqlite``), :mod:`~memoryd.search.history` (its lines in order,
  archives first);
- other agents' sessions (Claude Code, Codex CLI, Gemini CLI): :mod:`memoryd.search.sessions`.

May import: core, files, workspace, commit, published, receipts, config, stores.
"""
