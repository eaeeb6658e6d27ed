"""Observation masking: which old tool outputs become one-line placeholders
(docs/design.md#masking).

- :mod:`~memoryd.compaction.masking.decide`: the decision and what it frees;
- :mod:`~memoryd.compaction.masking.choice`, :mod:`~memoryd.compaction.masking.rules`:
  which outputs it takes, and what beyond old tool outputs;
- :mod:`~memoryd.compaction.masking.placeholders`: what a placeholder says;
- :mod:`~memoryd.compaction.masking.stage`: a job's masking stage, with its commit.
"""
