"""The MARFT loop on a tiny Llama: what moves, what stays frozen, and bit-for-bit resumption."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from connectors import ConfigError  # noqa: E402
from optimizers.marft import AgentPolicies, Args, Trainer  # noqa: E402
from optimizers.marft import checkpoint as ckpt  # noqa: E402
from optimizers.marft.tiny import tiny_llama, word_tokenizer  # noqa: E402
from optimizers.marft.toys import RelayTask  # noqa: E402

SMALL = dict(steps=2, batch_size=8, minibatches=2, epochs=1, checkpoint_every=1)


def policies(seed: int = 0) -> tuple[AgentPolicies, RelayTask]:
    task = RelayTask()
    tokenizer = word_tokenizer(task.vocabulary)
    return AgentPolicies(tiny_llama(len(tokenizer), seed=seed), tokenizer, task.agents, seed=seed), task


def snapshot(policy: AgentPolicies, who: str) -> dict[str, Any]:
    return {str(i): p.detach().clone() for i, p in enumerate(policy.parameters_of(who))}


def base_weights(policy: AgentPolicies) -> dict[str, Any]:
    return {
        n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" not in n and not p.requires_grad
    }


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[bool]:
    return [not torch.equal(before[k], after[k]) for k in before]


def test_one_iteration_moves_every_lora_parameter_of_every_agent_and_no_base_weight() -> None:
    policy, task = policies()
    agents_before = {a: snapshot(policy, a) for a in (*task.agents, "critic")}
    frozen = base_weights(policy)
    assert frozen, "the base weights must be frozen"
    Trainer(policy, task, Args(**{**SMALL, "steps": 1})).run()
    for agent in (*task.agents, "critic"):
        assert all(changed(agents_before[agent], snapshot(policy, agent))), f"a parameter of {agent} did not move"
    assert not any(changed(frozen, base_weights(policy)))


def test_round_robin_trains_one_agent_per_iteration() -> None:
    policy, task = policies()
    first, second = task.agents
    before = {a: snapshot(policy, a) for a in task.agents}
    trainer = Trainer(policy, task, Args(**{**SMALL, "steps": 1, "schedule": "round_robin"}))
    trainer.run()
    assert all(changed(before[first], snapshot(policy, first)))
    assert not any(changed(before[second], snapshot(policy, second)))


def test_group_advantages_train_without_a_critic() -> None:
    policy, task = policies()
    critic_before = snapshot(policy, "critic")
    history = Trainer(policy, task, Args(**{**SMALL, "steps": 1, "advantage": "group", "group_size": 4})).run()
    assert history[0].value_loss is None
    assert not any(changed(critic_before, snapshot(policy, "critic")))


def test_token_level_gae_runs_over_multi_token_answers() -> None:
    policy, task = policies()
    history = Trainer(policy, task, Args(**{**SMALL, "steps": 1, "level": "token", "max_new_tokens": 3})).run()
    assert history[0].value_loss is not None and set(history[0].agents) == set(task.agents)


def test_a_kl_penalty_to_the_base_is_reported_per_agent() -> None:
    policy, task = policies()
    history = Trainer(policy, task, Args(**{**SMALL, "steps": 1, "kl_coef": 0.1})).run()
    assert all(stats["kl_ref"] >= 0.0 for stats in history[0].agents.values())


def test_a_resumed_run_continues_bit_for_bit(tmp_path: Path) -> None:
    args = Args(**{**SMALL, "steps": 4, "checkpoint_every": 2})
    straight, task = policies()
    expected = Trainer(straight, task, args).run(checkpoint_dir=tmp_path / "straight")

    class Killed(Exception):
        pass

    def kill_in_iteration_3(entry: Any) -> None:
        if entry.step == 3:  # after iteration 2's checkpoint, before iteration 3's
            raise Killed

    stopped, _ = policies()
    with pytest.raises(Killed):
        Trainer(stopped, task, args).run(checkpoint_dir=tmp_path / "cut", on_step=kill_in_iteration_3)
    resumed, _ = policies(seed=0)
    trainer = Trainer(resumed, task, args)
    history = trainer.run(checkpoint_dir=tmp_path / "cut")

    assert [(h.step, h.success, h.agents, h.value_loss) for h in history] == [
        (h.step, h.success, h.agents, h.value_loss) for h in expected
    ]
    for who in (*task.agents, "critic"):
        assert not any(changed(snapshot(straight, who), snapshot(resumed, who))), who


def test_a_checkpoint_is_refused_under_other_settings(tmp_path: Path) -> None:
    policy, task = policies()
    Trainer(policy, task, Args(**{**SMALL, "steps": 1})).run(checkpoint_dir=tmp_path)
    assert ckpt.latest(tmp_path) is not None
    other, _ = policies()
    with pytest.raises(ConfigError, match="lr"):
        Trainer(other, task, Args(**{**SMALL, "steps": 2, "lr": 0.1})).run(checkpoint_dir=tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"batch_size": 6, "group_size": 4}, "multiple of group_size"),
        ({"advantage": "group"}, "group_size >= 2"),
        ({"level": "token", "ratio": "sequence"}, "needs ratio='token'"),
        ({"temperature": 0.0}, "temperature"),
        ({"steps": 0}, ">= 1"),
        ({"order": "learned"}, "order='learned' needs advantage='group'"),
        ({"order": "learned", "advantage": "group", "group_size": 2, "order_temperature": 0.0}, "order_temperature"),
        ({"order_lr": -1.0}, "order_lr"),
        ({"order_temperature": 2.0}, 'set order="learned" with them'),
    ],
)
def test_bad_settings_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Args(**overrides)


LEARNED = dict(advantage="group", group_size=4, order="learned", checkpoint_every=0)


def test_drawn_orders_each_agent_sees_who_acted_before_it_in_its_episode() -> None:
    """An episode in a drawn order: the receiver acting first is handed nothing; the answers reach the reward
    in team order; a task whose prompts assume team order refuses drawn orders."""
    import random

    from optimizers.marft.rollout import collect

    policy, _ = policies()
    task = RelayTask(any_order=True)
    drawn = iter([(0, 1), (1, 0), (1, 0), (0, 1)])  # one per episode, asked in episode order
    batch = collect(policy, task, episodes=4, rng=random.Random(0), generator=torch.Generator().manual_seed(0),
                    max_new_tokens=1, temperature=1.0, order_of=lambda state: next(drawn))  # fmt: skip
    sender, receiver = batch.turns
    decode = policy.tokenizer.decode
    for i, order in enumerate(batch.orders or []):
        seen = decode(receiver.prompt_ids[i], skip_special_tokens=True).split()
        assert seen == (["relay", *sender.texts[i].split()] if order == (0, 1) else ["relay"])
        assert decode(sender.prompt_ids[i], skip_special_tokens=True).startswith("secret")
    with pytest.raises(ConfigError, match="follow team order"):
        collect(policy, RelayTask(), episodes=2, rng=random.Random(0), generator=torch.Generator(),
                max_new_tokens=1, temperature=1.0, order_of=lambda state: (1, 0))  # fmt: skip
    with pytest.raises(ConfigError, match="each of the 2 agents' indices once"):
        collect(policy, task, episodes=2, rng=random.Random(0), generator=torch.Generator(),
                max_new_tokens=1, temperature=1.0, order_of=lambda state: (0, 0))  # fmt: skip


def test_marft_learns_the_order_the_relay_needs() -> None:
    """The tiny relay with drawn orders (PMAT's AGPS, the order's priorities outside the PPO loss): the sender
    must act first for the receiver to know the secret, and the order policy learns that from rewards alone."""
    policy, _ = policies()
    trainer = Trainer(policy, RelayTask(any_order=True), Args(steps=40, batch_size=32, **LEARNED))
    history = trainer.run()
    assert history[0].order is not None and history[-1].order == "sender > receiver"
    assert trainer.orders is not None
    (group,) = trainer.orders.table()
    assert group["priorities"]["sender"] > group["priorities"]["receiver"] + 1.0
    assert sum(h.success for h in history[-5:]) / 5 > RelayTask().blind_best  # the two communicate


def test_a_resumed_run_with_a_learned_order_continues_bit_for_bit(tmp_path: Path) -> None:
    args = Args(**{**SMALL, **LEARNED, "steps": 4, "checkpoint_every": 2})
    task = RelayTask(any_order=True)
    straight, _ = policies()
    expected = Trainer(straight, task, args)
    expected.run(checkpoint_dir=tmp_path / "straight")

    def kill_in_iteration_3(entry: Any) -> None:
        if entry.step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(policies()[0], task, args).run(checkpoint_dir=tmp_path / "cut", on_step=kill_in_iteration_3)
    resumed = Trainer(policies()[0], task, args)
    resumed.run(checkpoint_dir=tmp_path / "cut")
    assert [(h.success, h.order) for h in resumed.history] == [(h.success, h.order) for h in expected.history]
    assert resumed.orders is not None and expected.orders is not None
    assert resumed.orders.table() == expected.orders.table()
