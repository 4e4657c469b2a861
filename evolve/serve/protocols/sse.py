"""Server-sent events as ``evolve serve``'s routes send them: events made in worker threads (each may wait for
the team's model) and closed when the response ends for any reason, the client going away included, so an
answer cut short is recorded at once (``evolve.serve.streaming``).

Example:
    >>> list(named_events(iter([{"type": "response.created", "sequence_number": 0}])))[0].splitlines()[0]
    'event: response.created'
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any


async def relay(events: Iterator[str]) -> AsyncIterator[str]:
    """``events`` read in worker threads, closed in one when the response ends for any reason, the client
    going away included: a stream cut short is recorded at once."""
    import anyio
    from starlette.concurrency import iterate_in_threadpool

    try:
        async for event in iterate_in_threadpool(events):
            yield event
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            with anyio.CancelScope(shield=True):  # runs even while the response task is being cancelled
                await anyio.to_thread.run_sync(close)


def named_events(events: Iterator[dict[str, Any]]) -> Iterator[str]:
    """Events named by their ``type`` (``event: <type>`` then ``data: <JSON>``), as OpenAI's Responses API sends
    them, with no ``[DONE]``. Closing this generator closes ``events``."""
    try:
        for event in events:
            yield f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


__all__ = ["named_events", "relay"]
