"""``memoryd status`` and ``memoryd status --watch``: the numbers, level, strategy and
heartbeat of workspaces, as people and orchestrators read them (docs/design.md#cli).

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript, llm, summary, compaction, daemon.
"""
