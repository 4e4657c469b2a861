"""Keeping secrets out of messages: database URL passwords, API keys and bearer tokens.

Every place that formats a URL or a provider's text into a log record, an exception or an export goes
through these helpers, so a password in ``postgresql://user:pw@host/db`` or an API key echoed back by a
server never reaches a log file, an HTTP error body or a bug report.

Example:
    >>> redact_url("postgresql+psycopg://evolve:hunter2@db.internal:5432/runs")
    'postgresql+psycopg://evolve:***@db.internal:5432/runs'
    >>> redact_url("evolve:hunter2@db.internal/runs")
    'evolve:***@db.internal/runs'
    >>> redact("refused key sk-live-123456 at https://u:p@example.com", ["sk-live-123456"])
    'refused key *** at https://u:***@example.com'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"

# scheme://user:password@  — the password is anything up to the last '@' before the host.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*:)(?P<pw>[^\s'\"]*)(?P<at>@)")
# user:password@host with no scheme (a URL typed without its "postgresql://").
_BARE_PASSWORD = re.compile(r"^(?P<head>\s*[^\s:/@'\"]+:)(?P<pw>[^\s@'\"]+)(?P<at>@)")
# Authorization: Bearer <token> (as an HTTP header or inside a message).
_BEARER = re.compile(r"(?i)(?P<head>\bbearer\s+)(?P<token>[A-Za-z0-9._~+/=-]{4,})")
# Secrets shorter than this are not searched for: masking every "a" would garble messages and hide nothing.
MIN_SECRET = 4


def redact_url(url: object) -> str:
    """``url`` as text with its password (if any) replaced by ``***``; anything else is kept.

    Works on plain strings and on SQLAlchemy ``URL`` objects (whose ``str`` already hides it).
    """

    def mask(m: re.Match[str]) -> str:
        return f"{m['head']}{MASK}{m['at']}" if m["pw"] else m.group()

    text = str(url)
    return _URL_PASSWORD.sub(mask, text) if "://" in text else _BARE_PASSWORD.sub(mask, text)


def redact(text: object, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every given secret, URL password and bearer token replaced by ``***``.

    Args:
        text: the message (any object; its ``str`` is used).
        secrets: exact strings to mask wherever they occur (API keys, passwords); None and strings
            shorter than ``MIN_SECRET`` characters are skipped.
    """
    out = redact_url(text)
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_SECRET}, key=len, reverse=True):
        out = out.replace(secret, MASK)
    return _BEARER.sub(lambda m: f"{m['head']}{MASK}", out)


__all__ = ["MASK", "redact", "redact_url"]
