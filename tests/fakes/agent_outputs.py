"""What a coding agent's tools print, made up: a project's source files, numbered file
views, listings, grep hits, tracebacks, test runs, diffs, report tables and markup.

Standard library only and seeded: the same ``random.Random`` state gives the same text.
:mod:`agent_transcripts` puts these into conversations. Each builder returns an
:class:`Output`: the text and the probe facts planted in it, as (kind, text) pairs
(kinds: ``path``, ``identifier``, ``exception``, ``line``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


NOUNS = _words(
    "quartz ledger harbor lantern meadow cobalt falcon orchid tundra summit beacon cinder "
    "ember fjord glacier hazel juniper kestrel lumen marble nectar onyx pebble quill raven "
    "saffron thistle umber velvet willow yarrow zephyr bramble canyon garnet heron"
)
VERBS = _words(
    "parse load flush merge resolve render encode decode schedule reconcile normalize "
    "validate export compact hydrate rotate throttle index stream split retry seal drain "
    "probe"
)
OBJECTS = _words(
    "window batch record header token cursor offset segment manifest payload schema bucket "
    "frame chunk span route quota snapshot lease digest tenant shard"
)
PROBLEMS = ("Overflow", "Mismatch", "Timeout", "Corrupt", "Missing", "Stale", "Conflict")
BUILTIN_ERRORS = ("KeyError", "ValueError", "TypeError", "AttributeError", "IndexError")


def camel(*words: str) -> str:
    """``CamelCase`` of ``words``."""
    return "".join(word.capitalize() for word in words)


@dataclass(frozen=True)
class Function:
    """A function of a made-up module, and where it lies in the module's source."""

    name: str
    first: int
    """Line number of its ``def`` (1-based)."""
    last: int


@dataclass(frozen=True)
class Module:
    """A made-up source file: its path, its lines and its functions."""

    path: str
    """Relative to the project root: ``src/<package>/<name>.py``."""
    name: str
    lines: tuple[str, ...]
    functions: tuple[Function, ...]


@dataclass(frozen=True)
class Project:
    """The project an agent works on: names that recur through one conversation."""

    root: str
    package: str
    modules: tuple[Module, ...]
    classes: tuple[str, ...]
    exceptions: tuple[str, ...]

    def test_path(self, module: Module) -> str:
        """The test file of ``module``."""
        return f"tests/test_{module.name}.py"

    def absolute(self, path: str) -> str:
        """``path`` below the project root."""
        return f"{self.root}/{path}"


@dataclass
class Output:
    """A tool's output and the probe facts planted in it."""

    text: str
    facts: list[tuple[str, str]] = field(default_factory=list)


def make_project(rng: random.Random, root: str) -> Project:
    """A project of 6 to 10 modules with their functions, classes and exceptions."""
    package = "_".join(rng.sample(NOUNS, 2))
    names = [
        f"{a}_{b}" for a, b in zip(rng.sample(NOUNS, 10), rng.sample(OBJECTS, 10), strict=True)
    ]
    classes = tuple(camel(rng.choice(NOUNS), obj) for obj in rng.sample(OBJECTS, 6))
    exceptions = tuple(
        camel(obj) + p + "Error"
        for obj, p in zip(rng.sample(OBJECTS, 5), rng.sample(PROBLEMS, 5), strict=True)
    )
    verbs = rng.sample(VERBS, len(VERBS))
    modules = []
    for number, name in enumerate(names[: rng.randint(6, 10)]):
        functions = [
            f"{verbs[(number * 3 + k) % len(verbs)]}_{rng.choice(OBJECTS)}"
            for k in range(rng.randint(4, 9))
        ]
        modules.append(
            _module(rng, package, name, list(dict.fromkeys(functions)), classes, exceptions)
        )
    return Project(root, package, tuple(modules), classes, exceptions)


def _module(
    rng: random.Random,
    package: str,
    name: str,
    functions: list[str],
    classes: tuple[str, ...],
    exceptions: tuple[str, ...],
) -> Module:
    lines = [
        f'"""The {name.replace("_", " ")} of {package}."""',
        "",
        "from __future__ import annotations",
        "",
        "import logging",
        "from collections.abc import Iterable",
        "",
        f"from {package}.errors import {', '.join(sorted(exceptions[:3]))}",
        "",
        "log = logging.getLogger(__name__)",
        "",
    ]
    placed = []
    for function in functions:
        lines.append("")
        first = len(lines) + 1
        lines += _function_body(rng, function, classes, exceptions)
        placed.append(Function(function, first, len(lines)))
    return Module(f"src/{package}/{name}.py", name, tuple(lines), tuple(placed))


def _function_body(
    rng: random.Random, name: str, classes: tuple[str, ...], exceptions: tuple[str, ...]
) -> list[str]:
    obj = name.split("_", 1)[1]
    cls = rng.choice(classes)
    body = [
        f"def {name}({obj}: {cls}, limit: int = {rng.randint(2, 64)}) -> list[{cls}]:",
        f'    """{name.replace("_", " ").capitalize()} up to ``limit`` entries."""',
        "    seen: list[str] = []",
    ]
    for _ in range(rng.randint(5, 24)):
        var = rng.choice(OBJECTS)
        body += rng.choice(
            (
                [
                    f"    if {obj}.{var} is None:",
                    f'        raise {rng.choice(exceptions)}(f"{var} {{{obj}.id}} is stale")',
                ],
                [f"    for {var} in {obj}.{var}s[:limit]:", f"        seen.append({var}.key)"],
                [f"    {var}_count = len({obj}.{var}s) - {rng.randint(1, 9)}"],
                [f'    log.debug("{var} %s of %s", len(seen), {obj}.id)'],
                [f"    # the {var} must be read before the {rng.choice(OBJECTS)} is sealed"],
                [f"    {obj}.{var} = {rng.choice(VERBS)}_{var}({obj}, limit=limit)"],
                [""],
            )
        )
    body.append(f"    return [{obj}] if seen else []")
    return body


def numbered(lines: list[str], first: int, style: str) -> str:
    """File lines with their numbers: ``tab`` (cat -n, nl -ba) or ``arrow`` (a Read tool)."""
    mark = "\t" if style == "tab" else "\u2192"
    return "\n".join(f"{first + i:6d}{mark}{line}" for i, line in enumerate(lines))


def view(module: Module, first: int, count: int, style: str) -> Output:
    """Lines ``first``.. of ``module``, numbered; facts: the functions whose ``def`` shows."""
    first = max(1, min(first, len(module.lines)))
    shown = list(module.lines[first - 1 : first - 1 + count])
    out = Output(numbered(shown, first, style))
    last = first + len(shown) - 1
    out.facts += [("identifier", f.name) for f in module.functions if first <= f.first <= last]
    return out


def listing(rng: random.Random, project: Project, size: int) -> Output:
    """``ls -la`` of the project's package folder: its modules and about ``size`` more."""
    rows = [
        f"total {rng.randint(40, 900)}",
        "drwxr-xr-x  6 root root  4096 Oct  2 09:14 .",
        "drwxr-xr-x 14 root root  4096 Oct  2 09:14 ..",
    ]
    names = [m.path.rsplit("/", 1)[1] for m in project.modules] + ["__init__.py", "errors.py"]
    names += [
        f"{rng.choice(NOUNS)}_{rng.choice(OBJECTS)}.{rng.choice(('py', 'json', 'md'))}"
        for _ in range(max(0, size - len(names)))
    ]
    for name in sorted(set(names)):
        kind = "-rw-r--r--" if "." in name else "drwxr-xr-x"
        when = (
            f"{rng.choice(('Sep', 'Oct'))} {rng.randint(1, 28):2d} {rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}"
        )
        rows.append(f"{kind}  1 root root {rng.randint(120, 48000):6d} {when} {name}")
    return Output("\n".join(rows))


def find_files(rng: random.Random, project: Project, size: int) -> Output:
    """``find . -name '*.py'``: every source and test file, and some more."""
    paths = [m.path for m in project.modules] + [project.test_path(m) for m in project.modules]
    paths += [
        f"src/{project.package}/{rng.choice(NOUNS)}/{rng.choice(OBJECTS)}_{k}.py"
        for k in range(max(0, size - len(paths)))
    ]
    chosen = rng.choice(project.modules).path
    return Output("\n".join(f"./{p}" for p in sorted(paths)), [("path", chosen)])


def grep_hits(rng: random.Random, project: Project, name: str) -> Output:
    """``grep -rn NAME``: the ``def`` and the calls of a function across the modules."""
    hits = []
    for module in project.modules:
        for number, line in enumerate(module.lines, 1):
            if name in line:
                hits.append(f"{module.path}:{number}:{line}")
        if rng.random() < 0.4:
            hits.append(
                f"{project.test_path(module)}:{rng.randint(5, 300)}:    result = "
                f"{name}(fixture, limit={rng.randint(1, 9)})"
            )
    return Output("\n".join(hits) or "", [("identifier", name)] if hits else [])


def _frames(rng: random.Random, project: Project, count: int) -> tuple[list[str], Function, int]:
    """``count`` frames through the project's functions; the last function and line."""
    lines: list[str] = []
    function, line = project.modules[0].functions[0], 1
    for _ in range(max(1, count)):
        module = rng.choice(project.modules)
        function = rng.choice(module.functions)
        line = rng.randint(function.first + 1, function.last)
        code = module.lines[line - 1].strip() or "pass"
        where = f'  File "{project.absolute(module.path)}", line {line}, in {function.name}'
        lines += [where, f"    {code}"]
    return lines, function, line


def traceback(rng: random.Random, project: Project, script: str, frames: int) -> Output:
    """A Python traceback through the project's functions, ending in one of its exceptions;
    now and then chained to a built-in error raised first."""
    head = [
        "Traceback (most recent call last):",
        f'  File "{project.absolute(script)}", line {rng.randint(5, 40)}, in <module>',
        "    main()",
    ]
    lines: list[str] = []
    if rng.random() < 0.3:
        first, _, _ = _frames(rng, project, max(1, frames // 3))
        builtin = rng.choice(BUILTIN_ERRORS)
        lines += [*head, *first, f"{builtin}: '{rng.choice(OBJECTS)}'", ""]
        lines += ["During handling of the above exception, another exception occurred:", ""]
    last, function, line = _frames(rng, project, frames)
    exception = rng.choice(project.exceptions)
    subject = f"{rng.choice(OBJECTS)} {rng.randint(1000, 9999)} of tenant {rng.choice(NOUNS)}"
    lines += [*head, *last, f"{project.package}.errors.{exception}: {subject} is stale"]
    module = next(m for m in project.modules if function in m.functions)
    facts = [
        ("exception", exception),
        ("line", f"line {line}"),
        ("path", module.path),
        ("identifier", function.name),
    ]
    return Output("\n".join(lines), facts)


def test_run(
    rng: random.Random, project: Project, module: Module, failures: int, size: int
) -> Output:
    """pytest's output for one test file, about ``size`` tests: dots (or one line a test),
    each failure with its assertion, a summary."""
    total = max(size, failures + 2)
    test_file = project.test_path(module)
    names = [f"test_{rng.choice(VERBS)}_{rng.choice(OBJECTS)}_{k}" for k in range(failures)]
    lines = [
        "=" * 29 + " test session starts " + "=" * 30,
        f"platform linux -- Python 3.11.{rng.randint(2, 12)}, pytest-8.{rng.randint(0, 4)}."
        f"{rng.randint(0, 3)}, pluggy-1.5.0",
        f"rootdir: {project.root}",
        "configfile: pyproject.toml",
        f"collected {total} items",
        "",
    ]
    verdicts = ["FAILED" if k < failures else "PASSED" for k in range(total)]
    rng.shuffle(verdicts)
    if rng.random() < 0.5:
        for k, verdict in enumerate(verdicts):
            case = f"test_{rng.choice(VERBS)}_{rng.choice(OBJECTS)}_{k}"
            lines.append(f"{test_file}::{case} {verdict} [{100 * (k + 1) // total:3d}%]")
    else:
        marks = "".join("F" if verdict == "FAILED" else "." for verdict in verdicts)
        lines += [f"{test_file} {marks[start : start + 60]}" for start in range(0, total, 60)]
    facts: list[tuple[str, str]] = [("path", test_file)]
    if failures:
        lines += ["", "=" * 35 + " FAILURES " + "=" * 35]
    for name in names:
        function = rng.choice(module.functions)
        expected, got = rng.randint(2, 9), rng.randint(0, 1)
        lines += [
            f"{'_' * 20} {name} {'_' * 20}",
            "",
            f"    def {name}(fixture):",
            f"        result = {function.name}(fixture, limit={expected})",
            f">       assert len(result) == {expected}",
            f"E       AssertionError: assert {got} == {expected}",
            f"E        +  where {got} = len([])",
            "",
            f"{test_file}:{rng.randint(20, 400)}: AssertionError",
        ]
        facts.append(("identifier", name))
    lines.append("=" * 27 + " short test summary info " + "=" * 28)
    lines += [f"FAILED {test_file}::{name} - AssertionError" for name in names]
    passed = total - failures
    summary = f"{failures} failed, {passed} passed" if failures else f"{passed} passed"
    lines.append(f"{'=' * 20} {summary} in {rng.uniform(0.3, 30):.2f}s {'=' * 20}")
    return Output("\n".join(lines), facts)


def diff(rng: random.Random, module: Module, hunks: int) -> Output:
    """``git diff`` of one module: hunks that change a line in some of its functions."""
    lines = [
        f"diff --git a/{module.path} b/{module.path}",
        f"index {rng.getrandbits(28):07x}..{rng.getrandbits(28):07x} 100644",
        f"--- a/{module.path}",
        f"+++ b/{module.path}",
    ]
    for function in rng.sample(module.functions, min(hunks, len(module.functions))):
        start = function.first
        old = list(module.lines[start - 1 : start + 5])
        lines.append(f"@@ -{start},{len(old)} +{start},{len(old) + 1} @@ def {function.name}")
        lines += [f" {line}" for line in old[:3]]
        lines += [
            f"-{old[3]}" if len(old) > 3 else "-",
            f"+{old[3] if len(old) > 3 else ''}",
            f"+    # keep the partial {rng.choice(OBJECTS)} after a flush",
        ]
        lines += [f" {line}" for line in old[4:]]
    return Output("\n".join(lines), [("path", module.path)])


def report_table(rng: random.Random, project: Project, rows: int) -> Output:
    """A line-count report, one module a row: ``L:  212 | P:   14 | W:   2``."""
    lines = [f"{'file':<48} {'lines':>8} {'public':>8} {'warnings':>9}", "-" * 76]
    for module in project.modules:
        lines.append(
            f"{module.path:<48} L: {len(module.lines):4d} | P: "
            f"{len(module.functions):4d} | W: {rng.randint(0, 12):3d}"
        )
    for k in range(max(0, rows - len(project.modules))):
        path = f"src/{project.package}/{rng.choice(NOUNS)}/{rng.choice(OBJECTS)}_{k}.py"
        lines.append(
            f"{path:<48} L: {rng.randint(8, 900):4d} | P: {rng.randint(0, 30):4d} | "
            f"W: {rng.randint(0, 12):3d}"
        )
    lines.append(f"{'total':<48} L: {rng.randint(2000, 40000):4d} | P: {rng.randint(50, 900):4d}")
    return Output("\n".join(lines))


def junit_xml(rng: random.Random, project: Project, module: Module, cases: int) -> Output:
    """A JUnit XML report with some failed test cases."""
    suite = f"tests.test_{module.name}"
    failed = f"test_{rng.choice(VERBS)}_{rng.choice(OBJECTS)}_partial"
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        "<testsuites>",
        f'  <testsuite name="pytest" errors="0" failures="1" tests="{cases}" '
        f'time="{rng.uniform(1, 60):.3f}">',
    ]
    for k in range(max(1, cases)):
        name = failed if k == 0 else f"test_{rng.choice(VERBS)}_{rng.choice(OBJECTS)}_{k}"
        lines.append(
            f'    <testcase classname="{suite}" name="{name}" '
            f'time="{rng.uniform(0, 2):.3f}"' + (">" if k == 0 else " />")
        )
        if k == 0:
            lines += [
                f'      <failure message="{rng.choice(project.exceptions)}: stale">',
                "        assert 0 == 3",
                "      </failure>",
                "    </testcase>",
            ]
    lines += ["  </testsuite>", "</testsuites>"]
    return Output("\n".join(lines), [("identifier", failed)])


def html_page(rng: random.Random, project: Project, rows: int) -> Output:
    """An HTML status page of the project's service: a table of recent jobs."""
    title = f"{project.package} status"
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '  <meta charset="utf-8">',
        f"  <title>{title}</title>",
        '  <link rel="stylesheet" href="/static/app.css">',
        "</head>",
        "<body>",
        f'  <div class="container"><h1>{title}</h1>',
        '    <table class="jobs">',
        "      <tr><th>job</th><th>tenant</th><th>state</th><th>ms</th></tr>",
    ]
    for k in range(max(1, rows)):
        state = rng.choice(("done", "done", "done", "failed", "queued"))
        lines.append(
            f'      <tr class="{state}"><td>job-{rng.randint(1000, 99999)}</td><td>'
            f"{rng.choice(NOUNS)}</td><td>{state}</td><td>{rng.randint(3, 9000)}</td>"
            "</tr>"
            if k % 7
            else f"      <!-- page {k // 7 + 1} -->"
        )
    lines += ["    </table>", "  </div>", "</body>", "</html>"]
    return Output("\n".join(lines))
