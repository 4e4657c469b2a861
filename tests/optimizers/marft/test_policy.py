"""AgentPolicies: one frozen base, one LoRA adapter per agent, a critic; sampling and scoring agree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.errors import ConfigError
from optimizers.marft.batching import pack
from optimizers.marft.policy import CRITIC, AgentPolicies
from optimizers.marft.tiny import EOS_ID, tiny_llama, tiny_policies, word_tokenizer
from optimizers.marft.toys import RelayTask

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

TASK = RelayTask()
AGENTS = TASK.agents  # ("sender", "receiver")
PROMPTS = ["secret red", "secret blue gold green up", "relay"]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny matrices: a second OpenMP thread only adds contention (seconds per call on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def policies(seed: int = 0, **options: Any) -> AgentPolicies:
    """The relay team on one tiny Llama (always the same base weights); ``seed`` seeds the adapters."""
    return tiny_policies(TASK.vocabulary, AGENTS, hidden=32, seed=seed, **options)


def perturb(pol: AgentPolicies, adapter: str, seed: int = 1) -> None:
    """Random non-zero LoRA weights (peft starts lora_B at zero, where an adapter changes nothing)."""
    g = torch.Generator().manual_seed(seed)
    state = {k: torch.randn(v.shape, generator=g) * 0.5 for k, v in pol.adapter_state(adapter).items()}
    pol.load_adapter_state(adapter, state)


def sample(pol: AgentPolicies, agent: str = "sender", seed: int = 0, **kw: Any) -> tuple[list[list[int]], Any]:
    prompts = pol.encode(PROMPTS)
    out = pol.generate(agent, prompts, max_new_tokens=kw.pop("max_new_tokens", 6), temperature=kw.pop("temperature", 1.0),
                       generator=torch.Generator().manual_seed(seed))  # fmt: skip
    return out, prompts


def base_weights(pol: AgentPolicies) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in pol.model.named_parameters() if "lora_" not in n}


def test_base_is_frozen_and_a_step_moves_every_lora_weight_of_the_trained_agent_only() -> None:
    pol = policies()
    base = base_weights(pol)
    assert base and not any(p.requires_grad for n, p in pol.model.named_parameters() if "lora_" not in n)
    sender, receiver = pol.adapter_state("sender"), pol.adapter_state("receiver")
    assert any(".lora_A." in k for k in sender) and any(".lora_B." in k for k in sender)
    optimizer = torch.optim.Adam(pol.parameters_of("sender"), lr=1e-2)
    out, prompts = sample(pol)
    advantage = torch.tensor([1.0, -1.0, 0.5])[:, None]
    for step in range(2):  # step 1 moves lora_B off zero; only then has lora_A a gradient
        optimizer.zero_grad()
        logp, mask = pol.logprobs("sender", prompts, out, temperature=1.0)
        (-(logp * advantage * mask).sum()).backward()
        optimizer.step()
        if step == 0:
            moved_b = pol.adapter_state("sender")
            assert all(not torch.equal(moved_b[k], v) for k, v in sender.items() if ".lora_B." in k)
    after = pol.adapter_state("sender")
    unchanged = [k for k, v in sender.items() if torch.equal(after[k], v)]
    assert unchanged == []
    assert all(torch.equal(v, pol.adapter_state("receiver")[k]) for k, v in receiver.items())
    assert all(p.grad is None for p in pol.parameters_of("receiver"))
    assert all(torch.equal(v, base_weights(pol)[n]) for n, v in base.items())


def test_critic_step_moves_the_critic_adapter_and_value_head() -> None:
    pol = policies()
    before = pol.adapter_state(CRITIC)
    assert {"value_head.weight", "value_head.bias"} <= set(before)
    optimizer = torch.optim.Adam(pol.parameters_of(CRITIC), lr=1e-2)
    out, prompts = sample(pol)
    for _ in range(2):
        optimizer.zero_grad()
        ((pol.values(prompts, out) - 1.0) ** 2).sum().backward()
        optimizer.step()
    after = pol.adapter_state(CRITIC)
    assert [k for k, v in before.items() if torch.equal(after[k], v)] == []


def test_gradients_survive_switching_adapters_before_backward() -> None:
    pol = policies()
    perturb(pol, "sender")
    out, prompts = sample(pol)
    logp, mask = pol.logprobs("sender", prompts, out, temperature=1.0)
    values = pol.values(prompts, out)  # switches to the critic adapter before the loss is built
    (-(logp * mask).sum() + values.pow(2).sum()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pol.parameters_of("sender"))
    assert all(p.grad is not None for p in pol.parameters_of(CRITIC))


def test_generation_is_reproducible_per_seed_and_stops_at_eos() -> None:
    pol = policies()
    first, _ = sample(pol, seed=5, max_new_tokens=12)
    again, _ = sample(pol, seed=5, max_new_tokens=12)
    other, _ = sample(pol, seed=6, max_new_tokens=12)
    assert first == again and first != other
    for row in first + other:
        assert 1 <= len(row) <= 12
        assert EOS_ID not in row[:-1]  # an EOS ends the response and is kept
    assert any(row[-1] == EOS_ID for row in first + other)


def test_greedy_needs_no_generator_and_padding_does_not_change_answers() -> None:
    pol = policies()
    perturb(pol, "receiver")
    prompts = pol.encode(PROMPTS)
    together = pol.generate("receiver", prompts, max_new_tokens=5, temperature=0.0)
    alone = [pol.generate("receiver", [p], max_new_tokens=5, temperature=0.0)[0] for p in prompts]
    assert together == alone
    with pytest.raises(ConfigError, match="generator"):
        pol.generate("receiver", prompts, max_new_tokens=5, temperature=1.0)


def test_logprobs_of_generated_tokens_match_a_direct_forward_at_the_temperature() -> None:
    pol = policies()
    perturb(pol, "sender")
    out, prompts = sample(pol, temperature=0.7)
    logp, mask = pol.logprobs("sender", prompts, out, temperature=0.7)
    assert logp.requires_grad and logp.shape == mask.shape == (3, max(map(len, out)))
    with torch.no_grad(), pol.using("sender"):
        for i, (prompt, response) in enumerate(zip(prompts, out, strict=True)):
            logits = pol.model(input_ids=torch.tensor([prompt + response])).logits[0]
            direct = torch.log_softmax(logits / 0.7, dim=-1)[len(prompt) - 1 : -1].gather(
                1, torch.tensor(response)[:, None]
            )
            assert mask[i].sum() == len(response)
            assert torch.allclose(logp[i, : len(response)], direct.squeeze(1), atol=1e-5)
            assert torch.all(logp[i, len(response) :] == 0)
    reference, _ = pol.reference_logprobs("sender", prompts, out, temperature=0.7)
    assert not reference.requires_grad and not torch.allclose(reference, logp.detach())


def test_an_untrained_adapter_scores_like_the_base_model() -> None:
    pol = policies()
    out, prompts = sample(pol)
    logp, _ = pol.logprobs("receiver", prompts, out, temperature=1.0)
    reference, _ = pol.reference_logprobs("receiver", prompts, out, temperature=1.0)
    assert torch.allclose(logp.detach(), reference, atol=1e-6)


def test_values_read_the_state_before_each_response_token() -> None:
    pol = policies()
    perturb(pol, CRITIC)
    out, prompts = sample(pol)
    values = pol.values(prompts, out)
    assert values.shape == (3, max(map(len, out))) and values.requires_grad
    first_only = pol.values(prompts, [r[:1] for r in out])
    alone = pol.values(prompts[1:2], out[1:2])
    assert torch.allclose(values[:, 0], first_only[:, 0], atol=1e-5)  # column 0 ignores what follows
    assert torch.allclose(values[1, : len(out[1])], alone[0], atol=1e-5)  # padding changes nothing


def test_save_then_load_into_fresh_policies_reproduces_logprobs_and_values_exactly(tmp_path: Path) -> None:
    pol = policies(seed=0)
    for adapter in pol.adapters:
        perturb(pol, adapter, seed=len(adapter))
    out, prompts = sample(pol)
    folder = pol.save(tmp_path / "team")
    fresh = policies(seed=9)
    assert not torch.equal(fresh.logprobs("sender", prompts, out, temperature=1.0)[0],
                           pol.logprobs("sender", prompts, out, temperature=1.0)[0])  # fmt: skip
    fresh.load(folder)
    for agent in AGENTS:
        assert torch.equal(fresh.logprobs(agent, prompts, out, temperature=1.0)[0],
                           pol.logprobs(agent, prompts, out, temperature=1.0)[0])  # fmt: skip
    assert torch.equal(fresh.values(prompts, out), pol.values(prompts, out))
    assert sorted(p.name for p in folder.iterdir()) == [
        "critic",
        "policies.json",
        "receiver",
        "sender",
        "value_head.safetensors",
    ]


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")
def test_a_saved_agent_folder_is_an_ordinary_peft_adapter(tmp_path: Path) -> None:
    from peft import PeftModel

    pol = policies()
    perturb(pol, "receiver")
    out, prompts = sample(pol)
    folder = pol.save(tmp_path / "team")
    base = tiny_llama(len(pol.tokenizer), hidden=32, seed=0)
    plain = PeftModel.from_pretrained(base, str(folder / "receiver")).eval()
    batch = pack(prompts, out, pad_id=pol.pad_id, device="cpu")
    with torch.no_grad():
        logits = plain(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
        ).logits
    expected = torch.log_softmax(logits[:, batch.prompt_len - 1 : -1], -1).gather(-1, batch.responses[..., None])[
        ..., 0
    ]
    ours, mask = pol.logprobs("receiver", prompts, out, temperature=1.0)
    assert torch.allclose(ours.detach(), expected * mask, atol=1e-5)


def test_loading_the_wrong_state_says_what_does_not_fit(tmp_path: Path) -> None:
    pol = policies()
    with pytest.raises(ConfigError, match="missing"):
        pol.load_adapter_state("sender", {})
    state = pol.adapter_state("sender")
    with pytest.raises(ConfigError, match="wrong shape"):
        pol.load_adapter_state("sender", {k: v[:1] for k, v in state.items()})
    tiny_llama_team = tiny_policies(TASK.vocabulary, ["solo"], hidden=32)
    tiny_llama_team.save(tmp_path / "solo")
    with pytest.raises(ConfigError, match="holds"):
        pol.load(tmp_path / "solo")
    with pytest.raises(ConfigError, match="no readable"):
        pol.load(tmp_path / "nothing")


@pytest.mark.parametrize("agents", [[], ["x", "x"], ["critic"], ["a"], ["two words"]])
def test_agent_names_are_checked(agents: list[str]) -> None:
    with pytest.raises(ConfigError):
        policies_for(agents)


def policies_for(agents: list[str]) -> AgentPolicies:
    tok = word_tokenizer(TASK.vocabulary)
    return AgentPolicies(tiny_llama(len(tok), hidden=32), tok, agents)


def test_without_a_critic_there_are_no_values() -> None:
    pol = policies(critic=False)
    assert pol.adapters == AGENTS
    out, prompts = sample(pol)
    with pytest.raises(ConfigError, match="critic=False"):
        pol.values(prompts, out)
    with pytest.raises(ConfigError, match="unknown adapter"):
        pol.parameters_of(CRITIC)


def test_encode_adds_bos_or_uses_the_chat_template() -> None:
    pol = policies()
    tok = pol.tokenizer
    assert pol.encode(["secret red"]) == [[tok.bos_token_id, *tok("secret red", add_special_tokens=False)["input_ids"]]]
    tok.chat_template = (
        "{% for m in messages %}relay {{ m['content'] }}{% endfor %}{% if add_generation_prompt %} secret{% endif %}"
    )
    assert pol.decode(pol.encode(["red"])[0]) == "relay red secret"
    assert pol.decode([6, 7, EOS_ID]) == "red green"
    assert pol.decode([tok.pad_token_id, 6, EOS_ID]) == "<pad> red"  # the first token is <pad>, not "red"


@pytest.mark.slow
def test_smollm2_policies_generate_for_two_agents() -> None:
    pol = AgentPolicies.from_smollm2(["planner", "writer"], rank=4)
    prompts = pol.encode(["Name a colour.", "Say hello."])
    for agent in pol.agents:
        out = pol.generate(
            agent, prompts, max_new_tokens=4, temperature=1.0, generator=torch.Generator().manual_seed(0)
        )
        assert [1 <= len(r) <= 4 for r in out] == [True, True]
        logp, mask = pol.logprobs(agent, prompts, out, temperature=1.0)
        assert torch.isfinite(logp).all() and mask.sum() == sum(map(len, out))
    assert pol.values(prompts, out).shape == logp.shape


def test_plain_policy_gradient_learns_the_target_task() -> None:
    """The test bed can learn: REINFORCE on the adapter takes "say ..." → "star" from chance to near 1."""
    import random

    from optimizers.marft.toys import TargetTokenTask

    task = TargetTokenTask()
    pol = tiny_policies(task.vocabulary, task.agents, critic=False)
    optimizer = torch.optim.Adam(pol.parameters_of("speaker"), lr=3e-3)
    rng, generator, success = random.Random(0), torch.Generator().manual_seed(0), []
    for _ in range(30):
        states = [task.sample(rng) for _ in range(64)]
        prompts = pol.encode([task.prompt(s, 0, []) for s in states])
        out = pol.generate("speaker", prompts, max_new_tokens=2, temperature=1.0, generator=generator)
        rewards = torch.tensor([task.reward(s, [pol.decode(o)]) for s, o in zip(states, out, strict=True)])
        success.append(float(rewards.mean()))
        optimizer.zero_grad()
        logp, _ = pol.logprobs("speaker", prompts, out, temperature=1.0)
        (-(logp.sum(1) * (rewards - rewards.mean())).mean()).backward()
        optimizer.step()
    assert success[0] < 0.3 and min(success[-5:]) > 0.9


def test_the_gpu_memory_tests_model_is_built_here_and_four_adapters_are_a_fraction_of_it() -> None:
    """What ``test_gpu``'s memory bounds rest on, checked without a GPU: the SmolLM2-sized base is built in code
    (nothing downloaded), answers, and four agents' adapters hold 8 % of its parameters (2 % each)."""
    from tests.support.marft_gpu import PROMPTS, team_policies

    team = team_policies(4, device="cpu")
    base = sum(p.numel() for n, p in team.model.named_parameters() if "lora_" not in n)
    adapters = sum(p.numel() for n, p in team.model.named_parameters() if "lora_" in n)
    assert 150e6 < base < 170e6  # about SmolLM2-135M's size
    assert adapters < 0.1 * base
    ids = team.encode(list(PROMPTS[:2]))
    assert all(len(r) == 2 for r in team.generate(team.agents[0], ids, max_new_tokens=2, temperature=0.0))
