"""A masking takes only the old outputs it needs, those that lose the fewest details for
the tokens they free first (memoryd/compaction/masking/choice.py, the aim in
memoryd/compaction/strategies/least_loss.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import SettingsFactory, make_message
from split_checks import lines_of

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.compaction.masking.choice import choose, details, message_details, message_text
from memoryd.compaction.masking.decide import plan_masking
from memoryd.compaction.masking.placeholders import placeholder_text
from memoryd.compaction.masking.rules import input_placeholder
from memoryd.compaction.strategies.least_loss import masking_aim, summary_aim
from memoryd.receipts.records import read_receipts
from memoryd.transcript.outcomes import Failure, read_failure
from memoryd.transcript.toolcalls import tool_use_call
from memoryd.workspace import Workspace

TASK = "Fix the rounding of invoice totals in the ledger module; keep the public API."
# A real run's output, verbatim: SWE-agent/mini-swe-agent (MIT), commit 3c7d1d7f8fb8,
# output/deepseek_bench1/django__django-10914/django__django-10914.traj.json, message 48
# (`python -m django test file_storage.tests.FileStoragePermissions`).
DJANGO_TRACEBACK = (
    "<returncode>1</returncode>\n"
    "<output>\n"
    "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
    '  File "/testbed/django/__main__.py", line 9, in <module>\n'
    "    management.execute_from_command_line()\n"
    '  File "/testbed/django/core/management/__init__.py", line 381, in execute_from_command_line\n'
    "    utility.execute()\n"
    '  File "/testbed/django/core/management/__init__.py", line 375, in execute\n'
    "    self.fetch_command(subcommand).run_from_argv(self.argv)\n"
    '  File "/testbed/django/core/management/commands/test.py", line 23, in run_from_argv\n'
    "    super().run_from_argv(argv)\n"
    '  File "/testbed/django/core/management/base.py", line 315, in run_from_argv\n'
    "    parser = self.create_parser(argv[0], argv[1])\n"
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/testbed/django/core/management/base.py", line 289, in create_parser\n'
    "    self.add_arguments(parser)\n"
    '  File "/testbed/django/core/management/commands/test.py", line 44, in add_arguments\n'
    "    test_runner_class = get_runner(settings, self.test_runner)\n"
    "                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/testbed/django/test/utils.py", line 301, in get_runner\n'
    "    test_runner_class = test_runner_class or settings.TEST_RUNNER\n"
    "                                             ^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/testbed/django/conf/__init__.py", line 76, in __getattr__\n'
    "    self._setup(name)\n"
    '  File "/testbed/django/conf/__init__.py", line 63, in _setup\n'
    "    self._wrapped = Settings(settings_module)\n"
    "                    ^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/testbed/django/conf/__init__.py", line 159, in __init__\n'
    '    raise ImproperlyConfigured("The SECRET_KEY setting must not be empty.")\n'
    "django.core.exceptions.ImproperlyConfigured: The SECRET_KEY setting must not be empty.\n"
    "</output>"
)
"""A real traceback: every frame a path and a ``line N`` no other line holds."""


def listing(name: str, lines: int) -> str:
    """A file shown with ``cat -n``: long, one definition, nothing else a reader notes."""
    body = "".join(f"{n:6}\t    total = total + row.amount  # running sum\n" for n in range(lines))
    return f"{'':6}\tdef {name}(rows):\n" + body


def call(index: int, call_id: str, command: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": command}}
    return make_message(index, "assistant", [{"type": "text", "text": "Next."}, block])


def result(index: int, call_id: str, output: str) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": output}
    return make_message(index, "user", [block])


def loop(outputs: list[tuple[str, str]], recent: int = 3) -> list[dict[str, Any]]:
    """The task, a call and its result per (command, output), then ``recent`` small ones."""
    messages = [make_message(0, "user", TASK)]
    tail = [(f"ls src/pkg{n}", "a.py\nb.py") for n in range(recent)]
    for n, (command, output) in enumerate([*outputs, *tail]):
        messages.append(call(len(messages), f"c{n}", command))
        messages.append(result(len(messages), f"c{n}", output))
    return messages


def test_details_are_what_a_reader_notes() -> None:
    text = (
        "File \"/srv/app/ledger.py\", line 41, in total\nKeyError: 'id'\n"
        "def reconcile_batch(rows):\nclass LedgerEntry:\nsee `round_half_even` here"
    )
    assert details(text) == {
        "/srv/app/ledger.py", "line 41", "KeyError", "reconcile_batch", "LedgerEntry",
        "round_half_even",
    }  # fmt: skip
    assert details("all 60 tests passed") == set()
    # Each kind alone: the substring that lets its expression run is its own.
    assert details("raised QuotaExceededException twice") == {"QuotaExceededException"}
    assert details("class LedgerEntry:\n    pass") == {"LedgerEntry"}
    assert details("export function renderTable(rows) {") == {"renderTable"}
    assert details("def reconcile_batch(rows):") == {"reconcile_batch"}
    assert details("see line 41") == {"line 41"}
    assert details("open src/app/ledger.py now") == {"src/app/ledger.py"}


def test_a_messages_details_come_from_every_string_but_media() -> None:
    """Text blocks, a call's nested input, a result's blocks; each string on its own line
    (a path at the end of one is not glued to the next); an image's data is not read."""
    png = {"type": "base64", "media_type": "image/png", "data": "iVBOR/w0KGgo.png"}
    message = make_message(1, "user", [
        {"type": "text", "text": "see src/app/ledger.py"},
        {"type": "text", "text": "line 41 raised KeyError"},
        {"type": "tool_use", "id": "t", "name": "Edit",
         "input": {"edits": [{"file_path": "src/app/rates.py", "new": "def round_half(x):"}]}},
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "class LedgerEntry:"}, {"type": "image", "source": png}]},
        {"type": "document", "source": {"type": "text", "data": "docs/spec/ledger.md"}},
    ])  # fmt: skip
    assert message_details(message) == {
        "src/app/ledger.py", "line 41", "KeyError", "src/app/rates.py", "round_half",
        "LedgerEntry",
    }  # fmt: skip
    assert message_details(None) == set() and message_text(None) == ""
    text = message_text(message).splitlines()
    assert "see src/app/ledger.py" in text and "line 41 raised KeyError" in text


def test_equal_losses_go_to_the_output_that_frees_more() -> None:
    """Each of two logs would lose one quoted name (a placeholder names none); the longer
    frees more for it, so it goes first though it is the newer."""
    short = "loaded `rate_table_a`\n" + "ok\n" * 400
    long = "loaded `rate_table_b`\n" + "ok\n" * 1600
    messages = loop([("tail a.log", short), ("tail b.log", long)])
    lines = lines_of(messages)
    every = plan_masking(lines, 3, frozenset({0}))
    assert [m.original.index for m in every.masked] == [2, 4]
    assert every.masked[1].freed > 2 * every.masked[0].freed
    assert [m.original.index for m in choose(every.masked, lines, 1)] == [4]


def test_a_listing_whose_placeholder_keeps_its_names_loses_nothing() -> None:
    """What the placeholder still says is not lost: a listing of named definitions and a
    plain log lose nothing alike, so the older goes first."""
    plain = "".join(f"{n:6}\t    total = total + row.amount\n" for n in range(300))
    messages = loop([("cat -n src/ledger.py", listing("sum_rows", 300)), ("tail build.log", plain)])
    lines = lines_of(messages)
    every = plan_masking(lines, 3, frozenset({0}))
    assert [m.original.index for m in every.masked] == [2, 4]
    assert [m.original.index for m in choose(every.masked, lines, 1)] == [2]


def test_a_long_listing_goes_before_a_short_traceback() -> None:
    """The listing frees far more and loses one name its placeholder keeps; the traceback
    would lose every frame: only the listing is masked when it is enough."""
    messages = loop(
        [("python -m pytest", DJANGO_TRACEBACK), ("cat -n src/ledger.py", listing("sum_rows", 400))]
    )
    lines = lines_of(messages)
    every = plan_masking(lines, 3, frozenset({0}))
    assert [m.original.index for m in every.masked] == [2, 4]
    listing_line = every.masked[1]
    chosen = choose(every.masked, lines, listing_line.freed)
    assert [m.original.index for m in chosen] == [4]
    assert details(DJANGO_TRACEBACK), "the fixture names frames"


def test_equal_losses_go_oldest_first() -> None:
    messages = loop(
        [("cat -n a.py", listing("alpha", 300)), ("cat -n b.py", listing("alpha", 300))]
    )
    lines = lines_of(messages)
    every = plan_masking(lines, 3, frozenset({0}))
    assert [m.original.index for m in every.masked] == [2, 4]
    assert every.masked[0].freed == every.masked[1].freed
    chosen = choose(every.masked, lines, 1)
    assert [m.original.index for m in chosen] == [2]


def test_details_a_kept_line_holds_cost_nothing() -> None:
    """Two tracebacks alike in size: the one whose frames the agent quoted later (a line
    that stays) is masked first, though it is the newer."""
    first = DJANGO_TRACEBACK.replace("line ", "line 9")
    second = DJANGO_TRACEBACK
    messages = loop([("pytest -x", first), ("pytest -x", second)])
    # The quote comes before the newest outputs, which stay too and hold nothing of it.
    messages.insert(5, make_message(5, "assistant", f"Noted:\n{second}"))
    lines = lines_of(messages)
    every = plan_masking(lines, 3, frozenset({0}))
    assert [m.original.index for m in every.masked] == [2, 4]
    chosen = choose(every.masked, lines, 1)
    assert [m.original.index for m in chosen] == [4]


def test_nothing_needed_takes_none_and_too_much_takes_all() -> None:
    messages = loop([("cat -n a.py", listing("alpha", 300)), ("pytest", DJANGO_TRACEBACK)])
    lines = lines_of(messages)
    every = plan_masking(lines, 3, frozenset({0}))
    assert choose(every.masked, lines, 0) == ()
    assert choose(every.masked, lines, -5) == ()
    assert choose(every.masked, lines, every.freed_tokens) == every.masked
    assert choose(every.masked, lines, every.freed_tokens + 1) == every.masked
    assert len(choose(every.masked, lines, every.freed_tokens - 1)) == 2


@pytest.mark.parametrize(
    ("target", "trigger", "aim"),
    [
        (0.6, 0.8, 0.55),
        (0.6, 0.9, 0.55),
        (0.5, 0.8, 0.45),
        (0.7, 0.7, 0.65),
        (0.9, 0.8, 0.75),
        (0.1, 0.8, 0.05),
    ],
)
def test_the_masking_aims_a_margin_below_the_target(
    target: float, trigger: float, aim: float
) -> None:
    assert masking_aim(target, trigger) == pytest.approx(aim)
    assert summary_aim(target, trigger) <= masking_aim(target, trigger) <= target


def test_a_job_masks_only_what_reaches_the_aim_and_keeps_the_traceback(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """At 95% of the budget, masking every old output would end near 0.2: the job masks
    the long listings, keeps the traceback verbatim, says what it aimed at, and every
    original is in the archive."""
    outputs = [("python -m pytest", DJANGO_TRACEBACK)]
    outputs += [(f"cat -n src/m{n}.py", listing(f"fn{n}", 400)) for n in range(6)]
    messages = loop(outputs)
    data = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "conversation.jsonl").write_bytes(data)
    tokens = sum(x.tokens for x in lines_of(messages))
    config = make_settings(
        keep_first=1,
        token_limit=int(tokens / 0.95),
        **{"masking.enabled": True, "summarizer.backend": "extractive"},
    )
    done = run_job(JobRequest(folder, config, reason="trigger"))
    assert done.outcome == "completed" and done.summarized_count == 0
    live = (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)
    original = data.splitlines(keepends=True)
    assert original[2] in live, "the traceback stays verbatim"
    masked = [x for x in live if b'"isMasked"' in x]
    assert 0 < len(masked) < len(outputs)
    usage = done.tokens_after / config.token_limit
    assert usage <= config.masking.target
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.why is not None and receipt.why.startswith(f"masked {len(masked)} to reach 0.55")
    archive = Workspace(folder).archive_dir
    archived = [x for f in sorted(archive.glob("*.jsonl")) for x in f.read_bytes().splitlines(True)]
    assert sorted(archived) == sorted(x for x in original if x not in live)


def test_a_tracebacks_placeholder_says_the_exception_that_ended_it() -> None:
    """The first error line of a Python traceback is its last: the header only says one
    follows (and ``ImproperlyConfigured`` ends in neither Error nor Exception)."""
    run = tool_use_call(1, call(1, "c", "python -m django test file_storage")["content"][1])
    text = placeholder_text(run, DJANGO_TRACEBACK, False, "m-48")
    failure = (
        "django.core.exceptions.ImproperlyConfigured: The SECRET_KEY setting must not be empty."
    )
    assert f"failure: {failure}" in text
    assert "Traceback (most recent call last)" not in text
    assert read_failure(DJANGO_TRACEBACK) == Failure("traceback", failure)
    assert len(re.findall(r"\bline \d+\b", text)) <= 3


def test_a_file_shown_keeps_its_outline_once() -> None:
    names = [f"test_case_{n}" for n in range(30)]
    shown = "".join(
        f"{k * 3 + 1:6}\tdef {name}(self):\n{k * 3 + 2:6}\t    pass\n"
        for k, name in enumerate(names)
    )
    view = tool_use_call(1, call(1, "c", "cat -n tests/test_cases.py")["content"][1])
    text = placeholder_text(view, shown * 3, False, "m")
    assert f"defines {', '.join(names[:24])} — " in text
    assert text.count("test_case_0") == 1 and "test_case_24" not in text


def test_a_masked_input_names_what_its_code_defines_and_the_paths_it_names() -> None:
    script = "cd /testbed && cat > test_fix.py << 'EOF'\nimport sys\n\nclass MockModel:\n"
    script += "    pass\n\nclass MockMapping:\n    pass\n\n"
    script += "def check(path='astropy/modeling/separable.py'):\n"
    script += "    return path\n" * 200 + "EOF\npython3 test_fix.py"
    text = input_placeholder("command", script, "m-39")
    assert "; defines MockModel, MockMapping, check; names astropy/modeling/separable.py;" in text
    assert text.endswith("the original: memoryd expand WORKSPACE m-39]")
