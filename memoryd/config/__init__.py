"""Configuration: the validated Settings, where each value came from, and a fast path for
the commands agents run per message (docs/design.md#configuration).

- :mod:`~memoryd.config.settings`: ``Settings`` and ``load_settings`` (pydantic);
- :mod:`~memoryd.config.sections`, :mod:`~memoryd.config.schema`: its sections and helpers;
- :mod:`~memoryd.config.sources`: the file and the ``MEMORYD_*`` variables;
- :mod:`~memoryd.config.fast`: the few values ``memoryd status`` needs, without pydantic;
- :mod:`~memoryd.config.fields`: the fast path's table of fields, written from ``Settings``
  by :mod:`~memoryd.config.derive`;
- :mod:`~memoryd.config.view`: ``memoryd config``.

Nothing here imports pydantic at import time except ``settings``, ``view`` and ``derive``.

May import: core, files, workspace, commit, published, receipts.
"""
