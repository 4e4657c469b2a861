"""Streaming from an in-process transformers model: generation in a thread, new tokens through a queue,
text sent as soon as it cannot change any more.

``stream_generation(generate, decode, stop)`` runs ``generate(extra)`` — a backend's own generation
call, given the extra ``generate`` arguments (a streamer that queues each new token, a stopping
criterion that ends it when the reader closes the stream) — in a thread, and returns a
``StreamedCompletion`` whose deltas are the answer decoded so far. The tokens come one at a time, and
the prefix decoded so far is sent, except a tail that could still become a ``stop`` string or a
multi-byte character; at the end, the rest of the completion ``generate`` returned. So the joined deltas
are exactly the text the backend's ``complete`` gives for the same parameters.

transformers' ``TextIteratorStreamer`` sends decoded text only; this streams token ids, so the final
completion (usage, ``finish_reason``, logprobs) comes from the same code as a plain call.

torch and transformers are imported when a stream starts, never when ``connectors`` is imported.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from connectors.streaming import CANCELLED, StreamedCompletion, sendable
from connectors.types import Completion


def stream_generation(
    generate: Callable[[Mapping[str, Any]], Completion],
    decode: Callable[[list[int]], str],
    stop: Sequence[str] = (),
    *,
    name: str = "local",
) -> StreamedCompletion:
    """One answer of ``generate`` streamed as it is generated.

    Args:
        generate: runs the model with the given extra ``generate`` keyword arguments and returns the
            one completion, exactly as a plain call makes it (holding whatever lock the model needs).
        decode: token ids of the answer so far → their text, as the completion's text is decoded.
        stop: the stop strings: text is held back where it could be the start of one.
        name: the model's name, for the thread and for a completion cut before any was made.
    """
    tokens: queue.Queue[list[int] | None] = queue.Queue()
    cancel = threading.Event()
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["completion"] = generate(generate_hooks(tokens, cancel))
        except BaseException as e:  # the reader raises it
            done["error"] = e
        finally:
            tokens.put(None)

    worker = threading.Thread(target=run, name=f"{name}-stream", daemon=True)
    worker.start()

    def deltas() -> Iterator[str]:
        ids: list[int] = []
        sent = 0
        while (more := tokens.get()) is not None:
            ids.extend(more)
            text = decode(ids)
            limit, _ = sendable(text, stop)
            if limit > sent:
                yield text[sent:limit]
                sent = limit
        worker.join()
        if "error" in done:
            raise done["error"]
        yield done["completion"].text[sent:]  # what was held back, up to the stop string

    def finish(text: str, cut: bool) -> Completion:
        cancel.set()  # a closed stream: generation ends at its next token
        worker.join()
        if not cut:
            return done["completion"]  # type: ignore[no-any-return]
        whole = done.get("completion") or Completion("", name)
        return dataclasses.replace(whole, text=text, finish_reason=CANCELLED)

    return StreamedCompletion(deltas(), finish)


def generate_hooks(tokens: queue.Queue[list[int] | None], cancel: threading.Event) -> dict[str, Any]:
    """``generate`` arguments that put each new token on ``tokens`` and stop once ``cancel`` is set."""
    import torch
    from transformers import StoppingCriteria
    from transformers.generation.streamers import BaseStreamer

    class TokenQueue(BaseStreamer):
        prompt = True  # generate() puts the prompt first

        def put(self, value: Any) -> None:
            if not self.prompt:
                tokens.put([int(t) for t in value.reshape(-1).tolist()])
            self.prompt = False

        def end(self) -> None:
            pass  # the thread puts the end on the queue once its completion is made

    class Cancelled(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool, device=input_ids.device)

    return {"streamer": TokenQueue(), "stopping_criteria": [Cancelled()]}


__all__ = ["generate_hooks", "stream_generation"]
