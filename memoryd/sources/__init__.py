"""Recall over the sessions other agents write: Claude Code, Codex CLI and Gemini CLI
(docs/design.md#sources).

Read-only: a pure parser per format turns one line's bytes into the messages it holds,
with their ids (:mod:`~memoryd.sources.claude`, :mod:`~memoryd.sources.codex`,
:mod:`~memoryd.sources.gemini`); :mod:`~memoryd.sources.layout` recognises a folder or a
file and lists its session files without following a symlink or opening anything but a
regular file (:mod:`~memoryd.sources.listing` reads only the folders that changed);
:mod:`~memoryd.sources.indexer` feeds an FTS5 index kept under
``$XDG_STATE_HOME/memoryd/sources/`` (:mod:`~memoryd.sources.store`), by byte offset, a
file's rows at a time (:mod:`~memoryd.sources.rows`); :mod:`~memoryd.sources.access` finds
the agent's folder a path is in and brings its index up to date;
:mod:`~memoryd.sources.search` answers ``recall`` and :mod:`~memoryd.sources.expand`
``expand`` with the same query language and ranking as a workspace's archive. Nothing is
ever written beside the files read.

May import: core, files, workspace, commit, published, receipts, config, stores, search.
"""
