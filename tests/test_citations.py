"""Citations point at what the repository holds: no file cites a plan or notes that live outside it, every
Markdown path a file names exists, and every section of the design page a docstring cites is a heading
there (docs/design/decisions.md, whose headings give the docs site its anchors)."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DECISIONS = "docs/design/decisions.md"
NOT_SOURCE = {"build", "dist", "site", "node_modules", "__pycache__"}  # besides hidden folders and .venv*
# What lives outside the repository: the plan and the notes the project started from, and the folder
# beside it. (Written here as patterns; this file itself is not scanned for them.)
OUTSIDE = {
    re.compile(r"\bDESIGN\b"): "the plan outside the repository: cite docs/design/decisions.md",
    re.compile(r"\bREFERENCE\.md\b"): "notes outside the repository",
    re.compile(r"\bSTYLE\.md\b"): "notes outside the repository",
    re.compile(r"\.\./shared\b"): "a folder outside the repository",
}
MD_PATH = re.compile(r"(?<![\w./:{}<>-])((?:\.\.?/)*[\w.-]+(?:/[\w.-]+)*\.md)(?![\w/])")
CITED_TITLES = re.compile(r"decisions\.md,((?:\s*#?\s*(?:and\s+)?\"[^\"\n]+\")+)")
ANCHOR_LINK = re.compile(r"decisions\.md#([\w-]+)")
PUBLISHED = {"bench-results": "bench/results"}  # docs/ links to bench/results/ as the site publishes it


def source_files(suffixes: tuple[str, ...] = (".py", ".md")) -> Iterator[Path]:
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if not (s.startswith(".") or s in NOT_SOURCE or s.endswith(".egg-info"))]
        for name in names:
            if name.endswith(suffixes):
                yield Path(folder) / name


@cache
def basenames() -> frozenset[str]:
    return frozenset(p.name for p in source_files((".md",)))


def where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, offset) + 1}"


def scanned() -> Iterator[tuple[Path, str]]:
    for path in sorted(source_files()):
        if path != Path(__file__).resolve():
            yield path, path.read_text(encoding="utf-8", errors="replace")


def test_no_file_cites_what_lives_outside_the_repository() -> None:
    wrong = [
        f"{where(path, text, hit.start())} cites {hit.group(0)!r}: {why}"
        for path, text in scanned()
        for pattern, why in OUTSIDE.items()
        for hit in pattern.finditer(text)
    ]
    assert wrong == []


def exists(cited: str, path: Path, *, link: bool) -> bool:
    """A Markdown link's target resolves from the linking file's folder (under docs/, also as the site
    publishes bench/results/). Any other path with a folder resolves from the repository root, from the
    citing file's folder or from docs/ (a page of the site, as mkdocs.yml and its hooks name them). Any
    other bare file name exists when some file of the repository has that name, or anywhere under bench/
    (a benchmark names the page it writes)."""
    if link:
        candidates = [path.parent / cited]
    elif "/" in cited:
        candidates = [ROOT / cited, path.parent / cited, ROOT / "docs" / cited]
    else:
        return cited in basenames() or (path.parent / cited).exists() or path.is_relative_to(ROOT / "bench")
    for candidate in candidates:
        resolved = Path(os.path.normpath(candidate))
        if resolved.exists():
            return True
        if resolved.is_relative_to(ROOT / "docs"):
            inside = resolved.relative_to(ROOT / "docs").as_posix()
            for site, folder in PUBLISHED.items():
                if inside.startswith(site + "/") and (ROOT / folder / inside.removeprefix(site + "/")).exists():
                    return True
    return False


def test_every_markdown_path_a_file_names_exists() -> None:
    missing = [
        f"{where(path, text, hit.start())} names {hit.group(1)}, which the repository does not hold"
        for path, text in scanned()
        for hit in MD_PATH.finditer(text)
        if not exists(hit.group(1), path, link=path.suffix == ".md" and text[: hit.start()].endswith("]("))
    ]
    assert missing == []


def headings(markdown: str) -> list[str]:
    """The page's headings, outside fenced code."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.+?)\s*#*$", line)):
            found.append(m.group(1))
    return found


def slug(title: str) -> str:
    """The anchor MkDocs gives a heading (Python-Markdown's toc ``slugify``)."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def test_the_design_page_has_one_heading_per_title() -> None:
    titles = headings((ROOT / DECISIONS).read_text(encoding="utf-8"))
    assert len(titles) >= 20
    assert len({slug(t) for t in titles}) == len(titles)


def test_every_cited_section_of_the_design_page_is_a_heading_there() -> None:
    titles = headings((ROOT / DECISIONS).read_text(encoding="utf-8"))
    anchors = {slug(t) for t in titles}
    cited = 0
    wrong = []
    for path, text in scanned():
        for hit in CITED_TITLES.finditer(text):
            for title in re.findall(r"\"([^\"\n]+)\"", hit.group(1)):
                cited += 1
                if title not in titles:
                    wrong.append(f"{where(path, text, hit.start())} cites {title!r}, not a heading of {DECISIONS}")
        for hit in ANCHOR_LINK.finditer(text):
            if hit.group(1) not in anchors:
                wrong.append(f"{where(path, text, hit.start())} links #{hit.group(1)}, not an anchor of {DECISIONS}")
    assert wrong == []
    assert cited >= 20  # the library's docstrings cite the page: a pattern that stopped matching finds none
