"""A size cap on HTTP answers: an httpx2 transport that refuses a body larger than ``max_bytes``.

A model server that ignores ``max_tokens`` (or a proxy gone wrong) can send an answer of any size; the
openai SDK would read all of it into memory and hand it on. ``CappedTransport`` checks the declared
``Content-Length`` before reading and counts the bytes of bodies that declare none, so at most
``max_bytes`` (plus one network chunk) is ever held, and the call fails with ``ResponseTooLarge``.

Example:
    >>> import httpx2
    >>> client = httpx2.Client(transport=CappedTransport(httpx2.HTTPTransport(), max_bytes=1 << 20))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2


class ResponseTooLarge(Exception):
    """An HTTP body passed the cap; the SDK wraps it, ``OpenAIChat`` turns it into a ``ConnectorError``."""

    def __init__(self, max_bytes: int, seen: int, declared: bool) -> None:
        how = "declared" if declared else "more than"
        super().__init__(f"the answer is {how} {seen} bytes, over the cap of {max_bytes} bytes")
        self.max_bytes, self.seen = max_bytes, seen


class CappedStream(httpx2.SyncByteStream):
    """The inner body, chunk by chunk, until the count passes ``max_bytes``."""

    def __init__(self, inner: httpx2.SyncByteStream, max_bytes: int) -> None:
        self._inner, self._max = inner, max_bytes

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._max:
                raise ResponseTooLarge(self._max, seen, declared=False)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class CappedTransport(httpx2.BaseTransport):
    """Wraps a transport so that no answer body over ``max_bytes`` is read.

    Args:
        inner: the transport that talks to the network (``httpx2.HTTPTransport(...)``).
        max_bytes: the largest body accepted, in bytes.
    """

    def __init__(self, inner: httpx2.BaseTransport, *, max_bytes: int) -> None:
        self._inner, self.max_bytes = inner, max_bytes

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            response.close()
            raise ResponseTooLarge(self.max_bytes, int(declared), declared=True)
        stream: Any = response.stream
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=CappedStream(stream, self.max_bytes),
            extensions=response.extensions,
            request=request,
        )

    def close(self) -> None:
        self._inner.close()


def cause_of(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``error``'s chain of causes, else None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
