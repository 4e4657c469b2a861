"""Streamed answers: ``StreamedCompletion``, what a backend's ``stream(messages, **params)`` returns.

A backend that can send its answer while generating it has, besides ``complete``, a ``stream`` with the
same parameters (tools aside). It returns a ``StreamedCompletion``: iterating it gives the text deltas as
they come, and once they end, ``completion`` is the same ``Completion`` ``complete`` would give (text,
usage, ``finish_reason``). A reader that stops early calls ``close()``: the backend stops generating and
``completion`` holds the text sent so far with ``finish_reason`` ``"cancelled"``. ``ChatClient.stream``
wraps the seam (retries before the first delta, usage accounting at the end); a backend without
``stream`` is answered by ``complete`` as one delta.

Example:
    >>> s = StreamedCompletion.whole(Completion("The door code is 4471.", "fake"))
    >>> list(s), s.completion.finish_reason
    (['The door code is 4471.'], None)
    >>> split_words("The door code is 4471.")
    ['The ', 'door ', 'code ', 'is ', '4471.']
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from connectors.errors import ConfigError
from connectors.types import Completion

log = logging.getLogger(__name__)

CANCELLED = "cancelled"
"""The ``finish_reason`` of an answer whose reader closed the stream before it ended."""


class StreamedCompletion:
    """One answer as it is generated: iterate for the text deltas; ``completion`` once they end.

    A backend builds one from a generator of deltas and ``finish(text, cut)``, which makes the
    ``Completion`` when the deltas run out (``cut`` False) or when the reader closes the stream before
    that (``cut`` True: the backend has stopped generating; the completion's ``finish_reason`` should be
    ``"cancelled"``). The completion's text is always the deltas the reader took, joined. Empty deltas
    are skipped. A stream that fails (an exception from its deltas) has no completion.

    Example:
        >>> def deltas():
        ...     yield "4"
        ...     yield "2"
        >>> def finish(text, cut):
        ...     return Completion(text, "fake", finish_reason=CANCELLED if cut else "stop")
        >>> s = StreamedCompletion(deltas(), finish)
        >>> next(s.start()), s.completion, s.close(), s.completion.text, s.completion.finish_reason
        ('4', None, None, '4', 'cancelled')
    """

    def __init__(self, deltas: Iterator[str], finish: Callable[[str, bool], Completion]) -> None:
        self._deltas = deltas
        self._finish = finish
        self._pending: list[str] = []
        self._sent: list[str] = []
        self._ended = False
        self._on_end: list[Callable[[Completion], None]] = []
        self.completion: Completion | None = None

    @classmethod
    def whole(cls, completion: Completion) -> StreamedCompletion:
        """A finished ``completion`` as a stream of one delta (a backend that cannot stream)."""

        def finish(text: str, cut: bool) -> Completion:
            return dataclasses.replace(completion, text=text, finish_reason=CANCELLED) if cut else completion

        return cls(iter([completion.text]), finish)

    @property
    def text(self) -> str:
        """The text the reader has taken so far."""
        return "".join(self._sent)

    @property
    def ended(self) -> bool:
        """True once the deltas ran out, the stream was closed, or it failed."""
        return self._ended

    def on_end(self, callback: Callable[[Completion], None]) -> None:
        """Call ``callback(completion)`` once, when the stream ends or is closed (at once if it has)."""
        if self.completion is not None:
            callback(self.completion)
        elif not self._ended:
            self._on_end.append(callback)

    def start(self) -> StreamedCompletion:
        """Wait for the first delta (or the end), so that a failure before any text is raised here."""
        if not self._pending and not self._ended:
            try:
                self._pending.append(self._pull())
            except StopIteration:
                pass
        return self

    def __iter__(self) -> StreamedCompletion:
        return self

    def __next__(self) -> str:
        delta = self._pending.pop(0) if self._pending else self._pull()
        self._sent.append(delta)
        return delta

    def close(self) -> None:
        """Stop reading: the backend stops generating and ``completion`` holds what was taken so far
        (``finish_reason`` ``"cancelled"``). A stream that has ended is left as it is."""
        if self._ended:
            return
        self._ended = True
        self._pending.clear()
        close = getattr(self._deltas, "close", None)
        if close is not None:
            close()
        self._end(cut=True)

    def __enter__(self) -> StreamedCompletion:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pull(self) -> str:
        if self._ended:
            raise StopIteration
        try:
            delta = next(self._deltas)
            while not delta:
                delta = next(self._deltas)
        except StopIteration:
            self._ended = True
            self._end(cut=False)
            raise
        except BaseException:
            self._ended = True  # a failed stream has no completion
            raise
        return delta

    def _end(self, *, cut: bool) -> None:
        text = self.text
        completion = self._finish(text, cut)
        if completion.text != text:  # the seam's promise: the completion is what the reader got
            log.warning("%s: the streamed text and the final text differ; keeping the streamed text", completion.model)
            completion = dataclasses.replace(completion, text=text)
        self.completion = completion
        callbacks, self._on_end = self._on_end, []
        for callback in callbacks:
            callback(completion)


def split_words(text: str) -> list[str]:
    """Word-sized pieces (each keeps its trailing whitespace) that join back to ``text`` exactly."""
    return re.findall(r"\S+\s*|\s+", text)


def sendable(text: str, stop: Sequence[str]) -> tuple[int, bool]:
    """How much of ``text`` (a growing answer) can be sent now, and whether a stop string was reached.

    Text is held back at the first stop string, and where its end could still grow into one (a suffix
    that starts a stop string) or into a character (a trailing U+FFFD, half of a multi-byte character).

    Example:
        >>> sendable("The code is 44", ["\\n\\n", "###"]), sendable("4471.\\n", ["\\n\\n"]), sendable("a###b", ["###"])
        ((14, False), (5, False), (1, True))
    """
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    if found:
        return min(found), True
    limit = len(text.rstrip("\ufffd"))
    starts = [k for s in stop for k in range(1, min(len(s) - 1, limit) + 1) if s.startswith(text[limit - k : limit])]
    return limit - max(starts, default=0), False


def refuse_tools(name: str, tools: Any, tool_choice: Any) -> None:
    """A backend's ``stream`` answers text only; ``ChatClient.stream`` sends a request with tools to ``complete``."""
    if tools or tool_choice is not None:
        raise ConfigError(
            f"{name}: stream() answers text only, without tools; ask complete(tools=…) "
            "(ChatClient.stream does that for a request with tools)"
        )


__all__ = ["CANCELLED", "StreamedCompletion", "refuse_tools", "sendable", "split_words"]
