"""Pure text matching and a sandboxed program runner: the building blocks of the task checkers.

Example:
    >>> matches_normalised("4471", "The code is **4471**."), matches_normalised("4471", "44711")
    (True, False)
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

MAX_EXTRA_WORDS = 10
"""The normalised checker accepts an answer containing the expected words plus at most this many more."""

# Punctuation stripped from the ends of an answer and of each word: sentence marks, quotes, brackets and
# markdown emphasis. Not "-", "+", "#", "%", "$" or "_", which change what a word means ("-3", "C#").
_END_PUNCT = ".,;:!?\"'`*()[]{}<>\u201c\u201d\u2018\u2019\u00ab\u00bb"
# A number not glued to a preceding word: optional sign, digits (with 1,234 thousands groups), decimals, exponent.
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_TAIL_LINES = 20


def normalise(text: str) -> str:
    """Casefold, collapse whitespace, strip punctuation at both ends: ``" The  Code. "`` → ``"the code"``."""
    return " ".join(text.casefold().split()).strip(_END_PUNCT + " ")


def words(text: str) -> list[str]:
    """Whitespace-separated words, casefolded, each stripped of end punctuation (empty ones dropped)."""
    stripped = (w.strip(_END_PUNCT) for w in text.casefold().split())
    return [w for w in stripped if w]


def matches_normalised(expected: str, answer: str) -> bool:
    """The normalised rule: equal after ``normalise``, or the expected words inside a short answer.

    The second case accepts "The code is **4471**." for "4471": the words of ``expected`` must appear
    as a contiguous run of whole words of ``answer``, and ``answer`` may have at most
    ``MAX_EXTRA_WORDS`` words more than ``expected``. Words keep inner punctuation, so "44711",
    "4471.5" and "4471-b" never match "4471". A short answer that names several candidates
    ("4471 or 4472") does pass: use ``exact`` or a ``regex`` where that matters.
    """
    if normalise(answer) == normalise(expected):
        return True
    want, got = words(expected), words(answer)
    if not want or len(got) > len(want) + MAX_EXTRA_WORDS:
        return False
    n = len(want)
    return any(got[i : i + n] == want for i in range(len(got) - n + 1))


def parse_number(text: str, *, whole: bool = False) -> float | None:
    """The last number in ``text`` (or ``text`` itself when ``whole``); ``None`` when there is none."""
    text = text.replace("\u2212", "-")
    if whole:
        found = _NUMBER.fullmatch(text.strip())
        token = found.group(0) if found else None
    else:
        token = next((m.group(0) for m in reversed(list(_NUMBER.finditer(text)))), None)
    return None if token is None else float(token.replace(",", ""))


def strip_code_fences(answer: str) -> str:
    """The code inside the first ```python (or bare ```) fence; the whole answer when it has no fence."""
    found = _FENCE.search(answer)
    return found.group(1) if found else answer


def run_program(code: str, *, timeout: float) -> tuple[bool, str]:
    """Run ``code`` with this interpreter (isolated mode) in a fresh temporary folder.

    Returns ``(passed, detail)``: passed when the exit code is 0; detail is the tail of stderr (else
    of stdout, else the exit code), or ``"timed out after N s"`` — the whole process group is killed.
    Output goes to files, not pipes, so a chatty program cannot block or fill memory.
    """
    with tempfile.TemporaryDirectory(prefix="evolve-task-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        script = work / "solution.py"
        script.write_text(code, encoding="utf-8")
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", str(script)],
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=os.name == "posix",
            )
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill(proc)
                logger.debug("killed a task program after %g s", timeout)
                return False, f"timed out after {timeout:g} s"
        if returncode == 0:
            return True, ""
        for stream in (err_path, out_path):
            text = _tail(stream).replace(str(script), "solution.py").strip()
            if text:
                return False, "\n".join(text.splitlines()[-_TAIL_LINES:])
        return False, f"exit code {returncode}"


def _tail(path: Path, size: int = 8192) -> str:
    """The last ``size`` bytes of a file as text: enough for a traceback, bounded for a flood of output."""
    with path.open("rb") as stream:
        stream.seek(max(0, stream.seek(0, os.SEEK_END) - size))
        return stream.read().decode("utf-8", errors="replace")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` and, on POSIX, every process it started (its own session)."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()
