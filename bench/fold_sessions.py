"""The sessions ``bench/fold_drift.py`` folds, and the worker that folds them.

Run as a script, it folds every session with the memoryd found on ``PYTHONPATH`` (the
code under test, or the code before it) and writes what each fold left as JSON: the
messages the first fold summarized, each head, each job's CPU. It uses only what every
version has (``run_job``, ``load_settings``), so the code before can run it too.

    PYTHONPATH=CODE:bench:tests/fakes python bench/fold_sessions.py OUT.json [--folds 50]
        [--public DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests" / "fakes"))

from real_outputs import CHANGES, FAILURES, RealOutput  # noqa: E402

from memoryd.compaction.job.request import JobRequest  # noqa: E402
from memoryd.compaction.job.run import run_job  # noqa: E402
from memoryd.config.settings import load_settings  # noqa: E402

Message = dict[str, Any]
TOKEN_LIMIT = 8_000
"""The budget of the generated sessions: the issue's 60-turn loop ran under 8,000."""
SUMMARY_TOKENS = 1_024
PUBLIC_LIMIT = 3_000
PUBLIC_SUMMARY = 400
"""A public transcript's budget: an eighth of its tokens, 3,000 at least (room for a pinned
first turn of 500 to 1,200 tokens), so that it folds several times."""
TASK = "Fix the ledger: reconcile_batch times out on large batches."
_OUTPUT = "\n".join(f"tests/misc/test_line_{n}.py::test_case_{n} PASSED" for n in range(40))


class Session:
    """Messages with ids ``msg-0000`` on, built round by round (deterministic)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.calls = 0
        self.count = 0

    def add(self, role: str, content: object) -> None:
        self.count += 1
        index = self.count - 1
        self.messages.append(
            {
                "id": f"msg-{index:04d}",
                "role": role,
                "content": content,
                "timestamp": 1_700_000_000_000 + index * 1000,
            }
        )

    def call(self, say: str, name: str, arguments: dict[str, str], output: str) -> None:
        self.calls += 1
        use_id = f"toolu_{self.calls:04d}"
        use = {"type": "tool_use", "id": use_id, "name": name, "input": arguments}
        self.add("assistant", [{"type": "text", "text": say}, use])
        result = {"type": "tool_result", "tool_use_id": use_id, "content": output}
        self.add("user", [result])


def _round(session: Session, r: int, interactive: bool) -> None:
    """Round ``r`` of a session: the first holds a failing test run, a decision and an
    edit; later ones mostly passing runs and reads, now and then a lint failure fixed the
    round after, an edit, a decision."""
    if r == 0:
        session.add("user", f"<task>{TASK}</task>\nWork in the repository at /repo.")
        if interactive:
            session.add("assistant", "I'll start with the ledger tests.")
            session.add("user", "Please use pnpm instead of npm from now on.")
        failing = (
            "FAILED tests/pay/test_ledger.py::test_reconcile_batch - FooBarTimeoutError: "
            "query took 41.2s\n1 failed, 59 passed in 41.20s\nexit code 1"
        )
        session.call("Running the ledger tests.", "bash", {"command": "pytest tests/pay"}, failing)
        session.add(
            "assistant",
            "We decided to batch the reconcile queries instead of one query per row.",
        )
        session.call(
            "Editing the ledger.",
            "str_replace_editor",
            {"command": "str_replace", "path": "/repo/src/pay/ledger.py"},
            "The file /repo/src/pay/ledger.py has been edited.",
        )
        return
    if interactive:
        session.add("user", f"Now look at module {r}: does mod_{r} need the cache?")
    module = f"src/misc/mod_{r}.py"
    session.call(
        f"Checking module {r}.",
        "bash",
        {"command": f"pytest tests/misc/test_mod_{r}.py"},
        f"{_OUTPUT}\n{40 + r} passed in 1.{r % 10}s",
    )
    session.call("Reading it.", "str_replace_editor", {"command": "view", "path": module}, _OUTPUT)
    if r % 7 == 3:
        lint = f"{module}:3:80: E501 line too long (93 > 79 characters)\nexit code 1"
        session.call("Linting.", "bash", {"command": f"ruff check {module}"}, lint)
    if r % 7 == 4:
        earlier = f"src/misc/mod_{r - 1}.py"
        session.call("Linting again.", "bash", {"command": f"ruff check {earlier}"}, "All good")
    if r % 5 == 0:
        session.call(
            "Editing it.",
            "str_replace_editor",
            {"command": "str_replace", "path": f"/repo/{module}"},
            f"The file /repo/{module} has been edited.",
        )
    if r % 10 == 5:
        session.add("assistant", f"We decided to keep mod_{r} synchronous: the cache is local.")


RUNNER_FAILURES: tuple[tuple[str, str, str, str], ...] = (
    (
        "pytest",
        "pytest tests/pay",
        "FAILED tests/pay/test_ledger.py::test_reconcile_batch - FooBarTimeoutError: query "
        "took 41.2s\n1 failed, 59 passed in 41.20s",
        "test_reconcile_batch",
    ),
    (
        "unittest",
        "python -m unittest tests.test_rounding",
        "F.\n======================================================================\n"
        "FAIL: test_half_even (tests.test_rounding.RoundingTest)\n"
        "----------------------------------------------------------------------\n"
        "AssertionError: Decimal('0.13') != Decimal('0.12')\n\nRan 2 tests in 0.001s\n\n"
        "FAILED (failures=1)",
        "test_half_even",
    ),
    (
        "jest",
        "npx jest src/invoice",
        "FAIL src/invoice/vat.test.ts\n  \u25cf invoice \u203a applies VAT for EU customers\n"
        "    Expected: 121.5\n    Received: 120\nTests:       1 failed, 41 passed, 42 total",
        "vat.test.ts",
    ),
    (
        "vitest",
        "npx vitest run src/cart",
        " \u2713 src/cart/total.test.ts (3 tests) 4ms\n \u00d7 src/cart/discount.test.ts > "
        "discount > caps at 50%\n      Tests  1 failed | 3 passed (4)",
        "caps at 50%",
    ),
    (
        "mocha",
        "npx mocha test/ledger.spec.js",
        "  Ledger\n    \u2713 opens a period\n    1) closes a period\n\n  1 passing (12ms)\n"
        "  1 failing\n\n  1) Ledger\n       closes a period:\n     AssertionError: "
        "expected 3 to equal 4",
        "1 failing",
    ),
    (
        "go test",
        "go test ./ledger/...",
        "=== RUN   TestReconcileBatch\n--- FAIL: TestReconcileBatch (0.02s)\n    "
        "ledger_test.go:42: got 3 rows, want 4\nFAIL\nFAIL\texample.com/pay/ledger\t0.031s",
        "TestReconcileBatch",
    ),
    (
        "cargo test",
        "cargo test -p ledger",
        "running 3 tests\ntest tests::settles_batch ... FAILED\n\nfailures:\n\n"
        "---- tests::settles_batch stdout ----\nthread 'tests::settles_batch' panicked at "
        "src/lib.rs:42:9:\nassertion `left == right` failed\n\ntest result: FAILED. 2 passed; "
        "1 failed; 0 ignored",
        "tests::settles_batch",
    ),
    (
        "rspec",
        "bundle exec rspec spec/payout_spec.rb",
        "F..\n\nFailures:\n\n  1) Payout splits fees\n     Failure/Error: expect(fee).to "
        "eq(4)\n\nFinished in 0.02 seconds\n3 examples, 1 failure",
        "3 examples, 1 failure",
    ),
    (
        "tsc",
        "npx tsc --noEmit",
        "src/ledger/period.ts(42,7): error TS2322: Type 'string' is not assignable to type "
        "'number'.\n\nFound 1 error in src/ledger/period.ts:42",
        "TS2322",
    ),
    (
        "gcc",
        "gcc -c src/checksum.c",
        "src/checksum.c: In function 'crc_update':\nsrc/checksum.c:42:5: error: expected ';' "
        "before 'return'\n   42 |     return crc\n      |     ^~~~~~",
        "expected ';'",
    ),
    (
        "rustc",
        "cargo build -p settle",
        "   Compiling settle v0.3.0\nerror[E0308]: mismatched types\n  --> src/settle.rs:42:9",
        "E0308",
    ),
    (
        "make",
        "make -C native",
        "cc -o ledgerd main.o store.o\n/usr/bin/ld: store.o: undefined reference to "
        "'store_flush'\ncollect2: error: ld returned 1 exit status\nmake: *** "
        "[Makefile:9: ledgerd] Error 1",
        "ledgerd",
    ),
    (
        "npm",
        "npm run build",
        "> pay@1.4.0 build\n> node scripts/build.mjs\n\nnpm ERR! code ELIFECYCLE\nnpm ERR! errno 1",
        "ELIFECYCLE",
    ),
    ("shell", "ledgerctl verify --all", "bash: ledgerctl: command not found", "not found"),
    (
        "traceback",
        "python scripts/backfill.py",
        'Traceback (most recent call last):\n  File "scripts/backfill.py", line 12, in <module>\n'
        "    main()\nZeroDivisionError: division by zero",
        "ZeroDivisionError",
    ),
    (
        "returncode",
        "python scripts/check_totals.py",
        "<returncode>1</returncode>\n<output>\ntotals differ by 0.01 in period 2026-10\n</output>",
        "returncode",
    ),
    ("exit code", "./scripts/smoke.sh", "smoke: 3 of 4 endpoints up\nexit code 1", "exit"),
    (
        "Exit:",
        "./scripts/migrate.sh --dry-run",
        "migration 0042 would drop a column\nExit: 2",
        "exit",
    ),
)
"""A failing run as each runner prints it (no error flag, no exit line unless the form is
the exit line itself): the runner, the command, its output, and a word of the output the
head must keep on the command's line."""
EDIT_FORMS: tuple[tuple[str, str], ...] = (
    ("sed -i", "sed -i 's/timeout=30/timeout=120/' src/pay/ledger.py"),
    ("perl -pi", "perl -pi -e 's/RETRIES = 3/RETRIES = 5/' src/pay/settings.pl"),
    ("patch", "patch -p1 < fixes/ledger-rounding.diff"),
    ("apply_patch", "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: src/pay/fees.py\nEOF"),
    ("git apply", "git apply fixes/period-close.patch"),
    ("git mv", "git mv src/pay/old_ledger.py src/pay/ledger_v1.py"),
    ("git rm", "git rm src/pay/legacy_export.py"),
    ("redirect", "echo 'ROUNDING = \"half_even\"' > src/pay/rounding_conf.py"),
    ("append", "echo 'rounding: half_even' >> config/ledger.yaml"),
    ("tee", "printf '1.4.1\\n' | tee src/pay/VERSION"),
    ("heredoc", "cat > src/pay/batch_io.py <<'EOF'\nBATCH = 500\nEOF"),
    ("mv", "mv src/pay/tmp_recon.py src/pay/reconcile_io.py"),
    ("cp", "cp templates/ledger.toml config/ledger.toml"),
    ("rm", "rm src/pay/ledger_cache.py"),
)
"""A shell command in each edit form (all print nothing)."""
RUNNER_GROUPS = 3
"""The runners are spread over this many sessions, so that each first fold's failures,
decision and edits fit the summary cap with room to spare."""


def runner_round(session: Session, r: int, group: int) -> list[dict[str, str]]:
    """Round ``r`` of runner session ``group``: the first holds this group's failing runs,
    a decision and its edits; later ones are :func:`_round`'s. The items the first fold
    must keep (kind, label, word), for the first round."""
    if r > 0:
        _round(session, r, False)
        return []
    session.add("user", f"<task>{TASK}</task>\nWork in the repository at /repo.")
    expected = []
    for runner, command, output, word in RUNNER_FAILURES[group::RUNNER_GROUPS]:
        session.call(f"Running the {runner} check.", "bash", {"command": command}, output)
        expected.append({"kind": "failure", "form": runner, "command": command, "word": word})
    decision = f"We decided to settle batch group {group} in one transaction per period."
    session.add("assistant", decision)
    expected.append({"kind": "decision", "form": "decision", "command": "", "word": decision})
    for form, command in EDIT_FORMS[group::RUNNER_GROUPS]:
        session.call(f"Editing ({form}).", "bash", {"command": command}, "")
        expected.append({"kind": "change", "form": form, "command": command, "word": ""})
    return expected


def runner_session(
    group: int, rounds: int, expected: list[dict[str, str]]
) -> Iterator[list[Message]]:
    """The messages each fold finds appended, as :func:`generated`; ``expected`` is filled
    with the first round's items."""
    session = Session()
    for r in range(rounds):
        expected.extend(runner_round(session, r, group))
        if r + 1 >= FIRST_ROUNDS:
            yield session.messages
            session.messages = []


FIRST_ROUNDS = 8
"""Rounds before the first fold: it summarizes a first failure, a decision and edits."""

REAL_CALLS: tuple[RealOutput, ...] = (*FAILURES, *CHANGES)
"""The real failing runs and edits of ``tests/fakes/real_outputs.py`` (public agent transcripts,
and runners' output pasted in public issues), in their own words."""
REAL_GROUPS = 6
"""The real calls are spread over this many sessions (the first fold must fit the cap)."""


def real_call(session: Session, fixture: RealOutput) -> str:
    """Append ``fixture``'s call as its agent made it; the command a head names it by."""
    if "patch" in fixture.tool:
        session.call("Applying the patch.", fixture.tool, {"input": fixture.command}, "")
        return fixture.tool
    session.call("Running it.", "bash", {"command": fixture.command}, fixture.output)
    return fixture.command


def real_round(session: Session, r: int, group: int) -> list[dict[str, str]]:
    """Round ``r`` of real-call session ``group``: the first holds this group's real
    failing runs and edits; later ones are :func:`_round`'s. The items the first fold must
    keep; a failure's ``output`` gives the scorer the word to look for."""
    if r > 0:
        _round(session, r, False)
        return []
    session.add("user", f"<task>{TASK}</task>\nWork in the repository at /repo.")
    expected = []
    for fixture in REAL_CALLS[group::REAL_GROUPS]:
        command = real_call(session, fixture)
        expected.append(
            {
                "kind": fixture.expected,
                "form": fixture.name,
                "command": command,
                "word": "",
                "output": fixture.output if fixture.expected == "failure" else "",
            }
        )
    return expected


def real_session(
    group: int, rounds: int, expected: list[dict[str, str]]
) -> Iterator[list[Message]]:
    """As :func:`runner_session`, with the real calls of ``group``."""
    session = Session()
    for r in range(rounds):
        expected.extend(real_round(session, r, group))
        if r + 1 >= FIRST_ROUNDS:
            yield session.messages
            session.messages = []


def generated(interactive: bool, rounds: int) -> Iterator[list[Message]]:
    """The messages each fold finds appended: the first rounds, then one round."""
    session = Session()
    for r in range(rounds):
        _round(session, r, interactive)
        if r + 1 >= FIRST_ROUNDS:
            yield session.messages
            session.messages = []


_TAG = re.compile(r"<(previous_summary|transcript)>\n?(.*?)\n?</\1>", re.S)
_TURN = re.compile(r"^\[(user|assistant)(?: #([^\]\s]+))?\] ", re.M)


def scripted_llm(request: Mapping[str, Any]) -> str:
    """A summarizer that reports the new messages well and drops every item of the
    previous summary that is not routine (and does so again when asked to repair)."""
    text = "\n".join(
        str(block.get("text", "")) if isinstance(block, Mapping) else str(block)
        for message in request.get("messages", [])
        for block in (
            message["content"]
            if isinstance(message.get("content"), list)
            else [{"text": message.get("content", "")}]
        )
    )
    blocks = {name: body for name, body in _TAG.findall(text)}
    lines: list[str] = []
    previous = blocks.get("previous_summary", "")
    task = next((x for x in previous.splitlines() if "Task:" in x), f"Task: {TASK}")
    routine = [x for x in previous.split("Routine:\n", 1)[1:] for x in x.splitlines()]
    turns = _TURN.split(blocks.get("transcript", ""))[1:]
    command: tuple[str, str] | None = None
    failures, decisions, changes = [], [], []
    for role, source, body in zip(turns[0::3], turns[1::3], turns[2::3], strict=True):
        mark = f" (#{source})" if source else ""
        for line in body.splitlines():
            if line.startswith("tool_use bash: "):
                command = (line.removeprefix("tool_use bash: "), mark)
            elif line.startswith("tool_use str_replace_editor str_replace "):
                changes.append(f"- Edited {line.rsplit(' ', 1)[-1]}{mark}")
            elif "decided" in line and role == "assistant":
                decisions.append(f"- Assistant: {line.strip()}{mark}")
        if role == "user" and command is not None:
            error = next((x for x in body.splitlines() if "FAILED" in x or "E501" in x), None)
            if error is not None:
                failures.append(f"- Ran `{command[0]}` → exit 1, {error.strip()}{command[1]}")
            else:
                lines.append(f"- Ran `{command[0]}` → passed")
            command = None
    sections = [("Failures:", failures), ("Decisions:", decisions), ("Changes:", changes)]
    out = [task.removeprefix("- ")]
    for title, items in sections:
        if items:
            out += [title, *items]
    out += ["Routine:", *routine[-6:], *lines]
    return "\n".join(out)


def _index_threads() -> None:
    for thread in threading.enumerate():
        if thread.name == "memoryd-index":
            thread.join()


def fold_session(
    folder: Path,
    rounds: Iterator[list[Message]],
    overrides: Mapping[str, Any],
    env: Mapping[str, str],
    folds: int,
    due: Callable[[Path, int], bool],
) -> dict[str, Any]:
    """Append round after round, a job whenever ``due``, until ``folds`` jobs summarized
    (a job that only masked old tool outputs is not a fold, but its CPU counts)."""
    folder.mkdir(parents=True)
    conversation = folder / "conversation.jsonl"
    conversation.touch()
    settings = load_settings(overrides=dict(overrides), env={"XDG_CONFIG_HOME": str(folder)})
    limit = int(overrides["token_limit"])
    heads: list[str] = []
    cpu: list[float] = []
    first_round: list[Message] = []
    for messages in rounds:
        with conversation.open("a", encoding="utf-8") as out:
            for message in messages:
                out.write(json.dumps(message, ensure_ascii=False) + "\n")
        if not due(conversation, limit):
            continue
        _index_threads()
        started = time.process_time()
        result = run_job(JobRequest(folder, settings.settings, env=env, force=True))
        cpu.append(time.process_time() - started)
        _index_threads()
        if result.outcome != "completed":
            continue
        head = summary_of(conversation)
        if head is None:
            continue  # the job masked old outputs and summarized nothing: not a fold
        heads.append(head)
        if not first_round:
            first_round = archived(folder)
        if len(heads) >= folds:
            break
    return {"heads": heads, "cpu": cpu, "first_round": first_round}


def summary_of(conversation: Path) -> str | None:
    """The head of the conversation's summary (its text after the first paragraph), or
    None when it has none."""
    with conversation.open(encoding="utf-8") as lines:
        for _, line in zip(range(4), lines, strict=False):
            message = json.loads(line)
            if message.get("isSummary") is True:
                return str(message["content"]).split("\n\n", 1)[-1]
    return None


def archived(folder: Path) -> list[Message]:
    """Every message the archive holds, each once, in conversation order: a job that
    masks before it summarizes archives the masked originals and the summarized part in
    separate files."""
    found: dict[str, Message] = {}
    for archive in sorted((folder / ".memoryd" / "archive").glob("*.jsonl")):
        for line in archive.read_text(encoding="utf-8").splitlines():
            message = json.loads(line)
            found.setdefault(str(message.get("id")), message)
    return sorted(found.values(), key=lambda message: str(message.get("id")))


def always(_: Path, __: int) -> bool:
    return True


def over_trigger(conversation: Path, limit: int) -> bool:
    """Usage above 80% of ``limit``, counted as memoryd counts (characters / 4)."""
    return len(conversation.read_bytes()) / 4 > 0.8 * limit


def public_rounds(path: Path) -> Iterator[list[Message]]:
    """A public transcript's messages, one at a time, with ids where they have none."""
    from public_formats import convert

    _, messages = convert(path.read_text(encoding="utf-8"), path.name.split(".")[0])
    for index, message in enumerate(messages):
        message.setdefault("id", f"msg-{index:04d}")
        yield [message]


def _tokens(path: Path) -> int:
    return sum(len(json.dumps(m["content"])) // 4 for r in public_rounds(path) for m in r)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--folds", type=int, default=50)
    parser.add_argument("--public", type=Path)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--fake-url", default="")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    base = {"token_limit": TOKEN_LIMIT, "drain_seconds": 0, "keep_first": 1}
    base["summarizer.max_summary_tokens"] = SUMMARY_TOKENS
    for shape in ("tool loop", "interactive"):
        for strategy in ("narrative", "rolling"):
            name = f"{shape} / {strategy}"
            overrides = {**base, "strategy": strategy, "summarizer.backend": "extractive"}
            rounds = generated(shape == "interactive", args.folds * 3)
            folder = args.scratch / name.replace(" / ", "-").replace(" ", "-")
            results[name] = fold_session(folder, rounds, overrides, {}, args.folds, always)
    for group in range(RUNNER_GROUPS):
        for strategy in ("narrative", "rolling"):
            name = f"runners {group + 1} / {strategy}"
            overrides = {**base, "strategy": strategy, "summarizer.backend": "extractive"}
            expected: list[dict[str, str]] = []
            rounds = runner_session(group, args.folds * 3, expected)
            folder = args.scratch / f"runners-{group + 1}-{strategy}"
            results[name] = fold_session(folder, rounds, overrides, {}, args.folds, always)
            results[name]["expected"] = expected
    for group in range(REAL_GROUPS):
        for strategy in ("narrative", "rolling"):
            name = f"real calls {group + 1} / {strategy}"
            overrides = {**base, "strategy": strategy, "summarizer.backend": "extractive"}
            expected = []
            rounds = real_session(group, args.folds * 3, expected)
            folder = args.scratch / f"real-{group + 1}-{strategy}"
            results[name] = fold_session(folder, rounds, overrides, {}, args.folds, always)
            results[name]["expected"] = expected
    if args.fake_url:
        overrides = {**base, "strategy": "narrative", "summarizer.backend": "anthropic"}
        overrides["anthropic.base_url"] = args.fake_url
        overrides["anthropic.max_retries"] = 0
        env = {"ANTHROPIC_API_KEY": "sk-bench"}
        rounds = generated(False, args.folds * 3)
        folder = args.scratch / "llm-drops-items"
        results["tool loop / LLM dropping items"] = fold_session(
            folder, rounds, overrides, env, args.folds, always
        )
    if args.public is not None:
        for path in sorted(args.public.iterdir()):
            overrides = {**base, "strategy": "narrative", "summarizer.backend": "extractive"}
            overrides["token_limit"] = max(PUBLIC_LIMIT, _tokens(path) // 8)
            overrides["summarizer.max_summary_tokens"] = PUBLIC_SUMMARY
            folder = args.scratch / f"public-{path.name[:40]}"
            results[f"public {path.name[:40]}"] = fold_session(
                folder, public_rounds(path), overrides, {}, args.folds, over_trigger
            )
    args.out.write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
