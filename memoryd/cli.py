"""The ``memoryd`` command: ``main(argv) -> exit code``, testable without a subprocess.

Exit codes: 0 done (also "nothing to do", said in words), 1 the operation failed (files
unchanged), 2 bad usage, configuration or input — one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO, cast

from memoryd import stores
from memoryd.cli_memory import add_memory_parser
from memoryd.config import (
    LoadedSettings,
    Settings,
    config_as_dict,
    load_settings,
    render_config,
    settings_for_workspace,
)
from memoryd.conversation import ROLES, append_message
from memoryd.errors import MemorydError, UsageError
from memoryd.fsutil import check_workspace
from memoryd.heartbeat import HeartbeatManager
from memoryd.job import JobRequest, JobResult, run_job, summarizer_env
from memoryd.logs import configure_logging
from memoryd.status import collect_status, render_status_table
from memoryd.workspace import Workspace

EXIT_BY_OUTCOME = {
    "completed": 0,
    "nothing_to_do": 0,
    "dry_run": 0,
    "ineffective": 0,
    "failed": 1,
    "busy": 1,
}


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() owns the exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = _Parser(
        prog="memoryd",
        description="Keep AI-agent conversations inside their context budget.",
    )
    parser.add_argument("--config", type=Path, help="TOML configuration file")
    parser.add_argument(
        "--log-format", choices=("json", "console"), help="log line format (default: json)"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run the daemon in the foreground")
    run.add_argument("--root", action="append", type=Path, help="a root to watch (repeatable)")
    run.set_defaults(handler=cmd_run)

    demo = commands.add_parser(
        "demo", help="run the daemon on a demo root with the offline summarizer (no key)"
    )
    demo.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=Path("memoryd-demo"),
        help="(default: ./memoryd-demo)",
    )
    demo.set_defaults(handler=cmd_demo)

    summarize = commands.add_parser("summarize", help="one summarization job now")
    summarize.add_argument("workspace", type=Path)
    summarize.add_argument("--force", action="store_true", help="even below the trigger")
    summarize.add_argument("--dry-run", action="store_true", help="say what would happen")
    summarize.add_argument("--strategy", choices=("narrative", "rolling", "checkpoint"))
    summarize.set_defaults(handler=cmd_summarize)

    status = commands.add_parser("status", help="usage and state of workspaces")
    status.add_argument("path", nargs="?", type=Path, help="a workspace or a folder of them")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--watch", action="store_true", help="refresh the table until Ctrl-C (live on a terminal)"
    )
    status.add_argument(
        "--interval", type=float, default=2.0, help="seconds between refreshes (default: 2)"
    )
    status.set_defaults(handler=cmd_status)

    append = commands.add_parser("append", help="append one message under the lock")
    append.add_argument("workspace", type=Path)
    append.add_argument("--role", required=True, choices=ROLES)
    append.add_argument("--content", help="the text (default: read from stdin)")
    append.add_argument(
        "--blocks", action="store_true", help="the content is a JSON list of content blocks"
    )
    append.set_defaults(handler=cmd_append)

    heartbeat = commands.add_parser("heartbeat", help="the HEARTBEAT.md lifecycle")
    heartbeat.add_argument("workspace", type=Path)
    actions = heartbeat.add_subparsers(dest="action", required=True, parser_class=_Parser)
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
    heartbeat.set_defaults(handler=cmd_heartbeat)

    add_memory_parser(cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands))

    config = commands.add_parser("config", help="print the effective configuration")
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.set_defaults(handler=cmd_config)
    return parser


def _load(args: argparse.Namespace, **overrides: Any) -> LoadedSettings:
    return load_settings(args.config, {"log_format": args.log_format, **overrides})


def _summarizer_env() -> dict[str, str]:
    return summarizer_env(os.environ)


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """``memoryd run``: the daemon, in the foreground."""
    from memoryd.daemon import run_daemon

    roots = [str(root) for root in args.root] if args.root else None
    loaded = _load(args, roots=roots)
    result: int = run_daemon(loaded, config_file=args.config, cli_roots=roots)
    return result


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    """``memoryd demo``: prepare a demo root, then run the daemon on it."""
    from memoryd.daemon import run_daemon
    from memoryd.demo import prepare_demo

    config = prepare_demo(args.folder)
    workspace = config.parent / "example-agent"
    print(
        f"memoryd demo: root {config.parent}, config {config}\n"
        "  the example workspace is past its trigger and is summarized right away;\n"
        f"  in another terminal:  memoryd --config {config} status\n"
        f'  add a message:        memoryd append {workspace} --role user --content "hello"\n'
        "  stop with Ctrl-C.",
        file=sys.stderr,
    )
    loaded = load_settings(config, {"log_format": args.log_format})
    result: int = run_daemon(loaded, config_file=config)
    return result


def cmd_summarize(args: argparse.Namespace, out: TextIO) -> int:
    """``memoryd summarize``: one job in the foreground."""
    loaded = _load(args)
    workspace = check_workspace(args.workspace)
    settings = settings_for_workspace(loaded.settings, workspace)
    if args.strategy:
        settings = settings.model_copy(update={"strategy": args.strategy})
    on_terminal = sys.stderr.isatty()

    def progress(stage: str) -> None:
        if on_terminal:
            print(f"memoryd: {stage}…", file=sys.stderr, flush=True)

    result = run_job(
        JobRequest(
            workspace=workspace,
            settings=settings,
            force=args.force,
            dry_run=args.dry_run,
            env=_summarizer_env(),
        ),
        progress=progress,
    )
    print(describe_result(result), file=out)
    return EXIT_BY_OUTCOME[result.outcome]


def describe_result(result: JobResult) -> str:
    """One line saying what a job did, in words and figures."""
    if result.outcome in ("completed", "ineffective"):
        text = (
            f"{result.workspace}: {result.reason}; {result.messages_before} → "
            f"{result.messages_after} messages, ~{result.tokens_before:,} → "
            f"~{result.tokens_after:,} tokens ({result.backend}); originals in {result.archive}"
        )
        if result.outcome == "ineffective":
            text += "; still above the trigger (summarize_ineffective)"
        return text
    if result.outcome == "dry_run":
        return f"{result.workspace}: dry run: {result.reason}"
    if result.outcome == "nothing_to_do":
        return f"{result.workspace}: nothing to do: {result.reason}"
    return f"{result.workspace}: {result.outcome}: {result.reason}"


def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    """``memoryd status``: one workspace, or every workspace under a folder or the roots."""
    settings = _load(args).settings
    if args.path:
        paths = [args.path]
    else:
        # A configured root that does not exist yet holds no workspace: say so, no error.
        paths = [root for root in settings.roots if root.is_dir()]
        for root in settings.roots:
            if not root.is_dir():
                print(f"memoryd: root {root} does not exist (yet)", file=sys.stderr)
    if args.watch:
        return _watch_status(args, paths, settings, out)
    rows = collect_status(paths, settings)
    if args.json:
        json.dump(rows, out, indent=2)
        out.write("\n")
    elif not rows:
        where = ", ".join(str(p) for p in paths) or "the configured roots"
        print(f"no workspaces found under {where}", file=out)
    else:
        out.write(render_status_table(rows))
    return 0


def _watch_status(
    args: argparse.Namespace, paths: list[Path], settings: Settings, out: TextIO
) -> int:
    from memoryd.status_watch import watch

    if args.json:
        raise UsageError("status: --watch and --json cannot be combined")
    if not args.interval > 0:
        raise UsageError(f"status: --interval must be above 0 (got {args.interval:g})")
    last = [collect_status(paths, settings)]  # a bad PATH is refused before the screen is taken

    def rows() -> list[dict[str, Any]]:
        # A workspace removed between two frames must not end the watch: keep the last frame.
        with contextlib.suppress(MemorydError, OSError):
            last[0] = collect_status(paths, settings)
        return last[0]

    return watch(
        rows,
        out,
        args.interval,
        is_tty=out.isatty(),
        colour=not os.environ.get("NO_COLOR"),
    )


def cmd_append(args: argparse.Namespace, out: TextIO) -> int:
    """``memoryd append``: one message, under the writers' lock."""
    text = args.content if args.content is not None else sys.stdin.read()
    content: Any = text
    if args.blocks:
        try:
            content = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--blocks: the content is not valid JSON ({exc.msg})") from None
        if not isinstance(content, list):
            raise UsageError("--blocks: the content must be a JSON list of content blocks")
    message = append_message(args.workspace, args.role, content)
    print(json.dumps({"appended": True, "id": message["id"]}), file=out)
    return 0


def cmd_heartbeat(args: argparse.Namespace, out: TextIO) -> int:
    """``memoryd heartbeat``: show or change HEARTBEAT.md; complete and pause bookmark it."""
    workspace = Workspace(check_workspace(args.workspace))
    manager = HeartbeatManager(workspace)
    action = args.action
    if action == "start":
        heartbeat = manager.start_task(args.description)
    elif action == "checkin":
        heartbeat = manager.checkin()
    elif action == "complete":
        heartbeat = manager.complete_task(args.result)
        stores.record_task_bookmark(workspace.path, heartbeat, "completed")
    elif action == "fail":
        heartbeat = manager.fail_task(args.reason)
    elif action == "pause":
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


def cmd_config(args: argparse.Namespace, out: TextIO) -> int:
    """``memoryd config``: the effective configuration, secrets masked, with sources."""
    loaded = _load(args)
    if args.json:
        json.dump(config_as_dict(loaded), out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(render_config(loaded))
        if not render_config(loaded).endswith("\n"):
            out.write("\n")
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one ``memoryd`` command; returns its exit code."""
    stdout = out or sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command != "run":
            # One-shot commands keep stdout for their answer and log warnings only.
            configure_logging(args.log_format or "json", "warning", sys.stderr)
        code: int = args.handler(args, stdout)
        return code
    except MemorydError as exc:
        print(f"memoryd: {exc}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # --help and --version end here
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        print("memoryd: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
