"""``memoryd run``: the daemon, split by responsibility (docs/design.md#daemon).

- :mod:`~memoryd.daemon.supervisor`: the queue, signals, life cycle and stop; it builds
  the parts below, each given only what it uses, and drives them;
- :mod:`~memoryd.daemon.workspaces`: the registry of workspaces (finding, tracking,
  tidying them);
- :mod:`~memoryd.daemon.scheduler`: when each workspace is due (pure over ``now``);
- :mod:`~memoryd.daemon.dispatch`: the dispatcher (counting, the backlog, the jobs in
  flight and their outcomes);
- :mod:`~memoryd.daemon.pool`: the worker processes;
- :mod:`~memoryd.daemon.root_watchers`: the root observers;
- :mod:`~memoryd.daemon.publisher`: state.json, events, HEARTBEAT.md and STATUS;
- :mod:`~memoryd.daemon.tracked`: what the daemon knows of one workspace and of its job
  in flight, and whether a job is due (pure);
- :mod:`~memoryd.daemon.worker`: what runs inside a pool worker;
- :mod:`~memoryd.daemon.fs_events`: watchdog observers that hand paths to the queue;
- :mod:`~memoryd.daemon.logs`, :mod:`~memoryd.daemon.systemd`, :mod:`~memoryd.daemon.metrics`
  and :mod:`~memoryd.daemon.metrics_server`: structured logs, sd_notify, Prometheus.

Nothing is imported here: a worker process or a command that only configures logging
loads no more than the module it names.

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript, llm, summary, compaction.
"""
