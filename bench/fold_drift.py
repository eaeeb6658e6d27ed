"""Fold drift: what an agent needs is still in the head after the 50th fold.

Generated tool loops and interactive sessions (``bench/fold_sessions.py``) are folded 50
times each, a job after every round, under an 8,000-token budget and the default
1,024-token summary cap: narrative and rolling with the offline summarizer, and narrative
through the strict fake Anthropic server (tests/fakes/fake_anthropic.py) with a scripted LLM
that drops every item of the previous summary that is not routine, also when asked to
repair. With ``--public DIR`` each public transcript there (see
``bench/public_transcripts.py``) is replayed message by message under a small budget
(an eighth of its tokens, 3,000 at least) and a 400-token summary cap, a job whenever
usage passes the trigger. Everything runs twice in the same invocation: with this code
and with the code before (``--before DIR``, a checkout).

Columns, for the head after the last fold:

- **kept**: of the items of kind task, failure, decision and change that the first fold
  summarized (read by this code's offline summarizer from the messages of the first
  archive file), the share the head still holds: the task line; a failure as its
  command and its error on one line; a decision or change as 60% of its words on one line.
  Target >= 0.95.
- For the **runner** sessions (``bench/fold_sessions.py``: each first round holds a
  failing run phrased as one runner prints it, for pytest, unittest, jest, vitest, mocha,
  go test, cargo test, rspec, tsc, gcc, rustc, make, npm, a shell's ``command not
  found``, a Python traceback, ``<returncode>``, ``exit code`` and ``Exit:``, with no
  error flag; a decision; and a shell edit in each form, ``sed -i``, ``perl -pi``,
  ``patch``, ``apply_patch``, ``git apply``, ``git mv``, ``git rm``, ``>``, ``>>``,
  ``tee``, a heredoc into a file, ``mv``, ``cp``, ``rm``), **kept** is the share of those
  planted items the last head holds as an item of their kind naming the command (a
  failure with a word of its output on that line), and the forms lost are listed.
- For the **real calls** sessions, the same with the real failing runs and edits of
  ``tests/fakes/real_outputs.py`` (public agent transcripts, and runners' output pasted in
  public issues: pytest, unittest, jest, vitest, mocha, go test, cargo test, rspec, tsc,
  gcc, make, bun test, ExUnit, eslint, esbuild, npm, …; ``sed -i``, ``patch``,
  ``git apply``, ``apply_patch``, ``git rm``, ``mv``, ``cp``, ``rm``, a heredoc, …),
  six or seven to a session; a failure's word is the first word of the line this code
  reads as its failure.
- **failure line**: the generated sessions' first failure: the failing test's name and
  its error (``test_reconcile_batch``, ``FooBarTimeoutError``) on one line of the head.
- **max head**: the largest head of any fold, in tokens (cap 1,024; 400 for the public
  transcripts).
- **CPU / job**: the median CPU of a job (offline summarizer only), and this code's
  over the code before's.

    python bench/fold_drift.py --before DIR [--public DIR] [--folds 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common as common
from fake_anthropic import FakeAnthropic, Reply
from fold_sessions import SUMMARY_TOKENS, scripted_llm

from memoryd.summary.extractive import new_items
from memoryd.summary.folding import missing_items
from memoryd.summary.items import HeadItem, item_key, parse_head
from memoryd.tokens import estimate_text_tokens
from memoryd.transcript.outcomes import read_failure
from memoryd.transcript.toolcalls import command_label, label_key

KINDS = ("failure", "decision", "change")
FAILURE = ("test_reconcile_batch", "FooBarTimeoutError")
_ERROR_WORDS = ("Error", "Exception", "FAILED", "E501", "exit ")


def run_code(code: Path, out: Path, scratch: Path, args: argparse.Namespace, url: str) -> Any:
    """Fold every session with the memoryd of ``code``; what the worker wrote."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(common.BENCH)])}
    command = [sys.executable, str(common.BENCH / "fold_sessions.py"), str(out)]
    command += ["--folds", str(args.folds), "--scratch", str(scratch), "--fake-url", url]
    if args.public is not None:
        command += ["--public", str(args.public)]
    subprocess.run(command, env=env, check=True, cwd=code)
    return json.loads(out.read_text(encoding="utf-8"))


def truth(first_round: list[dict[str, Any]], first_head: str) -> list[HeadItem]:
    """The task and the failures, decisions and changes the first fold summarized."""
    messages = [m for m in first_round if not m.get("isSummary")]
    _, items = new_items(messages, None, "narrative")
    task = parse_head(first_head).task
    found = [HeadItem("task", task)] if task else []
    return found + [i for i in items if i.kind in KINDS]


def held(item: HeadItem, head: str) -> bool:
    """Whether ``head`` holds ``item`` (see the module's docstring)."""
    lines = head.splitlines()
    if item.kind == "task":
        return any(item.text[:40] in line and "Task:" in line for line in lines)
    if item.kind == "failure":
        key = item_key(item.text)
        error = next((w for w in item.text.split() if any(e in w for e in _ERROR_WORDS)), "")
        return any(key in line.casefold() and error in line for line in lines)
    return not missing_items([item], parse_head(head).items)


def held_expected(expected: dict[str, str], head: str) -> bool:
    """Whether ``head`` holds an item a runner session planted (see the module's
    docstring): a failure or a change as an item of its kind naming its command (a
    failure with the word of its output), a decision as :func:`held` holds one."""
    items = parse_head(head).items
    if expected["kind"] == "decision":
        return not missing_items([HeadItem("decision", expected["word"])], items)
    label = label_key(command_label(expected["command"]))
    word = expected["word"] or _output_word(expected.get("output", ""), expected["command"])
    return any(
        item.kind == expected["kind"]
        and label in item.text.casefold()
        and word.casefold() in item.text.casefold()
        for item in items
    )


def _output_word(output: str, command: str) -> str:
    """A word of the line that says a real run failed (read by this code), which its
    failure item must hold: the first with a letter and three characters or more."""
    failure = read_failure(output, command) if output else None
    if failure is None:
        return ""
    words = [w for w in failure.line.split() if len(w) >= 3 and any(c.isalpha() for c in w)]
    return words[0] if words else ""


def score(run: dict[str, Any]) -> dict[str, Any]:
    heads: list[str] = run["heads"]
    if not heads:
        return {"folds": 0}
    if "expected" in run:
        planted: list[dict[str, str]] = run["expected"]
        missed = [e["form"] for e in planted if not held_expected(e, heads[-1])]
        return {
            "folds": len(heads),
            "items": len(planted),
            "kept": round(1 - len(missed) / len(planted), 3),
            "missed": missed,
            "failure_line": None,
            "max_head": max(estimate_text_tokens(h) for h in heads),
            "cpu_ms": round(statistics.median(run["cpu"]) * 1000, 2) if run["cpu"] else None,
        }
    items = truth(run["first_round"], heads[0])
    kept = sum(held(item, heads[-1]) for item in items)
    generated = "public" not in run.get("name", "")
    one_line = any(all(w in line for w in FAILURE) for line in heads[-1].splitlines())
    return {
        "folds": len(heads),
        "items": len(items),
        "kept": round(kept / len(items), 3) if items else None,
        "failure_line": one_line if generated else None,
        "max_head": max(estimate_text_tokens(h) for h in heads),
        "cpu_ms": round(statistics.median(run["cpu"]) * 1000, 2) if run["cpu"] else None,
    }


def render(report: dict[str, Any]) -> str:
    rows = []
    for name, pair in report["runs"].items():
        this, before = pair["this"], pair["before"]
        ratio = (
            f"{this['cpu_ms'] / before['cpu_ms']:.2f}x"
            if "LLM" not in name and this.get("cpu_ms") and before.get("cpu_ms")
            else "—"
        )
        rows.append(
            [
                name,
                f"{this['folds']} / {before['folds']}",
                this.get("items"),
                f"{this.get('kept')} / {before.get('kept')}",
                f"{this.get('failure_line')} / {before.get('failure_line')}",
                f"{this.get('max_head')} / {before.get('max_head')}",
                f"{this.get('cpu_ms')} / {before.get('cpu_ms')} ms ({ratio})",
            ]
        )
    totals: dict[str, float] = {}
    runs = report["runs"].values()
    for label in ("this", "before"):
        scored = [pair[label] for pair in runs if pair[label].get("items")]
        count = sum(s["items"] for s in scored)
        held_items = sum(s["kept"] * s["items"] for s in scored)
        totals[label] = round(held_items / count, 3) if count else 0.0
    count = sum(pair["this"].get("items") or 0 for pair in runs)
    rows.append(["all", "", count, f"{totals['this']} / {totals['before']}", "", "", ""])
    headers = ["session", "folds", "first-round items", "kept", "failure line", "max head"]
    text = common.table([*headers, "CPU / job"], rows)
    for label in ("this", "before"):
        missed = sorted({form for pair in runs for form in pair[label].get("missed", ())})
        text += f"\nrunner and real-call sessions, {label}: lost " + (
            ", ".join(missed) if missed else "nothing"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the code before")
    parser.add_argument("--public", type=Path, help="a folder of public transcripts")
    parser.add_argument("--folds", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    fake = FakeAnthropic().start()
    fake.set_default(Reply.ok(scripted_llm))
    report: dict[str, Any] = {"machine": common.machine(), "cap": SUMMARY_TOKENS, "runs": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="fold-drift-") as tmp:
            found = {}
            for label, code in (("this", common.REPO), ("before", args.before.resolve())):
                scratch = Path(tmp) / label
                found[label] = run_code(
                    code, Path(tmp) / f"{label}.json", scratch, args, fake.base_url
                )
    finally:
        fake.stop()
    for name in found["this"]:
        report["runs"][name] = {
            label: score({**found[label].get(name, {"heads": [], "cpu": []}), "name": name})
            for label in ("this", "before")
        }
    common.save("fold_drift", report)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
