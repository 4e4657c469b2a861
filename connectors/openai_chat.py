"""``OpenAIChat``: any OpenAI-compatible chat endpoint through the official ``openai`` SDK.

``base_url`` serves vLLM, Ollama, llama.cpp servers and other compatible endpoints. The SDK's own
retries are off: ``ChatClient`` owns retries, so one policy (with ``Retry-After``) covers every
backend. SDK errors are translated here, once, into ours: 429 → ``RateLimited``, timeouts →
``ProviderTimeout``, connection errors and 5xx → retryable ``ConnectorError``, other 4xx → a
``ConnectorError`` that retrying cannot fix. ``stream`` sends the answer as the server does
(``stream=True``), with the usage the server reports at the end.

Example:
    >>> from connectors import load_chat
    >>> chat = load_chat("openai/gpt-4o-mini", prices=(0.15, 0.60))              # doctest: +SKIP
    >>> chat.complete("Say hi", caller="greeter").usage.cost > 0                  # doctest: +SKIP
    True
"""

from __future__ import annotations

import email.utils
import ipaddress
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from connectors.errors import ConfigError, ConnectorError, ProviderTimeout, RateLimited
from connectors.prompted_tools import check_tools
from connectors.redact import redact
from connectors.streaming import CANCELLED, StreamedCompletion, refuse_tools
from connectors.tools import Tool, ToolCall, arguments_of
from connectors.types import Completion, Message, Usage

log = logging.getLogger(__name__)

# Local servers (vLLM, Ollama, llama.cpp) accept any key; the SDK insists on one.
LOCAL_PLACEHOLDER_KEY = "sk-no-key-needed"
# Far above any chat answer (16k tokens with logprobs is a few MB); only a runaway server reaches it.
MAX_RESPONSE_BYTES = 16 << 20
KEY_HINT = "check the API key (OPENAI_API_KEY or api_key=)"


def is_local_url(url: str) -> bool:
    """True for servers on this machine or a private network: ``localhost``, loopback and private IPs,
    single-label host names (``http://vllm:8000``) and ``*.local``."""
    host = (urlsplit(url).hostname or "").lower()
    if not host:
        return False
    if host == "localhost" or host.endswith((".localhost", ".local")) or ("." not in host and ":" not in host):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``Retry-After-Ms`` / ``Retry-After`` (seconds or an HTTP date), else None."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def price_of(usage: Usage, prices: tuple[float, float] | None) -> float:
    """Cost in US dollars of ``usage`` at ``prices`` = (USD per 1M input tokens, USD per 1M output tokens)."""
    if prices is None:
        return 0.0
    return (usage.prompt_tokens * prices[0] + usage.completion_tokens * prices[1]) / 1_000_000


def translate_error(error: Exception, name: str, secrets: Sequence[str | None] = ()) -> ConnectorError:
    """Our error for one of the SDK's, shaped by how the caller recovers. Never includes the API key:
    a 401/403 drops the server's text, and any other text has ``secrets`` (the key) and URL passwords masked."""
    return _translate(error, name, lambda text: redact(text, secrets))


def _translate(error: Exception, name: str, clean: Callable[[object], str]) -> ConnectorError:
    import openai

    if isinstance(error, openai.APITimeoutError):
        return ProviderTimeout(f"{name}: the server did not answer in time ({clean(error)})")
    if isinstance(error, openai.APIConnectionError):
        return ConnectorError(f"{name}: cannot reach the server ({clean(error)})", retryable=True)
    if not isinstance(error, openai.APIStatusError):
        return ConnectorError(f"{name}: unexpected response from the server: {clean(error)}", retryable=False)
    status = error.status_code
    if status in (401, 403):
        # The server's message is dropped on purpose: some servers echo (part of) the key back.
        return ConnectorError(f"{name}: the server refused the request (HTTP {status}); {KEY_HINT}", retryable=False)
    detail = f"{name}: HTTP {status}: {clean(error.message)}"
    if status == 429:
        return RateLimited(detail, retry_after=parse_retry_after(error.response.headers))
    if status == 408:
        return ProviderTimeout(detail)
    return ConnectorError(detail, retryable=status >= 500)


class OpenAIChat:
    """A chat model behind any OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        model: the model name the server knows (``"gpt-4o-mini"``, ``"Qwen/Qwen2.5-7B-Instruct"``).
        base_url: the endpoint (default: the SDK's, i.e. ``$OPENAI_BASE_URL`` or OpenAI).
        api_key: default ``$OPENAI_API_KEY``; a local server needs none.
        timeout: seconds per request.
        client: a ready ``openai.OpenAI`` (then ``base_url``, ``api_key``, ``timeout`` and
            ``max_response_bytes`` are unused).
        prices: USD per 1M input and per 1M output tokens, for cost accounting.
        max_response_bytes: the largest answer body read; a server that sends more (one that ignores
            ``max_tokens``) fails the call with a ``ConnectorError`` instead of filling memory.

    Example:
        >>> chat = OpenAIChat("qwen2.5", base_url="http://localhost:8000/v1")   # doctest: +SKIP
        >>> chat.complete([Message("user", "2 + 2 = ?")], temperature=0).text   # doctest: +SKIP
        '4'
    """

    native_response_format = True  # the server takes response_format and constrains its decoding to it
    takes_penalties = True  # presence_penalty and frequency_penalty go to the server

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
        prices: tuple[float, float] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if not model:
            raise ConfigError("OpenAIChat needs a model name, got an empty string")
        if prices is not None and (len(prices) != 2 or any(p < 0 for p in prices)):
            raise ConfigError(
                f"prices must be (USD per 1M input tokens, USD per 1M output tokens) >= 0, got {prices!r}"
            )
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout!r}")
        if max_response_bytes <= 0:
            raise ConfigError(f"max_response_bytes must be > 0, got {max_response_bytes!r}")
        self.model = model
        self.name = f"openai/{model}"
        self.prices = (float(prices[0]), float(prices[1])) if prices is not None else None
        self._client = client if client is not None else _make_client(base_url, api_key, timeout, max_response_bytes)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        tools: Sequence[Tool] | None = None,
        tool_choice: str | None = None,
        **extra: Any,
    ) -> Completion:
        """One answer. ``tools`` go out as native function calling (``tool_choice``: ``"auto"``,
        ``"required"`` or ``"none"``) and the calls come back in ``Completion.tool_calls``; ``extra`` goes
        to the server as is (``logprobs=True``, ``response_format=…``, ``presence_penalty=…``)."""
        sampling = {"temperature": temperature, "max_tokens": max_tokens, "top_p": top_p, "seed": seed, "stop": stop}
        request = {k: v for k, v in sampling.items() if v is not None}
        request.update(tool_request(tools, tool_choice))
        request.update(extra)
        return self._completion(self._create(messages, request))

    def stream(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        tools: Sequence[Tool] | None = None,
        tool_choice: str | None = None,
        **extra: Any,
    ) -> StreamedCompletion:
        """One answer as the server sends it (``stream=True``, with ``stream_options.include_usage`` so the
        usage comes at the end); the parameters of :meth:`complete` but tools (``ChatClient.stream`` asks
        :meth:`complete` for those). Closing the stream closes the connection, and the server stops."""
        refuse_tools(self.name, tools, tool_choice)
        if "stream" in extra or "stream_options" in extra:
            raise ConfigError(f"{self.name}: stream() sets stream and stream_options itself; got {sorted(extra)}")
        sampling = {"temperature": temperature, "max_tokens": max_tokens, "top_p": top_p, "seed": seed, "stop": stop}
        request = {k: v for k, v in sampling.items() if v is not None} | extra
        response = self._create(messages, {**request, "stream": True, "stream_options": {"include_usage": True}})
        seen: dict[str, Any] = {
            "finish": None,
            "usage": None,
            "logprobs": [],
            "tokens": [],
            "refusal": "",
            "text": False,
        }

        def deltas() -> Iterator[str]:
            import openai
            from httpx2 import HTTPError

            from connectors.capped_http import ResponseTooLarge

            try:
                for chunk in response:
                    seen["usage"] = getattr(chunk, "usage", None) or seen["usage"]
                    for choice in chunk.choices or ():
                        if choice.index != 0:
                            continue
                        seen["finish"] = choice.finish_reason or seen["finish"]
                        seen["refusal"] += getattr(choice.delta, "refusal", None) or ""
                        if choice.logprobs is not None and choice.logprobs.content:
                            seen["logprobs"].extend(float(t.logprob) for t in choice.logprobs.content)
                            seen["tokens"].extend(str(t.token) for t in choice.logprobs.content)
                        if choice.delta.content:
                            seen["text"] = True
                            yield choice.delta.content
            except (openai.APIError, ResponseTooLarge, HTTPError, ValueError) as e:
                raise self._stream_error(e) from e
            finally:
                response.close()
            if seen["refusal"] and not seen["text"]:  # as complete(): a refusal is no answer
                raise ConnectorError(
                    f"{self.name}: model {self.model!r} returned no text (refusal: {seen['refusal']!r})"
                )

        def finish(text: str, cut: bool) -> Completion:
            u = seen["usage"]
            usage = Usage(u.prompt_tokens, u.completion_tokens) if u is not None else Usage()
            usage = Usage(usage.prompt_tokens, usage.completion_tokens, price_of(usage, self.prices))
            logprobs = tuple(seen["logprobs"]) or None
            finish = CANCELLED if cut else seen["finish"]
            return Completion(text, self.name, usage, logprobs, finish, tokens=tuple(seen["tokens"]) or None)

        return StreamedCompletion(deltas(), finish)

    def _create(self, messages: Sequence[Message], request: Mapping[str, Any]) -> Any:
        """``POST /chat/completions`` through the SDK's client (a ``ChatCompletion``, or a stream of chunks with
        ``stream=True``), its errors translated into ours. The body is sent as built here: the SDK's
        ``chat.completions.create`` would first walk it to transform typed parameters this module never passes
        (0.5 ms of a served request's CPU, ``python -m bench.serve_overhead``)."""
        import openai
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        from connectors.capped_http import ResponseTooLarge, cause_of

        body = {"model": self.model, "messages": [m.to_dict() for m in messages], **request}
        stream = request.get("stream") is True
        try:
            return self._client.post(
                "/chat/completions", body=body, cast_to=ChatCompletion, stream=stream,
                stream_cls=openai.Stream[ChatCompletionChunk],
            )  # fmt: skip
        except (openai.APIError, ResponseTooLarge) as e:  # too large: raised as is or wrapped, by where it is read
            too_large = cause_of(e, ResponseTooLarge)
            if too_large is not None:
                message = f"{self.name}: {too_large}; lower max_tokens or raise max_response_bytes"
                raise ConnectorError(message, retryable=False) from e
            raise translate_error(e, self.name, [getattr(self._client, "api_key", None)]) from e
        except ValueError as e:  # a 200 whose body is not a whole JSON completion (cut short by a proxy)
            message = f"{self.name}: expected a JSON chat completion, got a body that does not parse ({e})"
            raise ConnectorError(message, retryable=True) from e

    def _stream_error(self, error: Exception) -> ConnectorError:
        """A failure after the stream began: the SDK's error event, a connection cut, a body too large."""
        import openai

        from connectors.capped_http import ResponseTooLarge, cause_of

        if cause_of(error, ResponseTooLarge) is not None:
            return ConnectorError(
                f"{self.name}: {cause_of(error, ResponseTooLarge)}; lower max_tokens", retryable=False
            )
        if isinstance(error, openai.APIError):
            return translate_error(error, self.name, [getattr(self._client, "api_key", None)])
        secrets = [getattr(self._client, "api_key", None)]
        return ConnectorError(f"{self.name}: the stream broke off ({redact(error, secrets)})", retryable=True)

    def _completion(self, response: Any) -> Completion:
        if not response.choices:
            raise ConnectorError(f"{self.name}: the server returned no choices for model {self.model!r}")
        choice = response.choices[0]
        content = choice.message.content
        calls, problems = read_tool_calls(getattr(choice.message, "tool_calls", None) or ())
        if content is None and (calls or problems):
            content = ""
        if content is None:
            refusal = getattr(choice.message, "refusal", None)
            why = f"refusal: {refusal!r}" if refusal else f"finish_reason={choice.finish_reason!r}"
            raise ConnectorError(f"{self.name}: model {self.model!r} returned no text ({why})")
        u = response.usage
        usage = Usage(u.prompt_tokens, u.completion_tokens) if u is not None else Usage()
        usage = Usage(usage.prompt_tokens, usage.completion_tokens, price_of(usage, self.prices))
        tokens = choice.logprobs.content if choice.logprobs is not None else None
        logprobs = tuple(float(t.logprob) for t in tokens) if tokens else None
        pieces = tuple(str(t.token) for t in tokens) if tokens else None
        return Completion(
            content,
            self.name,
            usage,
            logprobs,
            choice.finish_reason,
            tool_calls=calls,
            tool_problems=problems,
            tokens=pieces,
        )


def tool_request(tools: Sequence[Tool] | None, tool_choice: str | None) -> dict[str, Any]:
    """The ``tools``/``tool_choice`` fields of a request; ConfigError for anything but ``Tool``s."""
    check_tools(tools, tool_choice)
    if not tools:
        return {}
    out: dict[str, Any] = {"tools": [t.spec() for t in tools]}
    if tool_choice is not None:
        out["tool_choice"] = tool_choice
    return out


def read_tool_calls(raw: Sequence[Any]) -> tuple[tuple[ToolCall, ...], tuple[str, ...]]:
    """The SDK's tool calls as ``ToolCall``s, and a problem for each whose arguments are not a JSON object."""
    calls, problems = [], []
    for c in raw:
        args = arguments_of(c.function.name, c.function.arguments)
        if isinstance(args, str):
            problems.append(f"{args}: {str(c.function.arguments)[:80]}")
        else:
            calls.append(ToolCall(c.function.name, args, id=c.id or ""))
    return tuple(calls), tuple(problems)


def _make_client(base_url: str | None, api_key: str | None, timeout: float, max_bytes: int) -> Any:
    try:
        import openai
    except ImportError as e:  # a core dependency; only a broken install lands here
        raise ConfigError("OpenAIChat needs the 'openai' package: pip install openai") from e
    key = api_key or os.environ.get("OPENAI_API_KEY")
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not key:
        if url is None or not is_local_url(url):
            raise ConfigError(
                f"no API key for {url or 'the OpenAI API'}: set OPENAI_API_KEY or pass api_key= "
                "(a server on localhost or a private network needs none)"
            )
        key = LOCAL_PLACEHOLDER_KEY
    import httpx2
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    from connectors.capped_http import CappedTransport

    transport = CappedTransport(httpx2.HTTPTransport(limits=DEFAULT_CONNECTION_LIMITS), max_bytes=max_bytes)
    http = openai.DefaultHttpxClient(transport=transport, timeout=timeout)
    return openai.OpenAI(api_key=key, base_url=base_url, timeout=timeout, max_retries=0, http_client=http)
