"""The questions of bench/recall_quality.py: what an agent asks recall about a generated
conversation whose beginning was summarized, each with the messages that answer it.

Kinds:

- ``natural``: a question in a model's words about one message, phrased the way a model
  asks (question words, other inflections, words the message does not hold: "what
  caused the bug in parse_window" for "Fixed. The cause was the early `return` in
  `parse_window`."); identifiers by their parts where a person would say them so ("the
  chunk corrupt error", "the cobalt token module").
- ``identifier``: a function, class, exception or test name, exactly as it is written.
- ``path``: a file path, as the transcript writes it.
- ``error``: an error line pasted as it was printed (the exception and its message).

A question's answers are every summarized message that holds what it asks about.
Standard library only; deterministic for a transcript.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from agent_transcripts import Transcript, message_text, occurs

KINDS = ("natural", "identifier", "path", "error")


@dataclass(frozen=True)
class Question:
    """One question, its kind, and the ids of the summarized messages that answer it."""

    kind: str
    text: str
    answers: frozenset[str]


def words(identifier: str) -> str:
    """How a person says an identifier: ``cobalt_token`` → "cobalt token",
    ``ChunkCorruptError`` → "chunk corrupt error"."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", identifier.replace("_", " "))
    return spaced.lower()


def module_words(path: str) -> str:
    """``src/pkg/cobalt_token.py`` → "cobalt token"."""
    return words(path.rsplit("/", 1)[-1].removesuffix(".py"))


Template = tuple[str, Callable[[re.Match[str]], list[tuple[str, str | tuple[str, ...]]]]]
"""A pattern a message's text may hold, and the (question, what an answer holds) pairs
made from a match (several texts: an answer holds them all)."""

NATURAL: tuple[Template, ...] = (
    (
        r"### (\w+) loses data on a partial (\w+)",
        lambda m: [
            (f"what was the original issue about {m[1]} losing data?", m[0]),
            (f"bug report: the last partial {m[2]} goes missing in {m[1]}", m[0]),
        ],
    ),
    (
        r"When the exporter runs with `(\w+)=(\d+)`",
        lambda m: [
            (f"why were downstream totals short with {words(m[1])} set to {m[2]}?", m[0]),
        ],
    ),
    (
        r"errors\.(\w+Error): (\w+) (\d+) of tenant (\w+) is stale",
        lambda m: [
            (f"which function raised the {words(m[1])} for {m[2]} {m[3]}?", m[0]),
            (f"what went stale for tenant {m[4]} with the {m[2]} {m[3]}", m[0]),
        ],
    ),
    (
        r"FAILED (\S+)::(test_\w+?)_(\d+) - AssertionError",
        lambda m: [(f"why did the {words(m[2])} {m[3]} test fail", f"{m[2]}_{m[3]}")],
    ),
    (
        r"make `(\w+)` log how many entries it skipped",
        lambda m: [(f"user wants {m[1]} to count the entries it skips in the log", m[0])],
    ),
    (
        r"add a test in tests/test_(\w+)\.py for a limit of 0",
        lambda m: [(f"which test should cover a zero limit in {words(m[1])}?", m[0])],
    ),
    (
        r"(\S+) still looks off to me\. Check the (\w+) handling",
        lambda m: [
            (f"the user thought {module_words(m[1])} looked wrong: how it handles {m[2]}", m[0])
        ],
    ),
    (
        r"rename the helper in (\S+) so it says what it does",
        lambda m: [(f"request to give the helper in {module_words(m[1])} a clearer name", m[0])],
    ),
    (
        r"run the whole suite and tell me what fails",
        lambda m: [("when was I asked to run the entire test suite?", m[0])],
    ),
    (
        r"Done\. `(\w+)` in (\S+) now keeps the partial entry",
        lambda m: [(f"did the fix to {m[1]} keep partial entries in the end?", m[0])],
    ),
    (
        r"I changed (\S+) and added a test\. Everything passes except one unrelated flaky",
        lambda m: [(f"which test was flaky after changing {module_words(m[1])}?", m[0])],
    ),
    (
        r"The cause was the early `return` in `(\w+)`",
        lambda m: [(f"what caused the bug in {m[1]}", m[0])],
    ),
    (
        r"ruff found 2 problems in (\S+)",
        lambda m: [(f"what problems did the lint hook find in {module_words(m[1])}", m[0])],
    ),
    (
        r"formatted (\S+) \(1 file reformatted\)",
        lambda m: [(f"when did a hook reformat {module_words(m[1])}?", m[0])],
    ),
    (
        r"The traceback ends in (\w+) at (line \d+) of (\S+), inside `(\w+)`",
        lambda m: [(f"where did the traceback from {m[4]} end, {m[2]}?", m[0])],
    ),
    (
        r"Do not modify the existing tests unless the task asks for it",
        lambda m: [("am I allowed to change the existing tests?", m[0])],
    ),
    (
        r"a `cd` or an exported variable does not carry over",
        lambda m: [("does an exported variable persist between commands", m[0])],
    ),
    (
        r"If a command produces a very long output, narrow it with head, tail, sed or grep",
        lambda m: [("what should I do when a command prints too much output?", m[0])],
    ),
    (
        r"Keep the public interface backwards compatible",
        lambda m: [("must the public API stay backward compatible", m[0])],
    ),
    (
        r"exactly one fenced block marked `bash`",
        lambda m: [("how many bash blocks may one reply contain?", m[0])],
    ),
    (
        r"When the fix is complete and the tests pass, print the diff",
        lambda m: [("how do I show my changes once the work is finished?", m[0])],
    ),
    (
        r"lint with `ruff check src tests`",
        lambda m: [("how do I lint the code in this project", m[0])],
    ),
    (
        r"The (\w+) format is documented in (\S+)\.",
        lambda m: [(f"where is the {m[1]} format documented?", m[0])],
    ),
    (
        r"no new dependencies without asking",
        lambda m: [("may I add a new dependency", m[0])],
    ),
    (
        r"I'll write a script that reproduces the issue",
        lambda m: [("did I write a reproduction script", m[0])],
    ),
    (
        r"diff --git a/(\S+) b/\S+\n(?:.*\n)*?\+    # keep the partial (\w+) after a flush",
        lambda m: [
            (
                f"the edit that keeps the partial {m[2]} after flushing in {module_words(m[1])}",
                (f"diff --git a/{m[1]}", f"# keep the partial {m[2]} after a flush"),
            )
        ],
    ),
)
ERROR_LINE = re.compile(r"errors\.(\w+Error: \w+ \d+ of tenant \w+ is stale)")
FAILED_LINE = re.compile(r"FAILED \S+::test_\w+ - AssertionError")


def questions(
    transcript: Transcript, archived: set[int], per_kind: dict[str, int], rng: random.Random
) -> list[Question]:
    """At most ``per_kind[kind]`` questions of each kind about the messages at ``archived``."""
    texts = {index: message_text(transcript.messages[index]) for index in archived}
    ids = {index: str(transcript.messages[index]["id"]) for index in archived}

    def holders(needles: str | tuple[str, ...]) -> frozenset[str]:
        every = (needles,) if isinstance(needles, str) else needles
        return frozenset(ids[i] for i, text in texts.items() if all(occurs(n, text) for n in every))

    found: dict[str, dict[str, Question]] = {kind: {} for kind in KINDS}
    for question, needle in _natural(texts):
        found["natural"].setdefault(question, Question("natural", question, holders(needle)))
    for fact in transcript.facts:
        kind = {"identifier": "identifier", "exception": "identifier", "path": "path"}.get(
            fact.kind
        )
        if kind and fact.index in archived:
            found[kind].setdefault(fact.text, Question(kind, fact.text, holders(fact.text)))
    for text in texts.values():
        for line in [*ERROR_LINE.findall(text), *FAILED_LINE.findall(text)]:
            found["error"].setdefault(line, Question("error", line, holders(line)))
    chosen: list[Question] = []
    for kind in KINDS:
        pool = sorted(found[kind].values(), key=lambda q: q.text)
        chosen += [q for q in rng.sample(pool, min(per_kind[kind], len(pool))) if q.answers]
    return chosen


def _natural(texts: dict[int, str]) -> Iterator[tuple[str, str | tuple[str, ...]]]:
    for pattern, make in NATURAL:
        compiled = re.compile(pattern)
        for text in texts.values():
            for match in compiled.finditer(text):
                yield from make(match)


def recall_at(ranked_ids: Sequence[str | None], answers: frozenset[str], k: int) -> bool:
    """True when one of the first ``k`` hits answers the question."""
    return any(ident in answers for ident in ranked_ids[:k])
