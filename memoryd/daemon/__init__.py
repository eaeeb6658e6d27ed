"""``memoryd run``: the daemon, split by responsibility (docs/design.md#daemon).

- :mod:`~memoryd.daemon.supervisor`: the queue, signals, life cycle and stop, with
  :mod:`~memoryd.daemon.workspaces` (finding, tracking, tidying workspaces) and
  :mod:`~memoryd.daemon.dispatch` (counting, the backlog, jobs and their outcomes);
- :mod:`~memoryd.daemon.scheduler`: the workspaces and when each is due (pure over ``now``);
- :mod:`~memoryd.daemon.pool`: the worker processes;
- :mod:`~memoryd.daemon.watchers`: the root observers;
- :mod:`~memoryd.daemon.publisher`: state.json, events, HEARTBEAT.md and STATUS.
"""

from memoryd.daemon.hooks import DaemonHooks
from memoryd.daemon.supervisor import Supervisor, run_daemon

__all__ = ["DaemonHooks", "Supervisor", "run_daemon"]
