"""The README stays short, and every relative link of README.md and docs/*.md leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.paths import REPO

README = REPO / "README.md"
MAX_README_LINES = 250  # docs/architecture.md, "Documentation"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def documents() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def links(document: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", document.read_text(encoding="utf-8")))
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the document's headings."""
    text = FENCE.sub("", document.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#+\s+(.+?)\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_readme_is_at_most_250_lines() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move the detail into docs/"


def test_the_documentation_pages_exist() -> None:
    names = {p.name for p in (REPO / "docs").glob("*.md")}
    expected = {"architecture.md", "semantics.md", "routing.md", "distributed.md", "compile.md",
                "cuda-platform.md", "building-wheels.md", "releasing.md", "development.md", "performance.md"}
    assert expected <= names


@pytest.mark.parametrize("document", documents(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_points_at_a_file_that_exists(document: Path) -> None:
    broken = []
    for target in links(document):
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{document.relative_to(REPO)}: " + "; ".join(broken)


def test_the_link_checker_sees_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## The `flccl` group\n")
    page.write_text("[a](other.md#the-flccl-group) [b](missing.md) [c](https://example.org/x.md) "
                    "`[d](inline-code.md)`\n```\n[e](fenced.md)\n```\n")
    assert links(page) == ["other.md#the-flccl-group", "missing.md"]
    assert "the-flccl-group" in anchors(tmp_path / "other.md")
