"""The edges of reading a shell command and an exit status (memoryd/transcript/outcomes.py):
heredoc bodies are data whether their delimiter is quoted or not, and the commands after
them are read; a ``<<`` inside quotes opens nothing; a command named by its path, or
after a leading ``2>&1``, is the command it runs; ``rm`` or ``apply`` under another
program is no file edit; an exit status on a line of its own is quoted as that line."""

from __future__ import annotations

import pytest

from memoryd.transcript import outcomes as outcomes_module
from memoryd.transcript.outcomes import edit_form, exit_status, read_failure, shows_only


@pytest.mark.parametrize(
    "command",
    [
        "python - <<'EOF'\nprint(len(rows) > 3)\nEOF",
        'python3 - <<"PY"\nimport json\nprint(json.dumps({"a": 1}) > "")\nPY',
        "python - <<EOF\nrows = load()\nprint(len(rows) > 3)\nEOF",
        "python - <<-'EOF'\n\tif a > b: print(a)\n\tEOF",
        "cd /repo && python - <<'EOF'\nfrom pathlib import Path\nprint(Path('a') > Path('b'))\nEOF",
    ],
)
def test_a_heredoc_script_that_only_compares_changes_no_file(command: str) -> None:
    """A Python script fed through a heredoc (quoted delimiter or not, ``<<-`` too) is
    data: its ``>`` comparisons are not redirections."""
    assert edit_form(command) is None


def test_the_commands_after_a_heredoc_are_read() -> None:
    """The body ends at its delimiter: what follows it is read as commands again."""
    assert edit_form("python - <<'EOF'\nprint(1)\nEOF\nrm build/out.o") == "rm"
    assert edit_form("cat <<EOF\nline one\nline two\nEOF\nmv a.py b.py") == "mv"
    assert edit_form("python - <<'EOF'\nprint(1)\nEOF\nls build") is None


def test_a_heredoc_opener_inside_quotes_opens_nothing() -> None:
    """``"<<EOF"`` inside a quoted string is text: the redirect is a redirect, and the
    lines after it are commands."""
    assert edit_form('echo "a <<EOF b" > notes.txt') == "redirect"
    assert edit_form("echo '<<EOF'\nrm stale.lock") == "rm"


def test_an_edit_on_a_later_line_is_read_and_a_later_heredoc_does_not_rename_it() -> None:
    """A command of several lines is read line by line; a heredoc opened on a later line
    does not make the first line's redirect a heredoc."""
    assert edit_form("cd /repo\nrm build/out.o") == "rm"
    assert edit_form("echo x > notes.txt\ncat <<EOF\nhi\nEOF") == "redirect"


def test_a_command_named_by_its_path_or_after_a_leading_redirect_is_that_command() -> None:
    assert edit_form("/usr/bin/sed -i 's/a/b/' src/x.py") == "sed -i"
    assert edit_form("./node_modules/.bin/rimraf dist") is None
    assert edit_form("/bin/rm -f build/out.o") == "rm"
    assert edit_form("2>&1 rm build/out.o") == "rm"
    assert shows_only("/bin/cat src/a.py")
    assert shows_only("2>&1 cat src/a.py")
    assert not shows_only("/usr/bin/python -m pytest")


@pytest.mark.parametrize(
    ("command", "form"),
    [
        ("sed --in-place=.bak 's/a/b/' x.py", "sed -i"),
        ("sed -E -i 's/a+/b/' x.py", "sed -i"),
        ("sed -ni 's/a/b/p' x.py", "sed -i"),
        ("sed -n '1,20p' x.py", None),
        ("sed 's/a/b/' x.py > y.py", "redirect"),
        ("docker rm web-1", None),
        ("kubectl apply -f deploy.yaml", None),
        ("npm run apply", None),
        ("git --version", None),
        ("git", None),
        ("git -C /repo status", None),
        ("git checkout main", None),
        ("git checkout -- src/a.py", "git checkout"),
        ("cp -r src/ backup/", "cp"),
        ("install -m 644 a.conf /etc/a.conf", "cp"),
        ("mv -f a.py b.py", "mv"),
        ("mv a.py", None),
    ],
)  # fmt: skip
def test_each_command_is_read_by_its_own_name(command: str, form: str | None) -> None:
    """``rm`` or ``apply`` as another program's subcommand is no file edit; git's own
    subcommands and each copying or moving program are read by name."""
    assert edit_form(command) == form


def test_an_exit_status_on_its_own_line_is_quoted_as_that_line() -> None:
    """``Exit: 1`` after blank lines is the failure, and its line is that line, not the
    blank one before it."""
    for output in ("\nExit: 1", "\n\nexit: 2\n", "ok\n\n  Exit: 3"):
        failure = read_failure(output)
        assert failure is not None and failure.kind == "exit status"
        assert failure.line.lower().startswith("exit: "), output
    assert exit_status("\n\nExit: 4") == 4
    assert read_failure("\nExit: 0") is None


def _lines(count: int, width: int = 79) -> str:
    return "\n".join("." * width for _ in range(count))


def test_a_huge_output_is_read_at_its_start_and_its_end_but_not_its_middle() -> None:
    """Past twice the scanned length, the verdict is read in the first and the last
    60,000 characters, the cut joined by a line break; at exactly twice, nothing is
    left out."""
    scanned = outcomes_module._SCANNED_CHARS
    phrase = "FAILED tests/pay/test_ledger.py::test_reconcile - KeyError: 'x'"
    filler = _lines(scanned // 80 + 5)
    tail = phrase + "\n" + _lines(scanned // 80)[: scanned - len(phrase) - 1]
    at_the_end = filler + "\n" + tail
    assert len(tail) == scanned and len(at_the_end) > 2 * scanned
    found = read_failure(at_the_end)
    assert found is not None and found.line == phrase
    middle = filler + "\n" + phrase + "\n" + filler
    assert len(middle) > 2 * scanned and read_failure(middle) is None
    at_the_start = phrase + "\n" + filler + "\n" + filler
    found = read_failure(at_the_start)
    assert found is not None and found.line == phrase
    half = scanned - len(phrase) // 2
    exact = "x" * (half - 1) + "\n" + phrase + "\n"
    exact += "y" * (2 * scanned - len(exact))
    assert len(exact) == 2 * scanned
    found = read_failure(exact)
    assert found is not None and found.line == phrase


def test_colour_codes_are_read_through_and_left_out_of_the_line() -> None:
    output = "\x1b[1m\x1b[31mFAILED\x1b[0m tests/a.py::test_x - AssertionError\n"
    found = read_failure(output)
    assert found is not None and found.kind == "pytest"
    assert found.line == "FAILED tests/a.py::test_x - AssertionError"


def test_a_masked_placeholder_reads_back_as_a_masked_failure_or_none() -> None:
    lead = outcomes_module.PLACEHOLDER_LEAD
    with_note = f"{lead}Bash `pytest`; failure: FAILED a.py::t - E; line 3 — 2 KB]"
    found = read_failure(with_note)
    assert found == outcomes_module.Failure("masked", "FAILED a.py::t - E")
    assert read_failure(f"{lead}Bash `ls` — 2 KB]") is None
    assert read_failure(f"{lead}Bash `ls` — 2 KB]\nTraceback (most recent call last):") is None


def test_a_phrase_inside_a_line_counts_where_its_line_starts() -> None:
    """A shell's complaint inside a line before any line-start phrase is the failure, its
    whole line quoted; one after the first line-start phrase is not the first."""
    found = read_failure("ok\nbash: pytets: command not found\nFAILED a.py::t - E")
    assert found == outcomes_module.Failure("shell", "bash: pytets: command not found")
    found = read_failure("FAILED a.py::t - E\nbash: pytets: command not found")
    assert found == outcomes_module.Failure("pytest", "FAILED a.py::t - E")
    found = read_failure("done: not found here\nsh: 1: tox: not found")
    assert found == outcomes_module.Failure("shell", "sh: 1: tox: not found")
    found = read_failure("x\n  thread 'main' panicked at src/lib.rs:3:5:")
    assert found == outcomes_module.Failure(
        "cargo test", "thread 'main' panicked at src/lib.rs:3:5:"
    )
    assert read_failure("nothing panicked at all") is not None
    assert read_failure("the fix: not found anywhere") is None


def test_a_shown_file_counts_only_the_shells_own_complaint() -> None:
    """For ``cat``, a file's ``FAILED`` lines and ``panicked at`` are content; a missing
    file is the shell's complaint."""
    content = "FAILED a.py::t - E\nthread 'main' panicked at x.rs:1:1"
    assert read_failure(content, "cat notes.txt") is None
    assert read_failure(content, None) is not None
    missing = "cat: notes.txt: No such file or directory"
    found = read_failure(missing, "cat notes.txt")
    assert found == outcomes_module.Failure("shell", missing)


def test_an_exit_status_is_the_failure_only_when_no_phrase_says_so() -> None:
    found = read_failure("building...\nexit code 2\n")
    assert found == outcomes_module.Failure("exit status", "exit code 2")
    found = read_failure("building...\nProcess exited with code 2")
    assert found == outcomes_module.Failure("error line", "Process exited with code 2")
    assert read_failure("Process exited with code 0\n") is None
    found = read_failure("Exit code 1\nFAILED a.py::t - E")
    assert found is not None and found.kind == "pytest"


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (
            "checking for caddy... no\nconfigure: error: no acceptable C compiler found in $PATH",
            "configure: error: no acceptable C compiler found in $PATH",
        ),
        (
            "usage: tool.py [-h]\ntool.py: error: unrecognized arguments: -x",
            "tool.py: error: unrecognized arguments: -x",
        ),
        (
            "/usr/bin/ld: store.o: undefined reference to 'store_flush'\n"
            "collect2: error: ld returned 1 exit status\nmake: *** [Makefile:9: ledgerd] Error 1",
            "make: *** [Makefile:9: ledgerd] Error 1",
        ),
        (
            "clang: error: linker command failed with exit code 1 (use -v to see invocation)\n"
            "make: *** [all] Error 1",
            "make: *** [all] Error 1",
        ),
    ],
)  # fmt: skip
def test_a_programs_own_error_counts_but_not_a_restated_exit_status(output: str, line: str) -> None:
    """``configure: error: …`` is the program's own verdict; a linker driver's
    ``collect2: error: ld returned 1 exit status`` only restates an exit status, so make's
    line naming the target is the one quoted."""
    found = read_failure(output)
    assert found is not None and found.line == line


def test_a_heredoc_right_after_a_quoted_word_is_opened() -> None:
    """``python 'x'<<EOF`` opens a heredoc: the ``<<`` follows the quotes, it is not in
    them."""
    assert edit_form("python 'run.py'<<EOF\nprint(a > b)\nEOF") is None
    assert edit_form("python \"run.py\"<<'EOF'\nprint(a > b)\nEOF\nrm out.txt") == "rm"


@pytest.mark.parametrize("mark", ["\u2717", "\u2715", "\u00d7"])
def test_an_output_ending_in_a_one_character_mark_is_read_to_its_end(mark: str) -> None:
    """bun's, jest's and vitest's crosses as the output's last character: the line is
    read once and the reading ends."""
    found = read_failure(f"src/a.test.ts:\n {mark}")
    assert found is None or found.line == mark
    found = read_failure(f" {mark} adds two numbers")
    assert found is not None and found.kind == "jest"


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (
            "checking style\nsrc/pay/ledger.py:12:80: E501 Line too long (95 > 88)\n"
            "Found 1 error.",
            "src/pay/ledger.py:12:80: E501 Line too long (95 > 88)",
        ),
        ("checking style\nok so far\na:3:1: E501 Line too long\nnext", "a:3:1: E501 Line too long"),
        ("\na.py:3:1: E501 Line too long", "a.py:3:1: E501 Line too long"),
    ],
)  # fmt: skip
def test_a_linter_line_inside_an_output_is_found_where_its_line_starts(
    output: str, line: str
) -> None:
    """A linter's ``path:line:col: CODE`` line holds none of the words the other phrases
    hold: it is found by its own mark, on the line where it stands."""
    found = read_failure(output)
    assert found == outcomes_module.Failure("linter", line)


def test_the_first_of_two_shell_complaints_is_the_one_quoted() -> None:
    """Two commands not found: the first says the failure."""
    found = read_failure("bash: pytets: command not found\nbash: tox: command not found")
    assert found == outcomes_module.Failure("shell", "bash: pytets: command not found")
    output = "resolving: not found in cache\nsh: 1: tox: not found\nsh: 1: nox: not found"
    found = read_failure(output)
    assert found == outcomes_module.Failure("shell", "sh: 1: tox: not found")


def test_a_phrase_at_the_very_start_of_the_output_is_found() -> None:
    """pnpm's error code as the output's first characters, and a panic after a leading
    blank line, are each quoted as their own line."""
    found = read_failure("ERR_PNPM_NO_SCRIPT  Missing script: test\n")
    assert found == outcomes_module.Failure("npm", "ERR_PNPM_NO_SCRIPT Missing script: test")
    found = read_failure("ok\nERR_PNPM_NO_SCRIPT  Missing script: test")
    assert found == outcomes_module.Failure("npm", "ERR_PNPM_NO_SCRIPT Missing script: test")
    panic = "thread 'main' panicked at src/main.rs:2:5:"
    found = read_failure(f"\n{panic}\nattempt to subtract with overflow\n")
    assert found == outcomes_module.Failure("cargo test", panic)


def test_a_complaint_that_ends_its_line_is_read_on_that_line_alone() -> None:
    """``sh: 1: tox: not found`` ends its own line, whatever lines follow it: it is the
    failure, before make's line that only restates it."""
    output = "/bin/sh: 1: tox: not found\nmake: *** [Makefile:4: test] Error 127\n"
    found = read_failure(output)
    assert found == outcomes_module.Failure("shell", "/bin/sh: 1: tox: not found")


def test_a_complaint_after_the_first_line_start_phrase_is_not_the_first() -> None:
    """Past the first line-start phrase, an inside-a-line phrase comes too late, even when
    an earlier occurrence of its words was no complaint."""
    output = (
        "resolving deps: not found in cache, fetching\n"
        "FAILED tests/test_a.py::test_x - AssertionError\n"
        "sh: 1: coverage: not found"
    )
    found = read_failure(output)
    assert found == outcomes_module.Failure(
        "pytest", "FAILED tests/test_a.py::test_x - AssertionError"
    )


def test_an_exception_line_without_its_traceback_is_quoted_itself() -> None:
    """The last lines of a traceback (``| tail -2``): the exception line is the failure,
    not the line after it."""
    output = "ModuleNotFoundError: No module named 'requests'\nmake: *** [Makefile:3: run] Error 1"
    found = read_failure(output)
    assert found == outcomes_module.Failure(
        "traceback", "ModuleNotFoundError: No module named 'requests'"
    )


def test_an_output_cut_at_a_traceback_header_quotes_the_header() -> None:
    """With no line after the header (``| head -2``), the header is the line quoted, not
    the line before it."""
    found = read_failure("loading fixtures\nTraceback (most recent call last):")
    assert found == outcomes_module.Failure("traceback", "Traceback (most recent call last):")


def test_a_traceback_that_ends_the_output_without_a_line_break_quotes_its_exception() -> None:
    """An output trimmed of its last line break: the exception line that ends it is still
    the line quoted, not the header."""
    output = (
        "Traceback (most recent call last):\n"
        '  File "/repo/manage.py", line 8, in <module>\n'
        "    main()\n"
        "KeyError: 'DATABASE_URL'"
    )
    found = read_failure(output)
    assert found == outcomes_module.Failure("traceback", "KeyError: 'DATABASE_URL'")
