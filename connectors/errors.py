"""Errors, grouped by how the caller recovers.

``EvolveError`` is the one base. ``ConfigError``: fix the call. ``ConnectorError``: the outside world
failed; ``retryable`` says whether trying again can help (``RateLimited``, ``ProviderTimeout``).
``ParseError``: a model's answer did not have the expected shape; ``.raw`` keeps it so it can be fed
back. ``StoreError``: the memory or prompt store refused an operation; nothing stored was changed.
"""

from __future__ import annotations


class EvolveError(Exception):
    """Base of every error Evolve raises on purpose."""


class ConfigError(EvolveError, ValueError):
    """A call, spec or setting is wrong; the message says what was expected and what arrived."""


class ConnectorError(EvolveError):
    """A backend (model server, embedder, database driver) failed."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class RateLimited(ConnectorError):
    """The provider asked us to slow down; ``retry_after`` is its hint in seconds, if it gave one."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderTimeout(ConnectorError):
    """The provider did not answer in time."""

    retryable = True


class ParseError(EvolveError):
    """A model's output could not be parsed; ``raw`` holds it verbatim."""

    def __init__(self, message: str, *, raw: str) -> None:
        super().__init__(message)
        self.raw = raw


class StoreError(EvolveError):
    """The store refused an operation (unknown id, bad value, conflicting state); nothing was changed."""


def same_kind(cause: ConnectorError | None, message: str) -> ConnectorError:
    """A ``ConnectorError`` saying ``message`` that recovers like ``cause``: a ``RateLimited`` keeps its
    ``retry_after``, a ``ProviderTimeout`` stays one, any other keeps ``retryable``; the cause is chained."""
    error: ConnectorError
    if isinstance(cause, RateLimited):
        error = RateLimited(message, retry_after=cause.retry_after)
    elif isinstance(cause, ProviderTimeout):
        error = ProviderTimeout(message)
    else:
        error = ConnectorError(message, retryable=cause.retryable if cause is not None else None)
    error.__cause__ = cause
    return error
