"""Recall: ranked search over past messages, and expand (a message back to its original
lines), over SQLite FTS5 indexes kept as caches (docs/design.md#recall).

One engine, two feeds. The engine: :mod:`~memoryd.recall.schema` (what an index holds),
:mod:`~memoryd.recall.database` (opening an index file), :mod:`~memoryd.recall.query`,
:mod:`~memoryd.recall.cost`, :mod:`~memoryd.recall.rank` and :mod:`~memoryd.recall.text`
(the query language, its cost bound, the ranking, how text is cut and read). The feeds:

- a workspace's archive: :mod:`~memoryd.recall.archive` (``recall`` and ``expand``, also
  ``from memoryd import recall, expand``), :mod:`~memoryd.recall.archive_index` (its index
  in ``.memoryd/index.sqlite``), :mod:`~memoryd.recall.history` (its lines in order,
  archives first);
- other agents' sessions (Claude Code, Codex CLI, Gemini CLI): :mod:`memoryd.recall.sessions`.

The package itself is callable as :func:`memoryd.recall.archive.recall`: ``memoryd.recall``
is both this package and the function of the public API.

May import: core, files, workspace, commit, signals, receipts, config, stores.
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Any


class _CallablePackage(types.ModuleType):
    """``memoryd.recall``, which ``from memoryd import recall`` gives once the package is
    imported: called, it is :func:`memoryd.recall.archive.recall`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from memoryd.recall.archive import recall

        return recall(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
