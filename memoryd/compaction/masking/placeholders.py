"""What a masked tool output's placeholder says (pure; docs/design.md#masking): the call
with its key argument and outcome, its first error line in its tool's own words, at most
a few ``line N``, its size, and the ``memoryd expand`` that prints the original.
:mod:`memoryd.compaction.masking.decide` decides which outputs get one."""

from __future__ import annotations

import re
from dataclasses import replace

from memoryd.tokens import estimate_text_tokens
from memoryd.transcript.call_lines import call_line
from memoryd.transcript.outcomes import FAILURE_NOTE, PLACEHOLDER_LEAD
from memoryd.transcript.output_places import definitions, named_paths
from memoryd.transcript.toolcalls import ToolCall, outcome_of

MAX_LINE_REFERENCES = 3
"""``line N`` references a placeholder keeps: the last ones, nearest where it failed."""
MAX_LISTING_PATHS = 3
"""Paths a placeholder names of a file shown (the digest names none: its definitions)."""
OUTLINE_NAMES = 24
"""Names a placeholder lists of what a file shown defines: its outline, which tells the
agent whether to read it again."""
_LINE_REFERENCE = re.compile(r"\bline \d+\b")


def line_references(output: str) -> list[str]:
    """The last :data:`MAX_LINE_REFERENCES` distinct ``line N`` an output mentions, in
    their order (pure): where an error or a search pointed."""
    found = list(dict.fromkeys(m.group() for m in _LINE_REFERENCE.finditer(output)))
    return found[-MAX_LINE_REFERENCES:]


def placeholder_text(call: ToolCall | None, output: str, failed: bool, message_id: str) -> str:
    """What a masked output says (pure): the call with its key argument and outcome (exit
    status, first error, where it was raised, the files it names); when it failed, its
    first error line in its tool's own words (``failure: …``, what
    :func:`memoryd.transcript.outcomes.read_failure` reads back); at most
    :data:`MAX_LINE_REFERENCES` ``line N``; the output's size in tokens, and the command
    that prints the original."""
    notes: list[str] = []
    failure: str | None = "error flag" if failed else None
    if call is not None:
        outcome = outcome_of(output, failed, call.command is not None, call.command)
        # The frames it names share the placeholder's few ``line N`` with its references.
        frames = outcome.frames[: MAX_LINE_REFERENCES - 1]
        # A file shown is told by its outline below, not by the call line's first few names.
        told = None if outcome.listing else replace(outcome, frames=frames)
        digest = call_line([replace(call, outcome=told)], named=True)
        if outcome.listing:
            # A file shown: its outline (what it defines), and the paths it names (its
            # own among them).
            defined = definitions(outcome.listing, OUTLINE_NAMES)
            named = [p for p in named_paths(output)[:MAX_LISTING_PATHS] if p not in digest]
            notes += ["defines " + ", ".join(defined)] if defined else []
            notes += ["names " + ", ".join(named)] if named else []
        if outcome.failed:
            status = f"exit {outcome.status}" if outcome.status else None
            failure = outcome.failure or outcome.error_line or status or failure
    else:
        digest = "a tool" + (" (error)" if failed else "")
    if failure is not None:
        notes.append(FAILURE_NOTE.removeprefix("; ") + failure)
    room = MAX_LINE_REFERENCES - len(_LINE_REFERENCE.findall(digest))
    references = [ref for ref in line_references(output) if ref not in digest]
    references = references[len(references) - room :] if room > 0 else []
    notes += [", ".join(references)] if references else []
    if notes:
        digest += "; " + "; ".join(notes)
    size = estimate_text_tokens(output)
    return (
        f"{PLACEHOLDER_LEAD}{digest} — {size:,} tokens; "
        f"the original: memoryd expand WORKSPACE {message_id}]"
    )
