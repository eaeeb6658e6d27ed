"""One summarization job, from the request to the report: what runs in a pool worker or in
the foreground (docs/design.md#jobs).

- :mod:`~memoryd.job.request`: what a job takes and gives back (plain picklable values);
- :mod:`~memoryd.job.run`: ``run_job``: read, split, produce the head, commit;
- :mod:`~memoryd.job.finish`: the commit and what follows it;
- :mod:`~memoryd.job.report`: the receipt and, on failure, HEARTBEAT.md and the event.

May import: core, files, workspace, commit, signals, receipts, config, stores, recall,
summarizers, strategies.
"""
