"""README.md and docs/*.md: every relative link resolves (file and #anchor), no hidden context."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(page: Path) -> str:
    """The page without its fenced code blocks (a `# comment` there is no heading)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", prose(page), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_anchor_rule_matches_github():
    page = REPO / "docs" / "models.md"
    assert "the-default-model-set" in anchors(page)
    assert "several-models-in-one-index" in anchors(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto: — not checked offline
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(REPO)}: " + ", ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_reference_to_a_tracker_the_reader_cannot_see(page):
    found = re.findall(r"\b(?:the issue|issue \d+)\b", page.read_text(encoding="utf-8"), re.I)
    assert not found, f"{page.relative_to(REPO)} mentions {found}"
