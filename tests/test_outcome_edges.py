"""The edges of reading a shell command and an exit status (memoryd/summarizers/outcomes.py):
heredoc bodies are data whether their delimiter is quoted or not, and the commands after
them are read; a ``<<`` inside quotes opens nothing; a command named by its path, or
after a leading ``2>&1``, is the command it runs; ``rm`` or ``apply`` under another
program is no file edit; an exit status on a line of its own is quoted as that line."""

from __future__ import annotations

import pytest

from memoryd.summarizers.outcomes import edit_form, exit_status, read_failure, shows_only


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
