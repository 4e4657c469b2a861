"""MkDocs hooks for the docs site (``mkdocs.yml``): what the site shows that lives outside ``docs/``.

- ``bench/results/`` (every bench's tables, curves and figures) is published under ``bench-results/``, so
  the Results pages link to the files the benches write, not to copies;
- the command-line reference (``reference/cli.md``) gets every command's help, generated from the
  parsers the ``evolve`` command runs (``apps.cli.parser``): the page cannot drift from the CLI.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PUBLISHED = (".md", ".png", ".json", ".csv")
CLI_PAGE = "reference/cli.md"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(RESULTS.rglob("*")):
        if path.is_file() and path.suffix in PUBLISHED:
            uri = "bench-results/" + path.relative_to(RESULTS).as_posix()
            files.append(File(uri, str(RESULTS), config["site_dir"], config["use_directory_urls"]))
            files.get_file_from_path(uri).abs_src_path = str(path)  # type: ignore[union-attr]
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri != CLI_PAGE:
        return markdown
    return markdown + "\n" + cli_reference()


def cli_reference() -> str:
    """``evolve -h`` and every command's ``-h`` (and its subcommands'), as the terminal prints them."""
    sys.path.insert(0, str(ROOT))
    from apps.cli import parser

    os.environ.setdefault("COLUMNS", "100")  # the same wrapping wherever the site is built
    out = ["## Every command's help", "", "Generated from the parsers `evolve` runs (`apps/cli.py`).", ""]
    for name, command in commands(parser(), "evolve"):
        out += [f"### `{name}`", "", "```text", help_text(command).rstrip(), "```", ""]
    return "\n".join(out)


def commands(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found += commands(sub, f"{name} {sub_name}")
    return found


def help_text(parser: argparse.ArgumentParser) -> str:
    buffer = io.StringIO()
    parser.print_help(buffer)
    return buffer.getvalue()
