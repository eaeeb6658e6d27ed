"""The outcome reader at its edges (memoryd/transcript/outcomes.py): the failure line is
the whole line the verdict is on, wherever it sits in the output, its white space made
one and cut at its limit; a short-flag bundle is read for its first letters only."""

from __future__ import annotations

import pytest

from memoryd.transcript.outcomes import (
    MAX_FAILURE_CHARS,
    _flag,
    changes_files,
    edit_form,
    read_failure,
    shows_only,
)

VERDICT = "FAILED tests/test_pay.py::test_total - AssertionError: 3 != 4"


@pytest.mark.parametrize(
    "output",
    [
        f"{VERDICT}\n",
        f"{VERDICT}",
        f"collected 3 items\n\n{VERDICT}\n",
        f"collected 3 items\nrunning\nmore\n{VERDICT}",
        f"\n{VERDICT}\nlater output\n",
        f"a\nb\nc\n{VERDICT}\nd\ne\n",
    ],
)
def test_the_failure_line_is_exactly_the_line_of_the_verdict(output: str) -> None:
    """First, middle or last line, with or without a newline after it, with lines before
    and after: the line read is the verdict's, whole and nothing more."""
    found = read_failure(output, "pytest")
    assert found is not None
    assert found.kind == "pytest"
    assert found.line == VERDICT


def test_the_failure_line_has_its_white_space_made_one() -> None:
    found = read_failure("FAILED   tests/test_a.py::test_b  -   boom\t now\n")
    assert found is not None and found.line == "FAILED tests/test_a.py::test_b - boom now"


@pytest.mark.parametrize("extra", [0, 1, 2, 50])
def test_a_long_failure_line_is_cut_to_its_limit(extra: int) -> None:
    """A line of exactly MAX_FAILURE_CHARS stays whole; a longer one is cut to that many
    characters, the last an ellipsis."""
    line = VERDICT + " " + "x" * (MAX_FAILURE_CHARS - len(VERDICT) - 1 + extra)
    found = read_failure(f"start\n{line}\nend\n")
    assert found is not None
    if extra == 0:
        assert found.line == line
    else:
        assert len(found.line) == MAX_FAILURE_CHARS
        assert found.line == line[: MAX_FAILURE_CHARS - 1] + "…"


def test_a_short_flag_bundle_is_read_for_its_first_two_letters() -> None:
    """``-pi`` and ``-in`` hold ``i``; a long option never does, nor a letter of an
    option's value (``-MFile::Find`` loads a module)."""
    assert _flag("-pi", "i") and _flag("-in", "i") and _flag("-i", "i")
    assert _flag("-i.bak", "i")
    assert not _flag("--in-place", "i") and not _flag("--i", "i")
    assert not _flag("-MFile", "i") and not _flag("-e", "i") and not _flag("i", "i")


@pytest.mark.parametrize(
    ("command", "form"),
    [
        ("perl -ie 's/a/b/' x.txt", "perl -pi"),
        ("perl -pi -e 's/a/b/' x.txt", "perl -pi"),
        ("perl -MFile::Find -e 'find(sub { print }, \".\")'", None),
        ("sed -in 's/a/b/' x.txt", "sed -i"),
        ("sed -n 's/a/b/p' x.txt", None),
    ],
)
def test_in_place_flags_in_a_bundle(command: str, form: str | None) -> None:
    assert edit_form(command) == form
    assert changes_files(command) is (form is not None)


@pytest.mark.parametrize(
    ("command", "only_shows"),
    [
        ("cat src/a.py", True),
        ("/usr/bin/cat src/a.py", True),
        ("sudo cat /etc/hosts", True),
        ("LANG=C grep -n parse src/a.py", True),
        ("cd src && cat a.py | grep parse", True),
        ("sed -n '1,20p' a.py", True),
        ("git diff", True),
        ("/usr/bin/git log -3", True),
        ("git --no-pager diff HEAD~1", True),
        ("git status && git diff && ls", True),
        ("(cat a.py)", True),
        ("sudo && cat a.py", True),
        ("", False),
        ("cd src", False),
        ("sudo", False),
        ("cd src && pytest -x", False),
        ("sed 's/a/b/' a.py", False),
        ("pytest -n 4", False),
        ("sed -n 1p a.py && pytest", False),
        ("git diff && pytest", False),
        ("git commit -m 'a diff'", False),
        ("git --version", False),
        ("git", False),
        ("svn diff", False),
        ("cat a.py > b.py", False),
    ],
)
def test_what_only_shows_something(command: str, only_shows: bool) -> None:
    """A command only shows when every simple command of it is a showing one (behind
    ``sudo``, an assignment, a path or a ``cd``), ``sed -n`` or a showing git
    sub-command; one runner, one write or nothing shown at all is not."""
    assert shows_only(command) is only_shows


@pytest.mark.parametrize(
    ("command", "form"),
    [
        ("sudo sed -i 's/a/b/' x.txt", "sed -i"),
        ("LANG=C sed -i 's/a/b/' x.txt", "sed -i"),
        ("/usr/bin/sed -i 's/a/b/' x.txt", "sed -i"),
        ("sed --in-place 's/a/b/' x.txt", "sed -i"),
        ("sed -Ei 's/a+/b/' x.txt", "sed -i"),
        ("sed -E 's/a+/b/' x.txt", None),
        ("rm -f", None),
        ("rm -f build.log", "rm"),
        ("cp -r src", None),
        ("cp -r src dst", "cp"),
        ("sudo", None),
    ],
)
def test_an_edit_behind_a_prefix_a_path_or_a_flag_bundle(command: str, form: str | None) -> None:
    """The command's name is read behind ``sudo``, an assignment or a path; an in-place
    flag in any of its spellings; a file operation needs its operands, not its flags."""
    assert edit_form(command) == form


@pytest.mark.parametrize(
    ("command", "form"),
    [
        ("patch -p1 < fix.diff", "patch"),
        ("apply_patch <<'EOF'\n*** Begin Patch\nEOF", "apply_patch"),
        ("applypatch fix.diff", "apply_patch"),
        ("git apply fix.diff", "git apply"),
        ("git am 0001.patch", "git am"),
        ("git --no-pager mv a.py b.py", "git mv"),
        ("git rm old.py", "git rm"),
        ("git restore src/a.py", "git restore"),
        ("git checkout -- src/a.py", "git checkout"),
        ("git checkout main", None),
        ("git", None),
        ("git --version", None),
        ("git status -- src", None),
        ("tee out.txt", "tee"),
        ("tee /dev/null", None),
        ("mv a.py b.py", "mv"),
        ("cp a.py b.py", "cp"),
        ("install -m 644 a.conf /etc/a.conf", "cp"),
        ("rsync -a src/ dst/", "cp"),
        ("rsync src/", None),
        ("find . -name '*.pyc' -delete", "rm"),
        ("find . -name '*.pyc'", None),
        ("ls -delete", None),
        ("rm a.py", "rm"),
        ("unlink a.py", "rm"),
        ("shred secret.txt", "rm"),
        ("touch a.py", "touch"),
        ("truncate -s 0 a.log", "touch"),
        ("touch", None),
        ("echo hi > /dev/null", None),
        ("echo hi > out.txt", "redirect"),
        ("cat <<'EOF' > a.py\nprint(1)\nEOF", "heredoc"),
    ],
)
def test_each_edit_form_is_named(command: str, form: str | None) -> None:
    """Every way a command changes files has its name, and the commands next to them
    (a branch checkout, a search without ``-delete``, a copy without a target) none."""
    assert edit_form(command) == form
