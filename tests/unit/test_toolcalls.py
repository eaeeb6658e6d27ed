"""A tool call as one line: its label from the call, its outcome from the output (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from real_outputs import REAL_OUTPUTS

from memoryd.transcript.messages import shorten
from memoryd.transcript.output_places import MAX_NAMED
from memoryd.transcript.toolcalls import (
    MAX_FOUND_CHARS,
    command_label,
    error_names,
    fenced_commands,
    outcome_of,
    tool_use_call,
)


@pytest.mark.parametrize(
    ("name", "given", "label", "command", "edits"),
    [
        ("Bash", {"command": "cd /repo && pytest -x\necho done"}, "pytest -x", "pytest -x", False),
        ("Read", {"file_path": "src/app.py"}, "Read src/app.py", None, False),
        ("Edit", {"file_path": "a.py", "old_string": "x"}, "Edit a.py", None, True),
        ("Grep", {"pattern": "def load", "path": "src"}, "Grep def load", None, False),
        ("WebFetch", {"url": "https://x.io", "prompt": "?"}, "WebFetch https://x.io", None, False),
        ("editor", {"command": "view", "path": "/r/a.py"}, "editor view /r/a.py", None, False),
        ("ed", {"command": "str_replace", "path": "/a.py"}, "ed str_replace /a.py", None, True),
        ("TodoWrite", {"todos": [{"content": "x"}]}, "TodoWrite", None, False),
        ("mystery", {"n": 3}, "mystery", None, False),
    ],
)  # fmt: skip
def test_a_call_is_its_command_or_its_tool_and_key_argument(
    name: str, given: dict[str, Any], label: str, command: str | None, edits: bool
) -> None:
    call = tool_use_call(3, {"type": "tool_use", "id": "t", "name": name, "input": given})
    assert (call.label, call.command, call.edits, call.position) == (label, command, edits, 3)


def test_a_long_command_is_cut_at_a_word_with_an_ellipsis() -> None:
    label = command_label("$ python -m tool " + "--flag value " * 20)
    assert len(label) <= 100 and label.endswith("…") and label.startswith("python -m tool --flag")


def test_the_outcome_is_the_exit_status_and_the_exception_raised() -> None:
    output = (
        "Traceback (most recent call last):\n"
        '  File "app.py", line 3, in <module>\n'
        "    raise ValueError('bad')\n"
        "ModuleNotFoundError: No module named 'yaml'\n"
        "During handling, another:\n"
        "KeyError: 'k'\n"
        "Exit code: 1"
    )
    outcome = outcome_of(output)
    assert outcome.text() == "exit 1, ModuleNotFoundError: No module named 'yaml', also KeyError"
    assert outcome.places() == "at app.py line 3"
    assert outcome.failed


def test_a_test_run_shows_its_failing_assertion_and_tally() -> None:
    output = (
        "tests/test_a.py F.\n"
        "E       AssertionError: assert 1 == 2\n"
        "=========== 1 failed, 1 passed in 0.21s ===========\n"
    )
    outcome = outcome_of(output)
    assert outcome.text() == "AssertionError: assert 1 == 2, 1 failed, 1 passed in 0.21s"
    assert outcome.places() == "names tests/test_a.py"


def test_a_linter_line_is_the_error_line_and_its_code_an_error_name() -> None:
    output = "src/a.py:12:80: E501 Line too long (95 > 88)\nFound 1 error.\nexit status 1"
    assert outcome_of(output).text() == "exit 1, src/a.py:12:80: E501 Line too long (95 > 88)"
    assert error_names(output) == ["E501"]
    assert error_names("error[E0382]: borrow of moved value\nerror TS2345: bad") == [
        "E0382",
        "TS2345",
    ]
    assert error_names("The SHA256 of A100 is E501-free; raise ValueError") == []


def test_a_file_that_was_read_says_what_it_defines_or_the_error_of_the_tool() -> None:
    listing = "   1\tdef f():\n   2\t    raise ValueError('x')\n   3\terror = 1\n"
    shown = outcome_of(listing, shell=False)
    assert (shown.text(), shown.places()) == ("", "defines f")
    assert outcome_of("   1\tx = 1\n   2\terror = 1\n", shell=False).places() == ""
    assert outcome_of("File not found: a.py\nmore", True, shell=False).text() == (
        "File not found: a.py"
    )


def test_a_text_mode_command_is_the_shell_fence_that_ends_the_message() -> None:
    assert fenced_commands("I will look.\n\n```bash\nls -la src\n```") == ["ls -la src"]
    assert fenced_commands("Run it:\n```\nmake test\n```\n") == ["make test"]
    assert fenced_commands("```python\nprint(1)\n```") == []
    assert fenced_commands("Try `make`:\n```bash\nmake\n```\nthen tell me.") == []


def test_a_traceback_names_its_frames_nearest_the_raise_first() -> None:
    output = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/main.py", line 40, in main\n'
        "    run()\n"
        '  File "/srv/app/src/x.py", line 20, in run\n'
        "    raise ValueError('bad')\n"
        "ValueError: bad\n"
        "exit status 1"
    )
    outcome = outcome_of(output)
    assert outcome.text() == "exit 1, ValueError: bad"
    assert outcome.places() == "at /srv/app/src/x.py line 20, /srv/app/main.py line 40"


def test_a_search_names_the_paths_it_found_whole_within_the_limit() -> None:
    paths = [f"src/package/module_{n}/file_{n}.py" for n in range(12)]
    outcome = outcome_of("\n".join(f"{p}:3:import os" for p in paths))
    assert outcome.paths() == tuple(paths[:MAX_NAMED])
    said = outcome.places()
    assert said.startswith("names src/package/module_0/file_0.py, ")
    assert len(said) <= MAX_FOUND_CHARS
    assert all(item.strip() in paths for item in said.removeprefix("names ").split(","))


def test_another_tools_search_names_its_hits() -> None:
    outcome = outcome_of("Found 2 files\nsrc/a/b.ts\nsrc/c/d.tsx", shell=False)
    assert (outcome.text(), outcome.places()) == ("", "names src/a/b.ts, src/c/d.tsx")
    assert outcome.places("see src/a/b.ts") == "names src/c/d.tsx"


def test_a_long_path_is_never_cut_in_the_middle() -> None:
    path = "/home/user/projects/some-long-project-name/src/components/transcript/"
    path += "transcript_components.tsx"
    call = tool_use_call(0, {"type": "tool_use", "name": "Read", "input": {"file_path": path}})
    assert call.label == f"Read {path}"
    label = command_label("git add " + " ".join([path] * 3))
    assert label == f"git add {path}…"
    assert command_label("rm " + path * 3) == "rm…"


def test_a_shortened_text_never_ends_in_part_of_a_path() -> None:
    path = "_build/dev/lib/spotter/priv/repo/migrations/20260212155510_add_message_upsert.exs"
    said = shorten(f"fatal: pathspec '{path}' did not match any files", 60)
    assert said == "fatal: pathspec…"
    assert shorten("one two three four", 12) == "one two…"
    assert shorten("x" * 30, 10) == "x" * 9 + "…"


def test_a_patch_tool_is_named_by_the_files_its_patch_changes() -> None:
    """Codex's apply_patch (a real call, tests/fakes/real_outputs.py) and a unified diff: the
    call's label and action name the file, as an editor's edit does; a patch with no file
    line keeps the tool's name."""
    [real] = [o for o in REAL_OUTPUTS if o.name == "apply-patch-codex"]
    block = {"type": "tool_use", "id": "p", "name": "apply_patch", "input": real.command}
    call = tool_use_call(3, block)
    assert call.edits and call.label == "apply_patch /Users/philipp/dev/agentlogs/fixtures/JOKE.md"
    assert call.action == "edited /Users/philipp/dev/agentlogs/fixtures/JOKE.md"
    diff = "--- a/src/pay/fees.py\n+++ b/src/pay/fees.py\n@@ -1 +1 @@\n-a\n+b\n"
    wrapped = tool_use_call(4, {"type": "tool_use", "name": "patch", "input": {"input": diff}})
    assert wrapped.action == "edited src/pay/fees.py"
    bare = tool_use_call(5, {"type": "tool_use", "name": "apply_patch", "input": "no file"})
    assert bare.label == "apply_patch" and bare.action == "apply_patch edit" and bare.edits
