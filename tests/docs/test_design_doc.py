"""docs/design.md is where comments send a reader: every pointer must land on a section."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
POINTER = re.compile(r"docs/design\.md#([A-Za-z0-9_-]+)")
ANCHOR = re.compile(r'<a id="([A-Za-z0-9_-]+)"></a>')
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)


def heading_slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def design_anchors() -> set[str]:
    text = DESIGN.read_text(encoding="utf-8")
    return set(ANCHOR.findall(text)) | {heading_slug(h) for h in HEADING.findall(text)}


def pointing_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "config" / "memoryd.toml"]
    for folder in ("memoryd", "tests", "bench"):
        files += sorted((REPO / folder).rglob("*.py"))
    files += sorted((REPO / "bench").glob("*.md"))
    return [path for path in files if path.is_file()]


def test_every_pointer_into_the_design_names_an_existing_section() -> None:
    """Each pointer into the design (its path, ``#``, an anchor) in the code, tests,
    benchmarks, README and example configuration names an anchor (or a heading) that
    docs/design.md has."""
    anchors = design_anchors()
    pointers = [
        (path.relative_to(REPO), number, anchor)
        for path in pointing_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for anchor in POINTER.findall(line)
    ]
    assert pointers, "no pointer into docs/design.md found: the search itself is broken"
    dangling = [
        f"{path}:{number}: #{anchor}" for path, number, anchor in pointers if anchor not in anchors
    ]
    assert not dangling, "pointers to sections docs/design.md does not have:\n" + "\n".join(
        dangling
    )


def test_the_design_anchors_are_unique() -> None:
    """Two sections with one explicit anchor would make a pointer ambiguous."""
    explicit = ANCHOR.findall(DESIGN.read_text(encoding="utf-8"))
    assert len(explicit) == len(set(explicit))


def test_the_readme_links_the_design() -> None:
    assert "(docs/design.md)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_links_inside_the_design_land_on_its_sections() -> None:
    """``[text](#anchor)`` links within docs/design.md name anchors it has."""
    text = DESIGN.read_text(encoding="utf-8")
    anchors = design_anchors()
    links = re.findall(r"\]\(#([A-Za-z0-9_-]+)\)", text)
    assert links
    assert [link for link in links if link not in anchors] == []
