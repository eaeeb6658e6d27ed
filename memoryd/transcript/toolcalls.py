"""A tool call as one line: the command or tool with its key argument, and what came of it
(pure; docs/design.md#summarizers).

An agent calls tools with ``tool_use`` blocks (Anthropic's format) or, in text mode, writes
a command in a shell code fence and gets its output pasted back. Either way the call is
read as a :class:`ToolCall`: a short label (``pytest -x`` for a shell command,
``Read src/app.py`` for another tool) and an :class:`Outcome` taken from its output (the
exit status when the output shows it, the first error or exception line, other exception
names). Nothing of a call is ever shown as raw JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from memoryd.transcript.outcomes import (
    ERROR_LINE,
    EXCEPTION_LINE,
    PLACEHOLDER_LEAD,
    changes_files,
    exit_status,
    read_failure,
)
from memoryd.transcript.output_places import (
    FRAME,
    FRAME_LINES,
    MAX_PATH_CHARS,
    NAMED_SCAN_CHARS,
    definitions,
    named_paths,
    named_phrase,
    output_frames,
    output_listing,
)

MAX_LABEL_CHARS = 100
MAX_ERROR_CHARS = 140
MAX_OTHER_EXCEPTIONS = 3
MAX_FOUND_CHARS = 180
"""What a call's line says of the places its output names, at most (whole items)."""
ARGUMENT_KEYS = (
    "command", "cmd", "file_path", "notebook_path", "pattern", "query", "url", "path", "glob",
    "description", "name",
)  # fmt: skip
"""The inputs that say what a call did, the first one present winning."""
SHELL_KEYS = ("command", "cmd")
FILE_KEYS = ("file_path", "path", "notebook_path")
_EDIT_NAME = re.compile(r"edit|write|create|replace|patch", re.I)
_WRITE_NAME = re.compile(r"write|create", re.I)
_PATCH_NAME = re.compile(r"(?:^|[\W_])(?:apply_?)?patch(?:$|[\W_])", re.I)
_PATCHED_FILE = re.compile(r"^(?:\*\*\* (?:Update|Add|Delete) File: |\+\+\+ b/)(\S+)", re.M)
"""A file a patch changes: Codex's ``*** Update File: path``, a unified diff's ``+++ b/path``."""
"""A tool that applies a patch (``apply_patch``, ``patch``; not ``dispatch_agent``)."""
SHELL_LANGUAGES = frozenset(
    ("bash", "sh", "shell", "console", "zsh", "terminal", "", "mswea_bash_command")
)
"""Fence languages of commands run: the shells', and mini-swe-agent's own."""

SHELL_FENCE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z_]*)[ \t]*\n(?P<body>.*?)\n?[ \t]*```", re.S)
"""A fenced code block with its language (maybe none) and body."""
_CD_PREFIX = re.compile(r"^cd\s+\S+\s*(?:&&|;)\s*(?=\S)")
_PROMPT_PREFIX = re.compile(r"^\$\s+")
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z0-9_]*(?:Error|Exception)\b")
"""An exception's name anywhere in prose."""
EXCEPTION_HINT = re.compile("Error|Exception")
"""What every exception name holds: a text without it holds none (one fast scan)."""
ERROR_CODE = re.compile(r"[A-Z](?<![\w][A-Z])[A-Z]{0,3}\d{3,5}\b")
"""A linter's or compiler's code (E501, TS2345, E0382); it counts after ``path:line:col:``
or ``error`` (:data:`ERROR_CODE_LEAD`). Its first character is matched first, so that
``re`` skips to capital letters."""
ERROR_CODE_LEAD = re.compile(r"(?::\d+(?::\d+)?:?[ \t]+|\berror[ \t]*\[?|\bwarning[ \t]*\[)$")
_TEST_TALLY = re.compile(
    r"^[= \t]*(?P<tally>\d+ (?:passed|failed|errors?|error)\b[^=\n]*?)[= \t]*$", re.M
)
_FAILED_TEST = re.compile(r"^FAILED [^\s:]+::(?:[^\s:]+::)*(?P<test>[^\s:]+)", re.M)
"""A failing test in pytest's short summary (``FAILED tests/t.py::test_x - AssertionError``)."""
MAX_FAILURES = 8
"""What comes before a definition in a file shown: indentation, the line's number in a
numbered listing (and the words that may lead a definition)."""
_EDITOR_VERBS = {
    "view": "viewed", "create": "created", "str_replace": "edited", "insert": "edited",
    "edit": "edited", "write": "wrote", "undo_edit": "undid an edit of",
}  # fmt: skip
"""What an editor tool's sub-command did to its file."""
_TOOL_VERBS = (
    (re.compile(r"read|view|open", re.I), "read"),
    (re.compile(r"grep|search|glob|find", re.I), "searched for"),
    (re.compile(r"fetch", re.I), "fetched"),
)
"""What a tool did, by its name (the first that matches)."""
_SCANNED_CHARS = 60_000
"""Output scanned for an outcome: its start and its end (a huge output's middle is
rarely where its error is, and its tail is kept)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a call's output shows: exit status, first error line, other exceptions."""

    status: int | None = None
    error_line: str | None = None
    exceptions: tuple[str, ...] = ()
    failed: bool = False
    tally: str | None = None
    location: tuple[str, str, str] | None = None
    """Where the last exception was raised: the file, line and function of the frame
    above it (``("/src/a.py", "12", "load")``; the function may be "")."""
    failures: tuple[str, ...] = ()
    """The failing tests pytest's short summary names."""
    failure: str | None = None
    """The first line that says the call failed, in its tool's own words
    (:func:`memoryd.transcript.outcomes.read_failure`)."""
    frames: tuple[str, ...] = ()
    """The traceback's frames nearest the raise, as ``path line N``, last first."""
    head: str = field(default="", repr=False, compare=False)
    """The start of the output, where :meth:`paths` looks for the paths it names."""
    listing: str = field(default="", repr=False, compare=False)
    """The output, when it shows a file (a numbered listing such as ``cat -n``'s or an
    editor's view, or code that defines something): :func:`definitions` reads it when
    asked."""

    def text(self) -> str:
        """The outcome in a few words, or "" when the output shows nothing of note."""
        parts = []
        if self.status is not None:
            parts.append(f"exit {self.status}")
        if self.error_line:
            parts.append(self.error_line)
        failure = _clean_line(self.failure) if self.failure else None
        if (
            failure
            and self.error_line
            and failure not in self.error_line
            and not failure.startswith("Traceback")
            and exit_status(failure) is None
        ):
            # The runner's own verdict (``FAIL: test_x``) beside the exception it raised.
            parts.append(failure)
        if self.tally and (not self.error_line or self.tally not in self.error_line):
            parts.append(self.tally)
        shown = " ".join(parts)
        others = [name for name in self.exceptions if name not in shown]
        if others:
            parts.append("also " + ", ".join(others[:MAX_OTHER_EXCEPTIONS]))
        if not parts and self.failed:
            parts.append("failed")
        return ", ".join(parts)

    def paths(self) -> tuple[str, ...]:
        """The file paths the output names (a search's hits, a listing), in order; none
        for a file shown (its definitions say more)."""
        return () if self.listing or not self.head else named_paths(self.head, self.frames)

    def places(self, shown: str = "") -> str:
        """The frames and paths the output names that ``shown`` does not hold, as a note
        says them (:func:`named_phrase`), within :data:`MAX_FOUND_CHARS`."""
        defined = definitions(self.listing) if self.listing and not shown else ()
        if defined:
            return "defines " + ", ".join(defined)
        named = [path for path in self.paths() if path not in shown]
        return named_phrase(self.frames, named, MAX_FOUND_CHARS)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call: where it was made, its label, its shell command (if any), its outcome."""

    position: int
    """Index of the message that made the call."""
    name: str
    label: str
    """``pytest -x`` (a shell command) or ``Read src/app.py`` (another tool)."""
    command: str | None
    """The shell command's label, for a shell call; None for another tool."""
    outcome: Outcome | None = None
    edits: bool = False
    """Whether the call changes a file (an edit, a write, a create)."""
    action: str | None = None
    """What another tool did, as a note says it (``edited src/a.py``); None: its label."""


def command_label(command: str) -> str:
    """A shell command as a summary shows it (pure): its first line, without a leading
    ``cd DIR &&`` or ``$ ``, runs of white space made one, cut at a word to 100 characters."""
    first = next((line.strip() for line in command.splitlines() if line.strip()), "")
    first = _CD_PREFIX.sub("", _PROMPT_PREFIX.sub("", first))
    first = " ".join(first.split())
    if len(first) <= MAX_LABEL_CHARS:
        return first
    return _cut_at_word(first, MAX_LABEL_CHARS)


def _cut_at_word(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters with an ellipsis, never inside a word:
    the word the limit falls in is kept whole when it ends by :data:`MAX_PATH_CHARS` (a
    long path), else left out."""
    if len(text) <= limit:
        return text
    end = text.find(" ", limit - 1)
    end = len(text) if end < 0 else end
    if end <= MAX_PATH_CHARS:
        return text[:end] + ("…" if end < len(text) else "")
    cut = text[: limit - 1]
    cut = cut[: cut.rfind(" ")] if " " in cut else cut
    return cut.rstrip() + "…"


def label_key(label: str) -> str:
    """What a summary must hold of a label: the label without its ellipsis, in lower case."""
    return " ".join(label.removesuffix("…").casefold().split())


def tool_use_call(position: int, block: Mapping[str, object]) -> ToolCall:
    """The call a ``tool_use`` block makes (pure)."""
    name = str(block.get("name") or "tool")
    raw = block.get("input")
    given: Mapping[str, object] = raw if isinstance(raw, Mapping) else {}
    patch = raw if isinstance(raw, str) else given.get("input")
    if isinstance(patch, str) and _PATCH_NAME.search(name):
        # A tool whose input is the edit itself (Codex's ``apply_patch``): named by the
        # files its patch changes, as an editor's edit is by its file.
        files = _short(", ".join(dict.fromkeys(_PATCHED_FILE.findall(patch))))
        if files:
            return ToolCall(
                position, name, f"{name} {files}", None, edits=True, action=f"edited {files}"
            )
        return ToolCall(position, name, name, None, edits=True, action=f"{name} edit")
    argument = next(
        (given[key] for key in ARGUMENT_KEYS if isinstance(given.get(key), str) and given[key]),
        None,
    )
    edits = any(key in given for key in ("old_string", "new_string", "old_str", "file_text"))
    # A tool named for writing changes a file when it names one (a to-do list tool does not).
    named_file = any(isinstance(given.get(key), str) for key in FILE_KEYS)
    edits = edits or (named_file and bool(_EDIT_NAME.search(name)))
    # A patch tool names its files inside the patch (Codex's ``apply_patch``).
    edits = edits or bool(_PATCH_NAME.search(name))
    shell = next((_shell_text(given[k]) for k in SHELL_KEYS if k in given), None)
    if isinstance(shell, str) and shell.strip():
        path = given.get("path")
        if len(shell.split()) == 1 and isinstance(path, str):
            # An editor's sub-command ({"command": "view", "path": …}), not a shell command.
            edits = shell in ("create", "str_replace", "insert", "write", "edit")
            verb = _EDITOR_VERBS.get(shell)
            action = f"{verb} {_short(path)}" if verb else None
            label = f"{name} {shell} {_short(path)}"
            return ToolCall(position, name, label, None, edits=edits, action=action)
        if not edits:
            call = shell_call(position, name, shell)
            if call is not None:
                return call
    if argument is None:
        return ToolCall(position, name, name, None, edits=edits)
    shown = _short(str(argument))
    verb = next((v for pattern, v in _TOOL_VERBS if pattern.search(name)), None)
    if edits:
        replaces = any(key in given for key in ("old_string", "old_str"))
        verb = "wrote" if _WRITE_NAME.search(name) and not replaces else "edited"
    action = f"{verb} {shown}" if verb else None
    return ToolCall(position, name, f"{name} {shown}", None, edits=edits, action=action)


def shell_call(position: int, name: str, command: str) -> ToolCall | None:
    """The call a shell command makes (pure): labelled by :func:`command_label`, an edit
    when the command changes files (:func:`memoryd.transcript.outcomes.changes_files`);
    None for a command with nothing to show."""
    label = command_label(command)
    if not label:
        return None
    return ToolCall(position, name, label, label, edits=changes_files(command))


def _shell_text(value: object) -> str | None:
    """A shell command as a call gives it: a string, or an argument list (``["bash",
    "-lc", "pytest -x"]`` is ``pytest -x``)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        return None
    words = [str(v) for v in value]
    shell = words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh")
    if len(words) == 3 and shell and words[1] in ("-c", "-lc"):
        return words[2]
    return " ".join(words)


def _short(text: str) -> str:
    return _cut_at_word(" ".join(text.split()), MAX_LABEL_CHARS)


def fenced_commands(text: str) -> list[str]:
    """The shell commands of a text-mode agent's message: the bodies of its shell code
    fences (``bash``, ``sh``, ``console``, … or none), when the message ends with one
    (pure). A snippet shown in the middle of an explanation is not a command run."""
    if "```" not in text or not text.rstrip().endswith("```"):
        return []
    found = [m for m in SHELL_FENCE.finditer(text) if m["lang"].lower() in SHELL_LANGUAGES]
    if not found or found[-1].end() < len(text.rstrip()):
        return []
    return [m["body"] for m in found if m["body"].strip()]


def without_fences(text: str) -> str:
    """``text`` without its fenced code blocks (pure)."""
    return SHELL_FENCE.sub("", text) if "```" in text else text


def outcome_of(
    output: str, failed: bool = False, shell: bool = True, command: str | None = None
) -> Outcome:
    """What a call's output shows (pure); ``failed`` is the result's own error flag.

    A shell command's whole output is read, and it failed when its output says so
    (:func:`memoryd.transcript.outcomes.read_failure`; ``command``, when known, tells a
    command that only shows a file from one that reports); another tool's output (a file
    it read, a search) is only read for its first line when the tool reports an error,
    or for its placeholder's note once masked.
    """
    if not shell:
        masked = read_failure(output) if output.startswith(PLACEHOLDER_LEAD) else None
        if masked is not None:
            return Outcome(error_line=masked.line, failed=True, failure=masked.line)
        if not failed:
            listing = output_listing(output)
            return Outcome(head=output[:NAMED_SCAN_CHARS], listing=listing)
        first = next((line for line in output.splitlines() if line.strip()), "")
        return Outcome(error_line=_clean_line(first) if first else None, failed=failed)
    if len(output) > 2 * _SCANNED_CHARS:
        output = output[:_SCANNED_CHARS] + "\n" + output[-_SCANNED_CHARS:]
    status = exit_status(output)
    failure = read_failure(output, command)
    raised = list(EXCEPTION_LINE.finditer(output)) if EXCEPTION_HINT.search(output) else []
    # The exception raised, else the line that says the call failed, else one that
    # reports an error in passing.
    line = raised[0] if raised else None if failure is not None else ERROR_LINE.search(output)
    error_line = None
    if line is not None:
        end = output.find("\n", line.start())
        error_line = _clean_line(output[line.start() : end if end >= 0 else None])
    elif failure is not None:
        error_line = _clean_line(failure.line)
    location: tuple[str, str, str] | None = None
    if raised:
        last = raised[-1].start()
        frame_at = output.rfind('File "', 0, last)
        near = frame_at >= 0 and output.count("\n", frame_at, last) <= FRAME_LINES
        frame = FRAME.match(output, frame_at) if near else None
        if frame is not None:
            location = (frame["file"], frame["line"], frame["where"] or "")
    frames = output_frames(output) if 'File "' in output else ()
    listing = "" if raised else output_listing(output)
    tally = _TEST_TALLY.search(output)
    failures: tuple[str, ...] = ()
    if "FAILED " in output:
        failures = tuple(dict.fromkeys(m["test"] for m in _FAILED_TEST.finditer(output)))
    return Outcome(
        status=status,
        error_line=error_line,
        exceptions=tuple(dict.fromkeys(m["name"] for m in raised)),
        failed=failed or bool(status) or failure is not None,
        failure=failure.line if failure is not None else None,
        tally=tally["tally"].strip() if tally else None,
        location=location,
        failures=failures[:MAX_FAILURES],
        frames=frames,
        head=output[:NAMED_SCAN_CHARS],
        listing=listing,
    )


def _clean_line(line: str) -> str | None:
    text = " ".join(re.sub(r"^[ \t]*E[ \t]+", "", line).split())
    if len(text) < 2:
        return None
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def error_names(output: str) -> list[str]:
    """Exception names raised and error codes reported in a call's output (pure)."""
    found = []
    if EXCEPTION_HINT.search(output):
        found = [m["name"] for m in EXCEPTION_LINE.finditer(output)]
    for code in ERROR_CODE.finditer(output):
        if ERROR_CODE_LEAD.search(output, max(0, code.start() - 24), code.start()):
            found.append(code.group())
    return list(dict.fromkeys(found))
