"""The ``memoryd`` command: ``main(argv) -> exit code``, testable without a subprocess.

Exit codes: 0 done (also "nothing to do", said in words), 1 the operation failed (files
unchanged), 2 bad usage, configuration or input — one line on stderr, never a traceback.

Each command lives in its own module under ``memoryd/cli/``, imported only when that
command runs (or when its ``--help`` is asked for), so that a command an agent calls per
message pays only for what it uses (docs/design.md#cli). To add a command:

1. write ``memoryd/cli/<name>.py`` with two functions:
   ``add_arguments(parser: argparse.ArgumentParser) -> None`` (its arguments; nested
   actions with ``parser.add_subparsers``) and ``run(args, out: TextIO) -> int`` (do it,
   print the answer to ``out``, return the exit code; raise a ``MemorydError`` subclass
   for a refusal or a failure);
2. add one line to ``COMMANDS`` below: ``"name": Command("memoryd.cli.name", "help")``.

Keep heavy imports (the Anthropic SDK, watchdog, mcp, prometheus_client, pydantic) out of
a module's top level unless its command needs them every time. The global options
(``--config``, ``--log-format``) are accepted before and after the command by every
(sub)parser; ``memoryd.cli.options.load_config(args)`` reads the configuration.

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript, llm, summary, compaction, daemon, status, mcp_server.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from memoryd import __version__
from memoryd.errors import MemorydError, UsageError

# typing and dataclasses are left out at run time: with what they import they cost as
# much as a bare interpreter's start (docs/design.md#startup).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn, Protocol, TextIO

    class CommandModule(Protocol):
        """What a module named in ``COMMANDS`` provides."""

        def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

        def run(self, args: argparse.Namespace, out: TextIO) -> int: ...


PROG = "memoryd"


class Command:
    """A command: the module that implements it and its one-line help."""

    __slots__ = ("help", "module")

    def __init__(self, module: str, help: str) -> None:
        self.module = module
        self.help = help


COMMANDS: dict[str, Command] = {
    "run": Command("memoryd.cli.run", "run the daemon in the foreground"),
    "demo": Command(
        "memoryd.cli.demo", "run the daemon on a demo root with the offline summarizer (no key)"
    ),
    "summarize": Command("memoryd.cli.summarize", "one summarization job now"),
    "status": Command("memoryd.cli.status", "usage and state of workspaces"),
    "append": Command("memoryd.cli.append", "append one message under the lock"),
    "messages": Command(
        "memoryd.cli.messages", "the conversation as a Messages-API messages list (JSON)"
    ),
    "heartbeat": Command("memoryd.cli.heartbeat", "the HEARTBEAT.md lifecycle"),
    "memory": Command("memoryd.cli.memory", "memory stores: bookmarks, todos, decisions, lessons"),
    "config": Command("memoryd.cli.config", "print the effective configuration"),
    "recall": Command(
        "memoryd.cli.recall",
        "search the messages memoryd summarized, or Claude Code/Codex/Gemini CLI sessions",
    ),
    "expand": Command("memoryd.cli.expand", "print a message's original lines byte for byte"),
    "mcp": Command("memoryd.cli.mcp", "serve recall and memory tools over MCP (stdio)"),
    "history": Command(
        "memoryd.cli.history", "the receipts of past jobs: what each did and cost, with totals"
    ),
}


GLOBAL_OPTIONS = {"--config": "config", "--log-format": "log_format"}


def add_global_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """``--config`` and ``--log-format`` on ``parser``.

    The top-level parser defaults them to None; every subparser adds them again with
    ``argparse.SUPPRESS`` as the default, so a value given after the command is taken and a
    value given before it is not overwritten.
    """
    parser.add_argument(
        "--config", type=Path, default=default, metavar="FILE", help="TOML configuration file"
    )
    parser.add_argument(
        "--log-format",
        choices=("json", "console"),
        default=default,
        help="log line format (default: json)",
    )


def _terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size().columns`` finds it: $COLUMNS,
    else the width of stdout's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter with the width it would take, found without importing
    shutil (and with it bz2, lzma, fnmatch): argparse builds a formatter for every
    argument a command adds, also when no help is printed."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() owns the exit code and the line.

    ``add_subparsers`` creates its parsers with this class too, and each carries the
    global options.
    """

    dash_words = False
    """Whether an unknown word that starts with one ``-`` is a positional argument (a
    search query such as ``-postgres``) rather than an unknown option."""

    def __init__(self, *args: Any, top: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        add_global_options(self, None if top else argparse.SUPPRESS)

    def _parse_optional(self, arg_string: str) -> Any:
        found = super()._parse_optional(arg_string)
        if (
            self.dash_words
            and isinstance(found, tuple)
            and found[0] is None
            and not arg_string.startswith("--")
        ):
            return None  # not one of this parser's options: a positional
        return found

    def error(self, message: str) -> NoReturn:
        # main() prefixes "memoryd: "; a subcommand's errors name the subcommand.
        where = self.prog.removeprefix(PROG).strip()
        raise UsageError(f"{where}: {message}" if where else message)


def take_dash_words(parser: argparse.ArgumentParser) -> None:
    """Let ``parser`` take a word such as ``-postgres`` that is none of its options as a
    positional argument (a query), instead of refusing it as an unknown option."""
    if isinstance(parser, _Parser):
        parser.dash_words = True


def command_in(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (the first argument that is not a global option)."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if word in GLOBAL_OPTIONS:
            next(words, None)  # its value
        elif not word.startswith("-"):
            return word
    return None


def _globals_first(argv: Sequence[str]) -> bool:
    """True when nothing but global options comes before the command word of ``argv``:
    then the parse never needs the other commands (the top-level help, ``-h`` before the
    command, lists them all)."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS:
            next(words, None)  # its value
        elif word.partition("=")[0] not in GLOBAL_OPTIONS:
            return not word.startswith("-")
    return False


def load_command(name: str) -> CommandModule:
    """Import the module of command ``name``."""
    module: CommandModule = importlib.import_module(COMMANDS[name].module)
    return module


def build_parser(command: str | None = None, *, alone: bool = False) -> argparse.ArgumentParser:
    """The parser: every command by name and help; the arguments of ``command`` only
    (of every command when ``command`` is None, which imports them all). With ``alone``,
    the other commands are left out: a parser per command costs more than the interpreter
    spends on ``import json`` (argparse asks gettext for its words in each), and a parse
    that starts with a known command word never looks at them (docs/design.md#startup)."""
    parser = _Parser(
        prog=PROG,
        top=True,
        description="Keep AI-agent conversations inside their context budget.",
        epilog="Run 'memoryd COMMAND --help' for a command's arguments.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, spec in COMMANDS.items():
        if alone and name != command:
            continue
        sub = commands.add_parser(name, help=spec.help, description=spec.help)
        if command is None or name == command:
            load_command(name).add_arguments(sub)
    return parser


def option_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """How the user spelled each argument, by its ``dest``: "--content", "description"."""
    names: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names |= option_names(sub)
        elif action.dest not in names:
            names[action.dest] = action.option_strings[-1] if action.option_strings else action.dest
    return names


def check_text_arguments(args: argparse.Namespace, names: dict[str, str]) -> None:
    """Refuse a text argument that is not UTF-8 (argv bytes Python could only keep as lone
    surrogates): it could be written nowhere. Paths are not text and may hold any bytes."""
    for dest, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    option = names.get(dest, dest)
                    raise UsageError(
                        f"{option}: not UTF-8 text (it holds undecodable bytes)"
                    ) from None


def _os_error_line(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{exc.filename}: {reason}" if exc.filename else reason


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one ``memoryd`` command; returns its exit code."""
    stdout = out or sys.stdout
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        command = command_in(words)
        known = command in COMMANDS
        parser = build_parser(command if known else "", alone=known and _globals_first(words))
        args, extras = parser.parse_known_args(words)
        if extras:  # argparse would say it without the command's name
            unknown = f"unrecognized arguments: {' '.join(extras)}"
            raise UsageError(f"{args.command}: {unknown}" if args.command else unknown)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        check_text_arguments(args, option_names(parser))
        if args.config is not None:
            # Every command refuses a --config that is not there, also one that reads no
            # setting: the user meant something by it.
            from memoryd.config.sources import find_config_file

            find_config_file(args.config, {})
        code: int = load_command(args.command).run(args, stdout)
        return code
    except MemorydError as exc:
        for line in str(exc).splitlines() or [""]:  # a config with several problems
            print(f"{PROG}: {line}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # --help and --version end here
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:
        # An operation failed on a file or the disk: one line, exit 1 (files unchanged).
        print(f"{PROG}: {_os_error_line(exc)}", file=sys.stderr)
        return 1
