"""``memoryd heartbeat``: show or change HEARTBEAT.md; complete and pause bookmark it."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from memoryd.files.paths import check_workspace
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workspace, then one action with its arguments."""
    parser.add_argument("workspace", type=Path)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("show", help="print the heartbeat")
    start = actions.add_parser("start", help="mark a task active")
    start.add_argument("description")
    actions.add_parser("checkin", help="advance last_checkin")
    complete = actions.add_parser("complete", help="mark the task completed (and bookmark it)")
    complete.add_argument("--result", help="one line on what was done")
    fail = actions.add_parser("fail", help="mark the task failed")
    fail.add_argument("reason")
    pause = actions.add_parser("pause", help="pause the task (and bookmark it)")
    pause.add_argument("--notes", help="where to resume")
    pause.add_argument("--blockers", help="what stands in the way")
    actions.add_parser("reset", help="back to idle")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Do the action; print the heartbeat as JSON."""
    workspace = Workspace(check_workspace(args.workspace))
    manager = HeartbeatManager(workspace)
    action = args.action
    if action == "start":
        heartbeat = manager.start_task(args.description)
    elif action == "checkin":
        heartbeat = manager.checkin()
    elif action == "complete":
        from memoryd.stores import disk as stores

        task = manager.get_status()
        heartbeat = manager.complete_task(args.result)
        # The bookmark names the task that completed, which HEARTBEAT.md no longer holds.
        done = replace(task, status="completed", last_result=heartbeat.last_result)
        stores.record_task_bookmark(workspace.path, done, "completed")
    elif action == "fail":
        heartbeat = manager.fail_task(args.reason)
    elif action == "pause":
        from memoryd.stores import disk as stores

        heartbeat = manager.pause_task(args.notes, args.blockers)
        stores.record_task_bookmark(
            workspace.path, heartbeat, "paused", notes=args.notes, blockers=args.blockers
        )
    elif action == "reset":
        heartbeat = manager.reset()
    else:
        heartbeat = manager.get_status()
    print(json.dumps(heartbeat.as_dict()), file=out)
    return 0
