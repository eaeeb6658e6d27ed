"""What a made-up agent does: episodes of steps (find, read, reproduce, edit, test), and
each step as the tool call of a conversation's shape, with its output and probe facts.

Part of the transcript generator (:mod:`agent_transcripts`); standard library only. The
randomness of a plan never depends on the output sizes, only the sizes do, so scaling a
transcript's tokens keeps its messages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import agent_outputs as out
from agent_outputs import Function, Module, Output, Project


@dataclass
class Step:
    """One thing the agent does: what, on which module and function, how big its output."""

    kind: str
    module: Module
    function: Function
    size: int


@dataclass
class Done:
    """A step carried out: its tool call for each shape, its output and facts."""

    tool: str
    arguments: dict[str, Any]
    command: str
    """The shell command a text-mode agent (and ``bash``) runs for the step."""
    output: Output
    returncode: int
    call_facts: list[tuple[str, str]]


Focus = tuple[Module, Function]


def pick_focus(rng: random.Random, project: Project) -> Focus:
    """A module of ``project`` and one of its functions, for an episode to work on."""
    module = rng.choice(project.modules)
    return module, rng.choice(module.functions)


def plan(
    rng: random.Random, project: Project, scale: float, on: Focus | None = None
) -> list[list[Step]]:
    """The steps of one episode on ``on`` (a module and function, else a random one):
    find, read, reproduce, edit, test; a list of parallel steps each. Its randomness never
    depends on ``scale``: only the sizes do."""
    module, function = on or pick_focus(rng, project)

    def step(kind: str, low: int, high: int, where: Module | None = None) -> Step:
        size = max(1, round(rng.randint(low, high) * scale))
        chosen = where or module
        return Step(kind, chosen, function if where is None else chosen.functions[0], size)

    steps: list[list[Step]] = []
    if rng.random() < 0.35:
        steps.append([step(rng.choice(("list", "find")), 8, 40)])
    steps.append([step("grep", 1, 1)])
    reading = [step("view", 30, 110)]
    if rng.random() < 0.35:
        reading.append(step("view", 20, 80, rng.choice(project.modules)))
    steps.append(reading)
    if rng.random() < 0.5:
        if rng.random() < 0.5:
            steps.append([step("create", 1, 1)])
        steps.append([step("run", 3, 9)])
    steps.append([step("edit", 6, 20)])
    steps.append([step("test", 10, 60)])
    extra = rng.random()
    for kind, below, low, high in (
        ("diff", 0.2, 1, 4),
        ("report", 0.35, 8, 40),
        ("markup", 0.45, 10, 60),
        ("junit", 0.55, 5, 40),
    ):
        if extra < below:
            steps.append([step(kind, low, high)])
            break
    return steps


def carry_out(rng: random.Random, project: Project, step: Step, shape: str) -> Done:
    """Run a step: the tool call of ``shape``, the shell command, the output and facts."""
    module, function, size = step.module, step.function, step.size
    path, absolute = module.path, project.absolute(module.path)
    script = f"reproduce_{function.name}.py"
    test_path = project.test_path(module)
    if step.kind == "view":
        first = max(1, function.first - rng.randint(0, 12))
        style = "arrow" if shape == "interactive" else "tab"
        output = out.view(module, first, size, style)
        last = first + size - 1
        command = f"nl -ba {path} | sed -n '{first},{last}p'"
        if shape == "interactive":
            arguments: dict[str, Any] = {"file_path": absolute, "offset": first, "limit": size}
            return Done("Read", arguments, command, output, 0, [("path", path)])
        if shape == "autonomous":
            output.text = f"Lines {first}-{last} of {absolute}:\n{output.text}"
        arguments = {"command": "view", "path": absolute, "view_range": [first, last]}
        return Done("str_replace_editor", arguments, command, output, 0, [("path", path)])
    if step.kind == "edit":
        line = rng.randint(function.first + 2, function.last)
        old = module.lines[line - 1]
        new = f"{old}  # keep the partial {rng.choice(out.OBJECTS)}" if old else "    pass"
        shown = list(module.lines[max(0, line - 6) : line + 5])
        shown[min(5, line - 1)] = new
        snippet = out.numbered(
            shown, max(1, line - 5), "arrow" if shape == "interactive" else "tab"
        )
        command = (
            f"python - <<'EOF'\nfrom pathlib import Path\np = Path({path!r})\n"
            f"p.write_text(p.read_text().replace({old!r}, {new!r}, 1))\nEOF"
        )
        facts = [("path", path), ("identifier", function.name)]
        if shape == "interactive":
            text = f"The file {absolute} has been updated. The edited lines now read:\n{snippet}"
            arguments = {"file_path": absolute, "old_string": old, "new_string": new}
            return Done("Edit", arguments, command, Output(text), 0, facts)
        text = f"The file {absolute} was edited. Lines around the change:\n{snippet}"
        arguments = {"command": "str_replace", "path": absolute, "old_str": old, "new_str": new}
        return Done("str_replace_editor", arguments, command, Output(text), 0, facts)
    if step.kind == "create":
        body = (
            f"from {project.package}.{module.name} import {function.name}\n\n\ndef main():\n"
            f"    print({function.name}(load_fixture('partial'), limit=7))\n\n\nmain()\n"
        )
        command = f"cat <<'EOF' > {script}\n{body}EOF"
        if shape == "interactive":
            arguments = {"file_path": project.absolute(script), "content": body}
            return Done("Write", arguments, command, Output(f"Wrote {script}."), 0, [])
        arguments = {"command": "create", "path": project.absolute(script), "file_text": body}
        return Done("str_replace_editor", arguments, command, Output(f"Created {script}."), 0, [])
    if step.kind == "grep" and shape == "interactive":
        output = out.grep_hits(rng, project, function.name)
        arguments = {"pattern": function.name, "path": "src", "output_mode": "content", "-n": True}
        return Done("Grep", arguments, f"grep -rn {function.name} src", output, 0, [])
    command, output, returncode = shell(rng, project, step, script, test_path)
    tool = "Bash" if shape == "interactive" else "bash"
    return Done(tool, {"command": command}, command, output, returncode, [("command", command)])


def shell(
    rng: random.Random, project: Project, step: Step, script: str, test_path: str
) -> tuple[str, Output, int]:
    """The shell command of a step, its output and its return code."""
    module, size = step.module, step.size
    if step.kind == "list":
        folder = f"src/{project.package}"
        return f"ls -la {folder}", out.listing(rng, project, size), 0
    if step.kind == "find":
        command = "find . -name '*.py' -not -path './.git/*' | sort"
        return command, out.find_files(rng, project, size), 0
    if step.kind == "grep":
        return (
            f'grep -rn "{step.function.name}" src tests',
            out.grep_hits(rng, project, step.function.name),
            0,
        )
    if step.kind == "run":
        return f"python {script}", out.traceback(rng, project, script, size), 1
    if step.kind == "test":
        failures = rng.choice((0, 0, 1, 2, 3))
        flags = rng.choice(("-q", "-x -q", "-q -k partial", "--tb=short -q"))
        command = f"python -m pytest {test_path} {flags}"
        return command, out.test_run(rng, project, module, failures, size), int(failures > 0)
    if step.kind == "diff":
        return f"git diff {module.path}", out.diff(rng, module, size), 0
    if step.kind == "report":
        command = f"python tools/loc_report.py src/{project.package}"
        return command, out.report_table(rng, project, size), 0
    if step.kind == "markup":
        command = "curl -s http://127.0.0.1:8000/status"
        return command, out.html_page(rng, project, size), 0
    command = f"cat build/reports/junit-{module.name}.xml"
    return command, out.junit_xml(rng, project, module, size), 0
