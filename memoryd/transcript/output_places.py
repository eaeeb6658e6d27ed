"""The places a tool's output names, for its call's line: the traceback frames nearest the
raise, the file paths it shows, and what a file it shows defines (pure;
docs/design.md#agent-transcripts).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

LINE_NUMBER = re.compile(
    r"[ \t]*(?:\d+[ \t]*[\t→|:-]?[ \t]*)?(?:(?:async|export|default|pub|public|static)[ \t]+)*"
)

FRAME = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>\d+)(?:, in (?P<where>[^\s]+))?')
"""A frame of a Python traceback."""


FRAME_LINES = 4
"""The frame that raised comes at most this many lines before the exception (its code
line and the markers under it in between)."""


_DEFINITION = re.compile(r"(?:def|class|function|func|fn)[ \t]+(?P<name>[A-Za-z_]\w*)")


_DEFINITION_WORDS = ("def ", "class ", "function ", "func ", "fn ")


MAX_DEFINITIONS = 5


DEFINITIONS_SCAN_CHARS = 20_000
"""Where the definitions of a file shown are looked for: its start."""


_PATH = re.compile(r"(?<![\w/.~-])(?:~?/?[\w.-]+/)+[\w.-]*\w\.[A-Za-z]\w{0,5}(?![\w/])")
"""A file path with a folder and an extension (``src/app.py``, ``/srv/x/y.txt``)."""


MAX_NAMED = 8
"""The paths an output names that an outcome keeps (the first ones)."""


NAMED_SCAN_CHARS = 4_000
"""Where the paths an output names are looked for: its start (a listing's or a
search's first hits)."""


MAX_FRAMES = 4
"""The frames of a traceback an outcome keeps (the last ones, nearest the raise)."""


MAX_PATH_CHARS = 200
"""A path is shown whole up to this length."""


_NUMBERED = re.compile(r"^[ \t]*\d+(?:\t|→|[ \t]*\|)", re.M)


LISTING_LEAD_CHARS = 300
"""A numbered file listing has a numbered line this early (after a title or a tag)."""


_UNINDENTED = re.compile(r"^\S", re.M)


def failure_start(output: str, at: int, kind: str) -> int:
    """Where the line that says a failure of ``kind`` found at ``at`` starts (pure): a
    Python traceback's header (``Traceback (most recent call last):``) says only that one
    follows, so the line that ends it, the exception raised (``KeyError: 'id'``), the
    first after it that is not indented as its frames and their code are, speaks for it."""
    if kind != "traceback" or not output.startswith("Traceback", at):
        return at
    after = output.find("\n", at)
    raised = _UNINDENTED.search(output, after + 1) if after >= 0 else None
    return raised.start() if raised is not None else at


def output_frames(output: str) -> tuple[str, ...]:
    """The last :data:`MAX_FRAMES` distinct frames of the tracebacks in ``output``, as
    ``path line N``, the one nearest the raise first."""
    found = [f"{m['file']} line {m['line']}" for m in FRAME.finditer(output)]
    return tuple(dict.fromkeys(reversed(found)))[:MAX_FRAMES]


def named_paths(output: str, frames: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The first :data:`MAX_NAMED` distinct file paths in the first
    :data:`NAMED_SCAN_CHARS` of ``output``, outside the ``frames`` already kept (pure)."""
    if "/" not in output:
        return ()
    framed = {frame.rsplit(" line ", 1)[0] for frame in frames}
    found: dict[str, None] = {}
    # Only the lines with a slash are scanned: most lines of most outputs have none.
    for line in output[:NAMED_SCAN_CHARS].splitlines():
        if "/" not in line:
            continue
        for path in _PATH.findall(line):
            if path not in framed and len(path) <= MAX_PATH_CHARS:
                found[path] = None
                if len(found) == MAX_NAMED:
                    return tuple(found)
    return tuple(found)


def named_phrase(
    frames: Sequence[str], named: Sequence[str], limit: int, frames_lead: str = "at "
) -> str:
    """Where a traceback went (``at a.py line 3, b.py line 9``) and what else an output
    names (``names src/a.py, src/b.py``), whole items only, within ``limit`` characters;
    "" for nothing (pure). ``frames_lead`` leads the frames."""
    phrase = ""
    for lead, items in ((frames_lead, frames), ("names ", named)):
        shown = ""
        for item in items:
            longer = f"{shown}, {item}" if shown else lead + item
            if len(phrase) + len(longer) + 2 > limit:
                break
            shown = longer
        if shown:
            phrase = f"{phrase}; {shown}" if phrase else shown
    return phrase


def output_listing(output: str) -> str:
    """``output`` when it shows a file (numbered lines at its start, or definitions in
    its lead), else ""."""
    if _NUMBERED.search(output, 0, LISTING_LEAD_CHARS):
        return output
    lead = output[:DEFINITIONS_SCAN_CHARS]
    return output if any(word in lead for word in _DEFINITION_WORDS) else ""


@functools.lru_cache(maxsize=64)
def definitions(output: str, limit: int = MAX_DEFINITIONS) -> tuple[str, ...]:
    """The names whose definition a file shown (numbered or not) holds at the start of a
    line, in order, at most ``limit`` (pure; remembered for the last few outputs, which a
    call's brief, full and named lines and its placeholder all ask about)."""
    found: list[str] = []
    output = output[:DEFINITIONS_SCAN_CHARS]
    if not any(word in output for word in _DEFINITION_WORDS):
        return ()
    for match in _DEFINITION.finditer(output):
        start = output.rfind("\n", 0, match.start()) + 1
        if LINE_NUMBER.fullmatch(output, start, match.start()) and match["name"] not in found:
            found.append(match["name"])
            if len(found) == limit:
                break
    return tuple(found)
