"""``memoryd status`` and ``memoryd status --watch``: the numbers, level, strategy and
heartbeat of workspaces, as people and orchestrators read them (docs/design.md#cli).

May import: core, files, workspace, commit, signals, receipts, config, stores, recall,
summarizers, strategies, job, daemon.
"""
