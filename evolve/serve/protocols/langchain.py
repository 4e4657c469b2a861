"""An evolving team as a LangChain ``Runnable``: chains and agents call it like a chat model.

``EvolveRunnable`` wraps a ``Deployment`` (``evolve.serve.deployment``): each call answers with the tenant's team
— memory recall and HEAD prompts — and records the response, whose id comes back on the ``AIMessage``
(``message.id`` and ``response_metadata["response_id"]``). ``feedback(message, score)`` then reinforces
exactly the memories that answer recalled, once per key, as ``Deployment.feedback`` does.

Input is what a chat model takes: a string, a prompt value, LangChain messages, ``(role, text)`` pairs,
dicts or Evolve ``Message``s. The tenant is the runnable's, or ``config={"configurable": {"tenant": ...}}``
for one call; sampling parameters (``temperature``, ``max_tokens``, ...) may be passed to ``invoke``.
Async and batch calls use LangChain's defaults (a worker thread per call).

Needs langchain-core from the ``langchain`` extra (``pip install -e '.[langchain]'``).

Example:
    >>> from evolve.spec import RunSpec
    >>> spec = RunSpec.model_validate({"environment": {"tasks": "unused.jsonl"}, "run": {"database": "sqlite://"},
    ...     "model": {"chat": "fake/scripted", "options": {"replies": ["4"]}}, "embedder": {"name": "hash"}})
    >>> agent = EvolveRunnable(Deployment(spec), tenant="alice")
    >>> message = agent.invoke("What is 2 + 2?")
    >>> message.content, agent.feedback(message, 1.0).applied
    ('4', True)
    >>> agent.deployment.close()
"""

from __future__ import annotations

from typing import Any

from connectors.errors import ConfigError
from connectors.langchain_chat import INSTALL_HINT, from_langchain
from evolve.serve.answers import Answer
from evolve.serve.deployment import Deployment
from evolve.serve.feedback import FeedbackReceipt

try:
    from langchain_core.language_models import LanguageModelInput
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import Runnable, RunnableConfig
    from langchain_core.runnables.config import ensure_config
except ImportError as e:  # the optional extra is missing: say which one
    raise ConfigError(
        f"evolve.serve.protocols.langchain needs langchain-core from the 'langchain' extra: {INSTALL_HINT}"
    ) from e

__all__ = ["EvolveRunnable", "to_ai_message"]


def to_ai_message(answer: Answer, model: str) -> AIMessage:
    """A served answer as an ``AIMessage``: its id is the response id feedback refers to."""
    usage = answer.usage
    return AIMessage(
        content=answer.text,
        id=answer.id,
        response_metadata={
            "response_id": answer.id,
            "model_name": model,
            "run": answer.run,
            "prompt_version": answer.prompt_version,
            "recall_ids": list(answer.recall_ids),
            "finish_reason": answer.finish_reason,  # "length": max_tokens cut it
        },
        usage_metadata={
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    )


class EvolveRunnable(Runnable[LanguageModelInput, AIMessage]):
    """A ``Deployment``'s evolving team as a LangChain runnable returning ``AIMessage``s.

    Args:
        deployment: the served team (memory, HEAD prompts, recorded responses, feedback).
        tenant: whose memories and prompts answer (None: the run's own); a call's
            ``config["configurable"]["tenant"]`` overrides it.

    Example:
        >>> # agent = EvolveRunnable(Deployment(load_spec("data/facility_codes.toml")), tenant="acme")
        >>> # chain = ChatPromptTemplate.from_messages([("user", "{question}")]) | agent | StrOutputParser()
        >>> # chain.invoke({"question": "Door code of the Harbor warehouse?"})
    """

    def __init__(self, deployment: Deployment, *, tenant: str | None = None) -> None:
        if not isinstance(deployment, Deployment):
            raise ConfigError(
                f"EvolveRunnable needs a Deployment (evolve.serve.deployment), got {type(deployment).__name__}"
            )
        if tenant is not None and (not isinstance(tenant, str) or not tenant.strip()):
            raise ConfigError(f"tenant must be a non-empty string or None, got {tenant!r}")
        self.deployment = deployment
        self.tenant = tenant
        self.name = f"EvolveRunnable[{deployment.model_id}]"

    def invoke(self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any) -> AIMessage:
        """Answer the conversation's last user message; ``kwargs`` are sampling parameters."""
        config = ensure_config(config)
        tenant = (config.get("configurable") or {}).get("tenant", self.tenant)
        return self._call_with_config(lambda value: self._answer(value, tenant, kwargs), input, config)

    def feedback(
        self,
        response: AIMessage | str,
        score: float,
        *,
        comment: str = "",
        key: str | None = None,
        tenant: str | None = None,
    ) -> FeedbackReceipt:
        """Rate an answer (the ``AIMessage`` or its id) with ``score`` in [0, 1]; see ``Deployment.feedback``.

        Raises:
            ConfigError: a score outside [0, 1], or a message without an id.
            UnknownResponse: no response with this id belongs to the tenant.
        """
        response_id = response.id if isinstance(response, AIMessage) else response
        if not isinstance(response_id, str) or not response_id:
            raise ConfigError(
                f"feedback needs an answer of this runnable (an AIMessage with an id) or its id, got {response!r:.80}"
            )
        who = tenant if tenant is not None else self.tenant
        return self.deployment.feedback(response_id, score, tenant=who, comment=comment, key=key)

    def _answer(self, value: LanguageModelInput, tenant: str | None, params: dict[str, Any]) -> AIMessage:
        answer = self.deployment.answer(from_langchain(value), tenant=tenant, params=params or None)
        return to_ai_message(answer, self.deployment.model_id)
