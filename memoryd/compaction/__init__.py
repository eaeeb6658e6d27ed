"""Compaction: when a conversation is compacted, where it may be cut, and the job that
does it (docs/design.md#jobs).

- :mod:`~memoryd.compaction.strategies`: the strategies (narrative, rolling, checkpoint,
  least loss) behind one small protocol;
- :mod:`~memoryd.compaction.masking`: observation masking, old tool outputs as one-line
  placeholders;
- :mod:`~memoryd.compaction.job`: one job, from the request to the report.

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript, llm, summary.
"""
