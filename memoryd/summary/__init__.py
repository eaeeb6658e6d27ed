"""The summary: one document model and what produces it (docs/design.md#summary-items).

- :mod:`~memoryd.summary.items`, :mod:`~memoryd.summary.folding`: a summary as items, and
  the previous head's items folded into the new one;
- :mod:`~memoryd.summary.checkpoint`: the structured checkpoint, its items rendered as
  five lists (``checkpoint.json``, an LLM's JSON answer, the head message's text);
- :mod:`~memoryd.compaction.strategies.head`: the summary message and its head;
- :mod:`~memoryd.summary.retention`, :mod:`~memoryd.summary.verbatim`: what a summary
  kept of the details, and the section that puts back what it lost;
- :mod:`~memoryd.summary.reconcile`: the one step from the summarizer's answer to the
  head (repair, never worse than offline, verbatim details, carried items);
- :mod:`~memoryd.summary.backends` (the ``auto`` choice), :mod:`~memoryd.summary.chunking`,
  :mod:`~memoryd.summary.prompts`, :mod:`~memoryd.summary.checkpoint_prompt`,
  :mod:`~memoryd.summary.extractive`, :mod:`~memoryd.summary.extractive_checkpoint`:
  producing the text, through an LLM or offline.

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript, llm.
"""
