"""What jobs did and cost: one receipt per job, the totals ``memoryd history`` prints, the
price table, and the daily spend cap kept from the receipts (docs/design.md#receipts).

- :mod:`~memoryd.receipts.records`: ``.memoryd/receipts.jsonl``;
- :mod:`~memoryd.receipts.totals`: totals over receipts and the history table (pure);
- :mod:`~memoryd.receipts.pricing`: what an LLM call cost (pure);
- :mod:`~memoryd.receipts.spend_cap`: the daily LLM spend cap of one daemon.

May import: core, files, workspace, commit, published.
"""
