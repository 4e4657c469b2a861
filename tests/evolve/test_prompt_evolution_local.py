"""Prompt evolution with the real local model as both actor and critic (SmolLM2-135M, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors import load_chat, make_engine
from evolve import Agent, PromptEvolution, PromptGraph, Team, load_tasks, make_evaluate
from evolve.envs.tasks import TaskEnv
from optimizers import TextualGradientOptimizer, TrainingFreeGRPO

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup() -> tuple[Team, list, object]:
    tasks = load_tasks(ROOT / "data" / "format_rules.jsonl")[:6]
    chat = load_chat("local/smollm2", batch_size=8)
    team = Team([Agent("solver", chat, system="You are a helpful assistant.", params={"max_tokens": 12})])
    return team, tasks, chat


@pytest.mark.parametrize("kind", ["textgrad", "tfgrpo"])
def test_a_step_leaves_a_valid_version_or_an_explicit_rejection(setup: tuple, kind: str, tmp_path: Path) -> None:
    team, tasks, chat = setup
    if kind == "textgrad":
        optimizer = TextualGradientOptimizer(
            critic=chat, budget="light", minibatch_size=2, critic_params={"max_tokens": 160}
        )
    else:
        optimizer = TrainingFreeGRPO(
            critic=chat, group_size=2, batch_size=2, budget="light", critic_params={"max_tokens": 120}
        )
    graph = PromptGraph(make_engine(f"sqlite:///{tmp_path / 'p.db'}"), kind)
    evolution = PromptEvolution(
        graph, optimizer, train_ids=[t.id for t in tasks[:3]], val_ids=[t.id for t in tasks[3:]]
    )
    seed = evolution.start(team)
    update = evolution.step(seed, make_evaluate(team, tasks, lambda: TaskEnv(tasks)))

    assert update.reason  # an explicit verdict, whatever it is
    head = graph.head()
    if update.accepted:
        assert head.id == update.head and head.parents and head.scores  # a new, scored version
        assert all(isinstance(text, str) for text in head.nodes.values())
    else:
        assert head.id == graph.log()[-1].id  # HEAD stayed on the seed
    critic_ran = any(caller.startswith("critic") for caller in chat.usage_by_caller)
    assert critic_ran or "nothing to learn" in update.reason or "perfect" in update.reason
