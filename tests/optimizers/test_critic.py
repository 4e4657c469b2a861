"""The critic seam: calls named per component, parse failures retried once then skipped, budget checked first."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from connectors import ChatClient, ConnectorError, Message, ResponseCache, ScriptedChat
from optimizers.budget import Budget, BudgetExhausted, Spend
from optimizers.critic import Critic, CriticFailed
from optimizers.parsing import parse_critique, parse_rewrite


def test_calls_are_accounted_per_component_in_the_client_and_the_spend() -> None:
    client = ChatClient(ScriptedChat(["Add units."]))
    spend = Spend(Budget())
    assert Critic(client, spend).ask("Critique.", component="solver.system", parse=parse_critique) == "Add units."
    assert set(client.usage_by_caller) == {"critic:solver.system"}
    assert spend.by_component["solver.system"] == client.usage


def test_a_parse_failure_is_retried_with_the_error_then_the_item_is_skipped() -> None:
    backend = ScriptedChat(["no tags", "still no tags"])
    critic = Critic(ChatClient(backend), Spend(Budget()))
    assert critic.ask("Rewrite.", component="solver.system", parse=parse_rewrite) is None
    assert (critic.retried, critic.skipped, len(backend.calls)) == (1, 1, 2)
    assert backend.calls[1][0][-2] == Message("assistant", "no tags")


def test_params_are_passed_on_every_call() -> None:
    backend = ScriptedChat(["fine"])
    Critic(ChatClient(backend), Spend(Budget()), params={"temperature": 0.0}).ask(
        "x", component="c", parse=parse_critique
    )
    assert backend.calls[0][1] == {"temperature": 0.0, "max_tokens": 512}  # a default long enough for a rewrite


def test_max_tokens_can_be_overridden() -> None:
    backend = ScriptedChat(["fine"])
    Critic(ChatClient(backend), Spend(Budget()), params={"max_tokens": 64}).ask(
        "x", component="c", parse=parse_critique
    )
    assert backend.calls[0][1] == {"max_tokens": 64}


def test_the_budget_is_checked_before_the_call() -> None:
    backend = ScriptedChat(["fine"])
    critic = Critic(ChatClient(backend), Spend(Budget(max_calls=1)))
    with pytest.raises(BudgetExhausted):
        critic.ask("x", component="c", parse=parse_critique, reserve_calls=1)
    assert backend.calls == []


def test_a_cached_answer_costs_nothing() -> None:
    cache = ResponseCache()
    client = ChatClient(ScriptedChat(["fine"]), cache=cache)
    Critic(client, Spend(Budget())).ask("x", component="c", parse=parse_critique)
    spend = Spend(Budget())
    Critic(client, spend).ask("x", component="c", parse=parse_critique)
    assert spend.calls == 1 and spend.total.total_tokens == 0


def test_a_backend_failure_becomes_critic_failed() -> None:
    def down(messages: Sequence[Message]) -> str:
        raise ConnectorError("connection refused")

    critic = Critic(ChatClient(ScriptedChat(down, name="api"), retries=0), Spend(Budget()))
    with pytest.raises(CriticFailed, match=r"critic failed \(api, on c\): connection refused"):
        critic.ask("x", component="c", parse=parse_critique)
