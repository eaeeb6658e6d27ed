"""What a tool call did, read from its output and its command in the words of the tool
that produced them: whether it failed (and the first line that says so), and whether it
changed files (pure; docs/design.md#outcomes).

This is the one reader of outcomes: the call lines of a summary
(:mod:`memoryd.transcript.toolcalls`), the kinds of its items and the placeholders of
masked outputs all ask it. A call failed when its output says so as its tool says it:
a test runner's own tally or marker (pytest, unittest, jest, vitest, mocha, go test,
cargo test, rspec, minitest, ExUnit), a compiler's ``error:`` (tsc, gcc, clang, rustc,
go), a program naming itself before ``error:`` (``configure: error: …``), make's
``*** … Error``, npm's ``ERR!``, a shell's ``command not found``, a Python
traceback, an exit status other than 0 written out (``exit code 1``,
``<returncode>1</returncode>``, ``Exit: 1``), or, for a masked output, its placeholder's
``failure:`` note. Counts of zero (``0 failed``, ``errors=0``) are not failures, and the
content of a file a command only shows (``cat``, ``grep``, ``git diff``) is not the tool
speaking: there only the shell's own complaint and the exit status count.

A shell command changes files when it edits in place (``sed -i``, ``perl -pi``),
applies a patch (``patch``, ``apply_patch``, ``git apply``), moves or removes tracked
files (``git mv``, ``git rm``, ``git restore``), writes through a redirection (``>``,
``>>``, ``tee``, a heredoc into a file), or moves, copies or removes files (``mv``,
``cp``, ``rm``, ``touch``); a text-mode agent's editor commands (SWE-agent's
``edit 3:5``, ``create x.py``, ``str_replace_editor str_replace …``) change files too.

The lines a call's note quotes are found here too: the exception raised
(:data:`EXCEPTION_LINE`) and a line that reports an error in passing (:data:`ERROR_LINE`,
also what a prompt keeps of an output's cut middle).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memoryd.transcript.output_places import failure_start

PLACEHOLDER_LEAD = "[tool output masked by memoryd: "
"""How a masked output's placeholder starts."""
FAILURE_NOTE = "; failure: "
"""What a placeholder says of a call that failed, before its first error line."""
MAX_FAILURE_CHARS = 160
_SCANNED_CHARS = 60_000
"""Output read for a failure: its start and its end (a huge output's middle is rarely
where its verdict is)."""
_COUNT = r"[1-9]\d*"
"""A count that is not zero."""
_LINE_PHRASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # unittest before pytest: both start a line with FAILED.
    ("unittest", (r"FAILED \((?:failures|errors)=", r"(?:FAIL|ERROR): \w+ \(")),
    (
        "pytest",
        (r"(?:FAILED|ERROR) [^\s(]*(?:\.py\b|::)", r"\S+::\S+ (?:FAILED|ERROR)\b", r"E {2,}\S"),
    ),
    ("compiler", (rf"{_COUNT} errors? generated\b",)),
    ("pytest", (rf"[= ]*(?:\d+ \w+, )*{_COUNT} (?:failed|errors?)\b(?=[ ,]|$)",)),
    ("go test", (r"--- FAIL: ", r"FAIL\t", r"FAIL$", r"panic: ", r"\S+\.go:\d+:\d+: \S")),
    # jest's cross, vitest's multiplication sign, bun's ballot x
    ("jest", (r"[ \t]*FAIL[ \t]+\S", "[ \\t]*[\u2715\u00d7\u2717][ \\t]")),
    ("jest", (rf"[ \t]*(?:Tests|Test Suites|Test Files):?[ \t]+{_COUNT} failed\b",)),
    ("mocha", (rf"[ \t]*{_COUNT} failing\b",)),
    ("bun test", (rf"[ \t]*{_COUNT} fail$",)),
    ("cargo test", (r"test result: FAILED", r"test \S+ \.\.\. FAILED", r"error: test failed")),
    (
        "rspec",
        (
            r"\d+ (?:examples?|tests?|runs?|specs?|properties)(?:, \d+ \w+)*?, "
            rf"{_COUNT} (?:failures?|errors?)\b",
        ),
    ),
    (
        "compiler",
        (
            r"[^\s:]+(?::\d+){1,2}:? (?:fatal )?error\b",
            r"error\[E\d{4}\]: ",
            rf"(?:Found|found) {_COUNT} errors?\b",
        ),
    ),
    ("linter", (r"[^\s:]+:\d+(?::\d+)?:? [A-Z]{1,4}\d{3,5}\b",)),
    ("make", (r"make(?:\[\d+\])?: \*\*\* ",)),
    ("npm", (r"npm (?:ERR!|error) ", r"(?:yarn|pnpm)[^\n]{0,40}ERR", "error Command failed")),
    ("traceback", (r"Traceback \(most recent call last\):",)),
    ("traceback", (r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::[ \t]|:?$)",)),
    (
        "error line",
        (
            r"[ \t]*(?:ERROR|FATAL|FAILED|FAILURE|BUILD FAILED)\b",
            r"\[ERROR\]",
            r"(?:error|fatal|Error):[ \t]",
            # not a linker driver restating an exit status (collect2, clang)
            r"[A-Za-z][\w.+-]*: error:[ \t]"
            r"(?!.*\b(?:returned \d+ exit status|failed with exit code))",
            r"\S+ exited with code [1-9]",
        ),
    ),
)
"""How each kind of tool says a run failed at the start of a line, in the order they are
tried where several match the same line."""
_INLINE_PHRASES: tuple[tuple[str, str, str], ...] = (
    ("cargo test", "panicked at", r"panicked at\b"),
    ("compiler", "error TS", r"\berror TS\d+"),
    ("make", "*** [", r"\*\*\* \[[^\]\n]*\] Error \d+"),
    ("npm", "ERR_PNPM_", "ERR_PNPM_"),
    ("shell", "command not found", r"command not found\b"),
    ("shell", ": not found", r": not found$"),
    ("shell", ": No such file or directory", r": No such file or directory$"),
    ("shell", ": Permission denied", r": Permission denied$"),
)
"""Failure phrases found inside a line: the kind, the words that lead it (looked for with
``str.find``), and the phrase."""
_LINE_FAILURE = re.compile(
    "(?:"
    + "|".join(
        f"(?P<k{index}>{'|'.join(patterns)})" for index, (_, patterns) in enumerate(_LINE_PHRASES)
    )
    + ")",
    re.M,
)
_INLINE_FAILURE = tuple((kind, lead, re.compile(phrase)) for kind, lead, phrase in _INLINE_PHRASES)
_HINTS = (
    "FAIL", "fail", "fatal", "exited", "ERR", "rror", "panic", "not found", "No such",
    "denied", "Traceback", "Exception", "***", "\u2715", "\u00d7", "\u2717", "E  ", ".go:",
)  # fmt: skip
"""Words every line-start failure phrase holds (a linter's line aside): only the lines
that hold one are tried (a few fast substring scans, not a regex at every character)."""
_LINTER_HINT = re.compile(r":\d+:? [A-Z]{1,4}\d{3}")
EXIT_STATUS = re.compile(
    r"\b(?:exit[ _]?(?:code|status)|exited with(?: exit)? code|return[ _]?code)\b"
    r"\W{0,3}(-?\d{1,3})\b"
    r"|^[^\w\n]{0,3}exit:[ \t]*(-?\d{1,3})\b",
    re.I | re.M,
)
"""An exit status written out: ``exit code 1``, ``Exit status: 2``,
``<returncode>1</returncode>``, ``Exit: 1``."""
EXCEPTION_LINE = re.compile(
    r"^[ \t]*(?:E[ \t]+)?(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Z][A-Za-z0-9_]*(?:Error|Exception))"
    r"(?=:|[ \t]*$)",
    re.M,
)
"""An exception raised, at the start of a line of output (a traceback's last line, or
pytest's ``E   TypeError: …``); not a name inside code such as ``raise ValueError(…)``."""
ERROR_LINE = re.compile(
    r"^(?:[^\s:]+:\d+(?::\d+)?:?[ \t]*(?:error|[A-Z]{1,4}\d{3,5})\b"
    r"|[ \t]*(?:error|Error|ERROR|fatal|FATAL|FAILED|FAIL|panic|npm ERR!)\b"
    r"|.*(?:command not found|No such file or directory|Permission denied|: error:)).*$",
    re.M,
)
"""A line that reports an error: one that starts with it (``error: …``, ``FAILED …``,
``fatal: …``, ``path:12:5: E501 …``) or a shell's own complaint."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_MASKED_FAILURE = re.compile(re.escape(FAILURE_NOTE) + r"(?P<line>.*?)(?=; line \d| — \d)")


@dataclass(frozen=True, slots=True)
class Failure:
    """A failure an output reports: the kind of tool that said it, and its line."""

    kind: str
    """``pytest``, ``go test``, ``compiler``, ``shell``, ``exit status``, ``masked``, …"""
    line: str
    """The first line that says it, as the tool wrote it (white space made one)."""


def _status_match(output: str) -> re.Match[str] | None:
    lowered = output.lower()
    if "exit" not in lowered and "return" not in lowered:
        return None
    return EXIT_STATUS.search(output)


def exit_status(output: str) -> int | None:
    """The exit status an output writes out, or None (pure)."""
    found = _status_match(output)
    if found is None:
        return None
    return int(found[1] if found[1] is not None else found[2])


def read_failure(output: str, command: str | None = None) -> Failure | None:
    """The failure ``output`` reports in its tool's own words, or None (pure).

    ``command`` is the shell command that printed it, when known: for a command that only
    shows something (:func:`shows_only`), only the shell's complaint and the exit status
    count, never the content shown.
    """
    if output.startswith(PLACEHOLDER_LEAD):
        masked = _MASKED_FAILURE.search(output)
        return Failure("masked", masked["line"]) if masked else None
    if len(output) > 2 * _SCANNED_CHARS:
        output = output[:_SCANNED_CHARS] + "\n" + output[-_SCANNED_CHARS:]
    if "\x1b" in output:
        output = _ANSI.sub("", output)
    shown = command is not None and shows_only(command)
    found = _first_phrase(output, shown)
    if found is not None:
        return Failure(found[1], _line_at(output, failure_start(output, *found)))
    status = _status_match(output)
    if status is not None and int(status[1] if status[1] is not None else status[2]) != 0:
        return Failure("exit status", _line_at(output, status.start()))
    return None


def _first_phrase(output: str, shown: bool) -> tuple[int, str] | None:
    """Where the first failure phrase of ``output`` is and its kind; ``shown``: only a
    shell's own complaint counts (the output is a file or a search's hits)."""
    best: tuple[int, str] | None = None
    for start in () if shown else _hinted_lines(output):
        match = _LINE_FAILURE.match(output, start)
        if match is not None:
            best = (start, _LINE_PHRASES[int(str(match.lastgroup)[1:])][0])
            break
    end = len(output) if best is None else best[0]
    for kind, lead, phrase in _INLINE_FAILURE:
        if shown and kind != "shell":
            continue
        at = output.find(lead, 0, end)
        while at >= 0:
            start = output.rfind("\n", 0, at) + 1
            stop = output.find("\n", at)
            if phrase.search(output, start, stop if stop >= 0 else len(output)):
                best, end = (start, kind), start
                break
            at = output.find(lead, at + 1, end)
    return best


def _hinted_lines(output: str) -> list[int]:
    """Where the lines that hold a hint (:data:`_HINTS`, a linter's ``:12: E501``) start,
    in order."""
    starts: set[int] = set()
    for hint in _HINTS:
        at = output.find(hint)
        while at >= 0:
            start = output.rfind("\n", 0, at) + 1
            starts.add(start)
            after = output.find("\n", at)
            at = output.find(hint, after) if after >= 0 else -1
    for found in _LINTER_HINT.finditer(output):
        starts.add(output.rfind("\n", 0, found.start()) + 1)
    return sorted(starts)


def _line_at(text: str, at: int) -> str:
    """The line of ``text`` that holds index ``at``, its white space made one, cut to
    :data:`MAX_FAILURE_CHARS`."""
    line = text[:at].rpartition("\n")[2] + text[at:].partition("\n")[0]
    line = " ".join(line.split())
    return line if len(line) <= MAX_FAILURE_CHARS else line[: MAX_FAILURE_CHARS - 1] + "…"


_HEREDOC = re.compile(r"<<-?[ \t]*(?P<q>['\"]?)(?P<word>[A-Za-z_]\w*)(?P=q)")
_QUOTED = re.compile(r"'[^'\n]*'|\"(?:[^\"\\\n]|\\.)*\"")
_FD_COPY = re.compile(r"\d*>&\d+")
"""``2>&1``: one output joined to another, no file written."""
_SEPARATOR = re.compile(r"&&|\|\||[;|&\n(){}]|\$\(|`")
_PREFIX_WORDS = frozenset(
    ("sudo", "time", "nohup", "command", "builtin", "exec", "xargs", "then", "do", "else")
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_REDIRECT = re.compile(r"(?<![<>&\d-])(?:\d|&)?>>?\|?[ \t]*(?P<target>[^\s&|;<>()]+)")
_NOT_A_FILE = re.compile(r"^(?:&\d*|/dev/(?:null|stdout|stderr|tty|fd/\d+))$")
_SHOWING_WORDS = frozenset(
    (
        "cat", "nl", "head", "tail", "less", "more", "grep", "egrep", "fgrep", "rg", "ag", "ack",
        "ls", "tree", "find", "wc", "file", "stat", "du", "diff", "echo", "printf", "pwd",
        "which", "type", "sort", "uniq", "cut", "tr", "column", "jq", "awk", "true",
    )
)  # fmt: skip
"""Commands that only show something: their output is content, not a verdict."""
_SHOWING_GIT = frozenset(("diff", "show", "log", "status", "blame", "grep", "ls-files", "branch"))
_EDITOR_COMMANDS = re.compile(
    r"^(?:edit[ \t]+\d+(?::\d+)?|create[ \t]+\S|insert[ \t]+\d+|append[ \t]|"
    r"str_replace_editor[ \t]+(?:create|str_replace|insert|undo_edit)\b)"
)
"""A text-mode agent's editor commands (SWE-agent's): ``edit 3:5``, ``create x.py``."""


def edit_form(command: str) -> str | None:
    """How a shell command changes files (``sed -i``, ``redirect``, ``heredoc``, ``mv``,
    ``editor``, …), or None when it changes none (pure)."""
    text = command.strip()
    if not text:
        return None
    if _EDITOR_COMMANDS.match(text):
        return "editor"
    first_line, _, _ = text.partition("\n")
    heredoc = _heredoc_opener(first_line)
    body = _without_heredocs(text)
    bare = _FD_COPY.sub(" ", _QUOTED.sub("''", body))
    for simple in _SEPARATOR.split(bare):
        form = _simple_edit(simple.split())
        if form is not None:
            return "heredoc" if form == "redirect" and heredoc is not None else form
    return None


def changes_files(command: str) -> bool:
    """Whether a shell command changes files (:func:`edit_form`) (pure)."""
    return edit_form(command) is not None


def _without_heredocs(text: str) -> str:
    """``text`` without the bodies of its heredocs (their lines are data, not commands)."""
    lines = text.split("\n")
    kept: list[str] = []
    until: str | None = None
    for line in lines:
        if until is not None:
            if line.strip() == until:
                until = None
            continue
        kept.append(line)
        opened = _heredoc_opener(line)
        if opened is not None:
            until = opened["word"]
    return "\n".join(kept)


def _heredoc_opener(line: str) -> re.Match[str] | None:
    """The first heredoc ``line`` opens (``<<'EOF'``, ``<<-EOF``), not counting a ``<<``
    inside a quoted string."""
    quoted = [found.span() for found in _QUOTED.finditer(line)]
    for opened in _HEREDOC.finditer(line):
        if not any(opened.start() in range(start, end) for start, end in quoted):
            return opened
    return None


def _command_name(word: str) -> str:
    """The name a command word runs: ``sed`` of ``/usr/bin/sed``."""
    return word.rpartition("/")[2]


def _simple_edit(words: list[str]) -> str | None:
    """How one simple command (no separators) changes files, or None."""
    targets = (m["target"] for m in _REDIRECT.finditer(" ".join(words)))
    if any(not _NOT_A_FILE.match(target) for target in targets):
        return "redirect"
    while words and (words[0] in _PREFIX_WORDS or _ASSIGNMENT.match(words[0])):
        words = words[1:]
    if not words:
        return None
    name, args = _command_name(words[0]), words[1:]
    operands = [a for a in args if not a.startswith("-")]
    if name == "sed" and any(a.startswith("--in-place") or _flag(a, "i") for a in args):
        return "sed -i"
    if name == "perl" and any(_flag(a, "i") for a in args):
        return "perl -pi"
    if name in ("patch", "apply_patch", "applypatch"):
        return name if name != "applypatch" else "apply_patch"
    if name == "git" and operands:
        sub = operands[0]
        if sub in ("apply", "am", "mv", "rm", "restore"):
            return f"git {sub}"
        if sub == "checkout" and "--" in args:
            return "git checkout"
    if name == "tee" and any(not _NOT_A_FILE.match(a) for a in operands):
        return "tee"
    if name in ("mv", "cp", "install", "rsync") and len(operands) >= 2:
        return "mv" if name == "mv" else "cp"
    if name == "find" and "-delete" in args:
        return "rm"
    if name in ("rm", "unlink", "touch", "truncate", "shred") and operands:
        return "rm" if name in ("rm", "unlink", "shred") else "touch"
    return None


def _flag(argument: str, letter: str) -> bool:
    """Whether ``argument`` is a bundle of short flags holding ``letter`` (``-pi``)."""
    return argument.startswith("-") and not argument.startswith("--") and letter in argument[1:3]


def shows_only(command: str) -> bool:
    """Whether a shell command only shows something (a file, a search's hits, a diff):
    every simple command of it is one of the showing commands and none writes (pure)."""
    text = _FD_COPY.sub(" ", _QUOTED.sub("''", _without_heredocs(command.strip())))
    if not text or edit_form(command) is not None:
        return False
    seen = False
    for simple in _SEPARATOR.split(text):
        words = simple.split()
        while words and (words[0] in _PREFIX_WORDS or _ASSIGNMENT.match(words[0])):
            words = words[1:]
        if not words:
            continue
        name = _command_name(words[0])
        if name == "cd":
            continue
        if name == "sed" and "-n" in words[1:]:
            seen = True
            continue
        if (
            name == "git"
            and next((w for w in words[1:] if not w.startswith("-")), "") in _SHOWING_GIT
        ):
            seen = True
            continue
        if name not in _SHOWING_WORDS:
            return False
        seen = True
    return seen
