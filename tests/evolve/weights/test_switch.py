"""The switch to weight updates: a plateau escalates to LoRA MARFT, a gain is kept as adapter versions that
the agents then serve, rollback takes it back, and API models get a clear refusal.

The team runs on ``tiny_local_model`` (a tiny Llama with a word tokenizer, built in code), so an
escalation trains in seconds: on "say star" tasks the bare model never answers "star" and one short
MARFT run teaches it to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors import ChatClient, ConfigError, evolve_home, load_chat, make_engine
from evolve import Agent, Evolver, Task, Team
from evolve.weights.escalation import weights_blocker
from evolve.weights.registry import AdapterRegistry
from evolve.weights.switch import WeightUpdates, attach_adapters, base_folder, train_adapters
from tests.connectors.test_vllm_chat import fake_vllm  # noqa: F401  (a stand-in vllm module, a fixture)

TASKS = [
    Task(id=f"t{i}", prompt=p, answer="star")
    for i, p in enumerate(["say the word star", "say star", "the word star", "say the star word"])
]
SETTINGS = WeightUpdates(
    patience=1, steps=30, batch_size=16, max_new_tokens=1, temperature=1.0, lr=3e-3, eval_episodes=16
)


def solver(folder: Path) -> Team:
    chat = load_chat(f"local/{folder}", max_new_tokens=1)
    return Team([Agent("solver", chat, system="Reply with one word .", params={"max_tokens": 1, "temperature": 0.0})])


def evolver(team: Team, db: Path, **kwargs: object) -> Evolver:
    return Evolver(
        team, TASKS, engine=make_engine(f"sqlite:///{db}"), run="stars", batch_size=4, progress=False, **kwargs
    )  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_plateau_escalates_and_the_kept_adapter_serves_the_next_rounds(
    tiny_local_model: Path, tmp_path: Path
) -> None:
    team = solver(tiny_local_model)
    ev = evolver(team, tmp_path / "run.db", weights=SETTINGS)

    rounds = ev.run(3)

    assert [m.success_rate for m in rounds] == [0.0, 0.0, 1.0]
    assert [m.weight_updates for m in rounds] == [0, 1, 0]
    assert "eval 0.00 -> 1.00, kept solver@" in rounds[1].weights_note
    assert ev.adapters is not None
    head = ev.adapters.head("solver")
    assert head is not None and head.metrics == {"eval_before": 0.0, "eval_after": 1.0, "steps": 30.0}
    assert (head.path / "adapter_config.json").is_file()
    assert team.agents["solver"].params["adapter"] == f"solver@{head.id}"
    assert team.agents["solver"].model.backend.adapters == {f"solver@{head.id}": str(head.path)}


@pytest.mark.slow
def test_a_later_run_serves_the_head_adapter_and_a_rollback_takes_it_back(
    tiny_local_model: Path, tmp_path: Path
) -> None:
    db = tmp_path / "run.db"
    first = evolver(solver(tiny_local_model), db, weights=SETTINGS)
    report = first.escalate()
    assert report.accepted and report.after == 1.0

    again = solver(tiny_local_model)  # a new process would build the team afresh: it starts on HEAD
    assert evolver(again, db).run(1)[0].success_rate == 1.0

    registry = AdapterRegistry(make_engine(f"sqlite:///{db}"), "stars", root=evolve_home() / "adapters")
    registry.rollback("solver", "base")
    assert attach_adapters(again, registry) == {"solver": None}
    assert "adapter" not in again.agents["solver"].params
    answers = again.act([t.prompt for t in TASKS])
    assert [a.answer for a in answers] != ["star"] * len(TASKS)  # the bare base again


@pytest.mark.slow
def test_an_escalation_without_gain_keeps_the_head(tiny_local_model: Path, tmp_path: Path) -> None:
    registry = AdapterRegistry(make_engine(f"sqlite:///{tmp_path / 'r.db'}"), "stars", root=tmp_path / "adapters")
    short = WeightUpdates(patience=1, steps=1, batch_size=4, max_new_tokens=1, lr=1e-9, eval_episodes=8)

    report = train_adapters(solver(tiny_local_model), TASKS, registry, short, progress=False)

    assert not report.accepted and report.versions == {}
    assert report.before == report.after == 0.0
    assert registry.head("solver") is None and registry.log("solver") == []
    assert report.note == "MARFT 1 steps: eval 0.00 -> 0.00, rejected"


def api_chat() -> ChatClient:
    return load_chat("openai/gpt-4o-mini", api_key="sk-test", base_url="http://127.0.0.1:9/v1")


def test_weight_updates_with_an_api_model_are_refused_with_the_reason(tmp_path: Path) -> None:
    team = Team([Agent("solver", api_chat())])
    with pytest.raises(
        ConfigError, match=r"weight updates need local models, and solver \(openai/gpt-4o-mini\) runs on an API"
    ):
        evolver(team, tmp_path / "run.db", weights=WeightUpdates())
    assert evolver(team, tmp_path / "run.db").run  # without the switch, the same team runs as before


def test_the_old_flag_still_switches_for_one_release_with_a_deprecation_warning(tmp_path: Path) -> None:
    """``allow_weight_updates`` (before 0.2.0) beside ``weights``: True is the switch on, False off."""
    team = Team([Agent("solver", api_chat())])
    with pytest.warns(DeprecationWarning, match=r"weights=WeightUpdates\(\.\.\.\) turns weight updates on"):
        with pytest.raises(ConfigError, match="weight updates need local models"):
            evolver(team, tmp_path / "run.db", allow_weight_updates=True)
    with pytest.warns(DeprecationWarning, match="allow_weight_updates"):
        off = evolver(team, tmp_path / "run.db", allow_weight_updates=False, weights=SETTINGS)
    assert off.weights is None and evolver(team, tmp_path / "run.db").weights is None


def test_agents_on_different_local_models_are_refused(tiny_local_model: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-model"
    other.mkdir()
    team = Team(
        [
            Agent("drafter", load_chat(f"local/{tiny_local_model}")),
            Agent("editor", load_chat(f"local/{other}")),
        ]
    )
    with pytest.raises(ConfigError, match="one base model"):
        base_folder(team)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"patience": 0}, "patience"),
        ({"options": {"nonsense": 1}}, "unknown MARFT options"),
        ({"options": {"advantage": "group"}}, "group_size"),
    ],
)
def test_bad_settings_fail_when_made_not_at_the_first_plateau(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WeightUpdates(**overrides)  # type: ignore[arg-type]


@pytest.mark.usefixtures("fake_vllm")
def test_a_team_on_vllm_may_update_weights_and_serves_each_agent_its_head_adapter(
    tiny_local_model: Path, tmp_path: Path
) -> None:
    chat = load_chat(f"vllm/{tiny_local_model}", enable_lora=True)
    team = Team([Agent("solver", chat, system="Reply with one word .", params={"max_tokens": 1})])
    assert weights_blocker(team) is None and base_folder(team) == tiny_local_model
    registry = AdapterRegistry(make_engine(f"sqlite:///{tmp_path / 'r.db'}"), "stars", root=tmp_path / "adapters")
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "adapter_config.json").write_text("{}")
    (trained / "adapter_model.safetensors").write_bytes(b"weights")
    head = registry.commit("solver", trained)

    assert attach_adapters(team, registry) == {"solver": head.id}
    team.act(["say star"], queries=["say star"])
    lora = chat.backend._llm.calls[-1][2]  # vLLM was asked for the head adapter's folder
    assert Path(lora.lora_path) == Path(head.path).resolve()
    registry.rollback("solver", "base")
    assert attach_adapters(team, registry) == {"solver": None} and "adapter" not in team.agents["solver"].params


@pytest.mark.slow
def test_a_team_that_learns_its_order_escalates_in_the_orders_its_policy_draws(
    tiny_local_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MARFT on a chain that learns its order: the rollouts act in orders drawn from the team's own priorities,
    the evaluations in the order it serves, and the last agent of each episode's order answers."""
    import optimizers.marft.trainer as trainer_module
    from evolve import OrderedTeam

    chat = load_chat(f"local/{tiny_local_model}", max_new_tokens=1)
    params = {"max_tokens": 1, "temperature": 0.0}
    team = OrderedTeam([Agent(n, chat, system="Reply with one word .", params=params) for n in ("drafter", "editor")])
    team.policy.learn(TASKS[0].prompt, ("editor", "drafter"), [1.0, 1.0])  # what the loop learned: editor first
    seen: list[object] = []
    real = trainer_module.collect

    def spy(*args: object, **kwargs: object) -> object:
        batch = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(batch.orders)
        return batch

    monkeypatch.setattr(trainer_module, "collect", spy)
    group = WeightUpdates(patience=1, steps=2, batch_size=8, max_new_tokens=1, eval_episodes=8,
                          options={"advantage": "group", "group_size": 2})  # fmt: skip
    ev = evolver(team, tmp_path / "run.db", weights=group)
    report = ev.escalate()
    assert report.steps == 2 and len(seen) == 4  # evaluation, two training batches, evaluation
    before, *training, after = seen
    assert set(before) == set(after) == {(1, 0)}  # type: ignore[arg-type]  # evaluated in the order served
    drawn = [o for batch in training for o in batch]  # type: ignore[union-attr]
    assert set(drawn) <= {(0, 1), (1, 0)} and drawn.count((1, 0)) > drawn.count((0, 1))  # drawn, learned first
    with pytest.raises(ConfigError, match="group advantages"):
        evolver(team, tmp_path / "other.db", weights=WeightUpdates(patience=1))
