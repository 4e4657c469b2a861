"""Rating an answer of ``evolve serve`` from the app that got it, whatever client it used.

The handle feedback takes is the response id, and each client keeps it somewhere else: the ``openai``
SDK's completion and stream chunks in ``.id``, and its Responses API response (``resp_…``) too; LangChain's
``ChatOpenAI`` in ``message.response_metadata["id"]`` for a whole answer (its ``AIMessage.id`` is LangChain's own run id)
and nowhere for a streamed one, unless the model was made with ``include_response_headers=True``: then
the ``x-evolve-response-id`` header every answer carries is in ``response_metadata["headers"]``.
``response_id`` finds it in any of these; ``rate`` posts the rating.

Example:
    >>> response_id({"id": "chatcmpl-7f3a"})
    'chatcmpl-7f3a'
    >>> # rate("http://127.0.0.1:8000/v1", "sk-alice-3f9c", llm.invoke("Door code?"), 1.0, comment="right")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connectors import ConfigError

HEADER = "x-evolve-response-id"
"""The header every answer of ``evolve serve`` carries its response id in (``evolve.serve.protocols.openai_http``)."""


def response_id(answer: Any) -> str:
    """The response id of an answer: a str, an ``openai`` completion, chunk or response (the Responses API's), a
    LangChain message or a dict.

    Raises:
        ConfigError: the answer carries no response id of ``evolve serve`` (say where to find it).
    """
    if isinstance(answer, str):
        return answer
    metadata = getattr(answer, "response_metadata", None)
    if isinstance(metadata, Mapping):  # LangChain: the body's id for a whole answer, else the header
        headers = {str(k).lower(): v for k, v in (metadata.get("headers") or {}).items()}
        found = metadata.get("id") or headers.get(HEADER)
        if isinstance(found, str) and found:
            return found
        raise ConfigError(
            "this LangChain message carries no evolve serve response id (a streamed answer keeps none): make the "
            f"model with ChatOpenAI(..., include_response_headers=True) and its {HEADER!r} header is kept"
        )
    found = answer.get("id") if isinstance(answer, Mapping) else getattr(answer, "id", None)
    if isinstance(found, str) and found.startswith(("chatcmpl-", "resp_")):
        return found
    raise ConfigError(f"expected an answer of evolve serve or its response id, got {type(answer).__name__}")


def rate(
    base_url: str,
    api_key: str,
    answer: Any,
    score: float,
    *,
    comment: str | None = None,
    key: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Post a rating (``score`` in [0, 1]) of ``answer`` to ``<base_url>/feedback``; returns the receipt
    (``applied``, ``reinforced``, ``reward``). ``key`` makes a repeat idempotent.

    Raises:
        ConfigError: no response id in ``answer``, or the server refused the rating (its message).
    """
    import httpx

    body: dict[str, Any] = {"response_id": response_id(answer), "score": score}
    if comment is not None:
        body["comment"] = comment
    if key is not None:
        body["key"] = key
    reply = httpx.post(
        f"{base_url.rstrip('/')}/feedback", json=body, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
    )
    if reply.status_code != 200:
        try:
            message = reply.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = reply.text[:200]
        raise ConfigError(f"evolve serve refused the rating ({reply.status_code}): {message}")
    return dict(reply.json())


__all__ = ["HEADER", "rate", "response_id"]
