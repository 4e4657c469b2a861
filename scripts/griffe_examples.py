"""A griffe extension for the docs site: this code base heads its doctests ``Example:`` (one example), which
griffe's Google parser knows only as ``Examples:``; read as such, they render as code, not as prose."""

from __future__ import annotations

import re
from typing import Any

import griffe

HEADING = re.compile(r"^(\s*)Example:\s*$", re.M)


class SingularExamples(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = HEADING.sub(r"\1Examples:", obj.docstring.value)
