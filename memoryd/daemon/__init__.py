"""``memoryd run``: the daemon, split by responsibility (docs/design.md#daemon).

- :mod:`~memoryd.daemon.supervisor`: the queue, signals, life cycle and stop, with
  :mod:`~memoryd.daemon.workspaces` (finding, tracking, tidying workspaces) and
  :mod:`~memoryd.daemon.dispatch` (counting, the backlog, jobs and their outcomes);
- :mod:`~memoryd.daemon.scheduler`: the workspaces and when each is due (pure over ``now``);
- :mod:`~memoryd.daemon.pool`: the worker processes;
- :mod:`~memoryd.daemon.watchers`: the root observers;
- :mod:`~memoryd.daemon.publisher`: state.json, events, HEARTBEAT.md and STATUS;
- :mod:`~memoryd.daemon.tracked`: what the daemon knows of one workspace, and whether a
  job is due (pure);
- :mod:`~memoryd.daemon.worker`: what runs inside a pool worker;
- :mod:`~memoryd.daemon.watch`: watchdog observers that hand paths to the queue;
- :mod:`~memoryd.daemon.logs`, :mod:`~memoryd.daemon.systemd`, :mod:`~memoryd.daemon.metrics`
  and :mod:`~memoryd.daemon.metrics_server`: structured logs, sd_notify, Prometheus.

Nothing is imported here: a worker process or a command that only configures logging
loads no more than the module it names.

May import: core, files, workspace, commit, signals, receipts, config, stores, recall,
summarizers, strategies, job.
"""
