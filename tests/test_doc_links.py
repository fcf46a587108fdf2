"""The hand-written guide (README.md, CONTRIBUTING.md, docs/*.md) and the generated reference link to each other
by relative paths; a moved section or a renamed page must not leave a link that leads nowhere on GitHub."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from conftest import REPO

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)
_ANCHOR_TAG = re.compile(r'<a id="([^"]+)"></a>')


def _pages() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


def _prose(text: str) -> str:
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def github_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown page: one per heading (lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered -1, -2 ...) and every explicit <a id>."""
    anchors: set[str] = set(_ANCHOR_TAG.findall(text))
    seen: dict[str, int] = {}
    for title in _HEADING.findall(_FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@functools.cache
def _anchors_of(page: Path) -> set[str]:
    return github_anchors(page.read_text(encoding="utf-8"))  # a page links to its own sections hundreds of times


def test_the_anchor_of_a_heading_is_githubs():
    text = "# Team rules: start your own pack in five minutes\n## `diagnose profile`\n## Notes\n## Notes\n" \
           "```\n# not a heading\n```\n"
    assert github_anchors(text) == {"team-rules-start-your-own-pack-in-five-minutes", "diagnose-profile",
                                    "notes", "notes-1"}


def test_the_guide_is_split_into_pages_the_front_page_links_to():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for page in ("usage", "capture", "team-rules", "compare-ci", "batch", "security", "troubleshooting"):
        assert f"](docs/{page}.md" in readme, page
    assert "](docs/rules/README.md)" in readme and "](docs/facts.md)" in readme


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_its_anchor(page: Path):
    text = page.read_text(encoding="utf-8")
    for target in _LINK.findall(_prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(REPO)} links to {target}"
        assert resolved.exists(), f"{where}, which does not exist"
        assert REPO in resolved.parents or resolved == REPO, f"{where}, outside the repository"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors_of(resolved), f"{where}: no such anchor"


# A docstring, fact @doc, rule comment or template that sends the reader to a section names it as
# `docs/PAGE.md "Heading"` (or `README "Heading"`); the section must exist, or the pointer leads nowhere once a page
# is split or a heading renamed.
_SECTION_REFERENCE = re.compile(r'((?:docs/[\w/-]+\.md)|README|CONTRIBUTING(?:\.md)?) \\?"([^"\\]+?)\\?"')


def _referring_files() -> list[Path]:
    roots = [REPO / "engine", REPO / "rules", REPO / "reports" / "templates", REPO / "docs", REPO / "tools",
             REPO / "fixtures"]
    suffixes = {".py", ".sql", ".yaml", ".j2", ".md"}
    return [REPO / "CONTRIBUTING.md", REPO / "README.md",
            *(p for root in roots for p in sorted(root.rglob("*")) if p.suffix in suffixes and p.is_file())]


def test_every_section_a_comment_or_doc_points_to_exists():
    headings: dict[str, set[str]] = {}

    def headings_of(name: str) -> set[str]:
        page = {"README": "README.md", "CONTRIBUTING": "CONTRIBUTING.md"}.get(name, name)
        if page not in headings:
            path = REPO / page
            text = path.read_text(encoding="utf-8") if path.is_file() else ""
            headings[page] = {" ".join(t.replace("`", "").split()) for t in _HEADING.findall(_FENCE.sub("", text))}
        return headings[page]

    stale = []
    for path in _referring_files():
        text = path.read_text(encoding="utf-8")
        # a reference may wrap over a comment or docstring line: join the lines, dropping comment markers
        joined = re.sub(r"\s*\n\s*(?:--\s*@doc|#|--)?\s*", " ", text)
        for page, section in _SECTION_REFERENCE.findall(joined):
            if " ".join(section.split()) not in headings_of(page):
                stale.append(f"{path.relative_to(REPO)}: {page} \"{section}\"")
    assert not stale, "these point to a section that does not exist (moved or renamed?):\n" + "\n".join(stale)
