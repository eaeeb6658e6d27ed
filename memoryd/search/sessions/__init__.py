"""Recall over the sessions other agents write: Claude Code, Codex CLI and Gemini CLI
(docs/design.md#sources), a feed of the recall engine around it.

Read-only: a pure parser per format turns one line's bytes into the messages it holds,
with their ids (:mod:`.claude`, :mod:`.codex`, :mod:`.gemini`); :mod:`.layout` recognises a
folder or a file and lists its session files without following a symlink or opening
anything but a regular file (:mod:`.listing` reads only the folders that changed);
:mod:`.indexer` feeds an FTS5 index kept under ``$XDG_STATE_HOME/memoryd/sources/``
(:mod:`.store`), by byte offset, a file's rows at a time (:mod:`.rows`); :mod:`.access`
finds the agent's folder a path is in and brings its index up to date; :mod:`.search`
answers ``recall`` and :mod:`.expand` ``expand`` with the same query language and ranking
as a workspace's archive. Nothing is ever written beside the files read.
"""
