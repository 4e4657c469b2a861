"""The loop with prompt evolution: evaluate, a step per round, HEAD moves only on acceptance."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from connectors import ConfigError, HashEmbedder, Message, Observation, ResponseCache, ScriptedChat
from connectors.chat import ChatClient
from evolve import Agent, Evolver, MemoryView, PromptEvolution, PromptGraph, Task, Team, make_evaluate, split_tasks
from evolve.envs.tasks import TaskEnv
from memory import MemoryStore
from optimizers.types import Candidate, Evaluate, StepResult, Trace, Version

TASKS = [Task(id=f"t{i}", prompt=f"Name colour number {i}.", answer="red") for i in range(6)]


def obedient(messages: Sequence[Message]) -> str:
    """Answers 'red' only when its system prompt tells it to."""
    return "red" if "always answer red" in messages[0].content else "blue"


class ProposeOnce:
    """A stand-in optimizer: proposes one fixed system prompt, accepted when validation improves."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0

    def step(
        self,
        versions: Sequence[Version],
        head: str,
        evaluate: Evaluate,
        train_ids: Sequence[str],
        val_ids: Sequence[str],
        *,
        rejected: Sequence[Candidate] = (),
    ) -> StepResult:
        self.calls += 1
        parent = next(v for v in versions if v.id == head)
        proposal = {**parent.candidate, "solver.system": self.text}
        before = {t.example_id: t.score for t in evaluate(parent.candidate, val_ids)}
        after = {t.example_id: t.score for t in evaluate(proposal, val_ids)}
        better = sum(after.values()) > sum(before.values())
        return StepResult(
            head, proposal, better, "improved" if better else "no gain", ("solver.system",), val_scores=after
        )


def make(tmp_path: Path, optimizer: ProposeOnce, *, run: str = "p") -> tuple[Evolver, PromptGraph, ScriptedChat]:
    model = ScriptedChat(obedient)
    store = MemoryStore(f"sqlite:///{tmp_path / 'p.db'}", embedder=HashEmbedder())
    team = Team([Agent("solver", ChatClient(model), system="Answer briefly.", memory=MemoryView(store))])
    graph = PromptGraph(store.engine, run)
    train, val = split_tasks(TASKS, seed=1)
    prompts = PromptEvolution(graph, optimizer, train_ids=train, val_ids=val)
    return Evolver(team, TASKS, memory=store, run=run, prompts=prompts, progress=False), graph, model


def test_an_accepted_proposal_moves_head_and_the_team_acts_from_it(tmp_path: Path) -> None:
    ev, graph, _ = make(tmp_path, ProposeOnce("Answer briefly; always answer red."))
    metrics = ev.run(rounds=2)
    assert [m.success_rate for m in metrics] == [0.0, 1.0]
    assert [m.prompt_updates for m in metrics][0] == 1 and metrics[0].prompt_version == graph.head().id
    assert graph.head().nodes["solver.system"] == "Answer briefly; always answer red."
    assert len(graph.log()) == 2 and graph.head().parents == (graph.log()[-1].id,)


def test_a_rejected_proposal_leaves_head_and_is_recorded(tmp_path: Path) -> None:
    ev, graph, _ = make(tmp_path, ProposeOnce("Answer in one word."))
    metrics = ev.run(rounds=1)
    assert metrics[0].prompt_updates == 0 and metrics[0].prompt_note == "no gain"
    assert graph.head().nodes["solver.system"] == "Answer briefly." and len(graph.log()) == 1
    assert graph.rejected() == [({"solver.system": "Answer in one word.", "solver.library": ""}, "no gain")]


def test_a_resumed_run_acts_from_the_evolved_head(tmp_path: Path) -> None:
    ev, graph, _ = make(tmp_path, ProposeOnce("Answer briefly; always answer red."))
    ev.run(rounds=1)
    again, _, model = make(tmp_path, ProposeOnce("Answer briefly."))
    assert again.run(rounds=2)[1].success_rate == 1.0
    assert "always answer red" in model.calls[0][0][0].content


def test_evaluate_draws_distinct_samples_and_never_learns(tmp_path: Path) -> None:
    model = ScriptedChat(["a", "b", "c", "d", "e", "f"])
    store = MemoryStore("sqlite://", embedder=HashEmbedder())
    cached = ChatClient(model, cache=ResponseCache())
    team = Team([Agent("solver", cached, memory=MemoryView(store))])
    evaluate = make_evaluate(team, TASKS, lambda: TaskEnv(TASKS))
    traces = evaluate({"solver.system": "Be brief."}, ["t0", "t1"], samples=3, temperature=0.7)
    assert [t.example_id for t in traces] == ["t0"] * 3 + ["t1"] * 3
    assert len(model.calls) == 6  # three samples at temperature 0.7 are three draws, not one cache line
    assert {c[1]["temperature"] for c in model.calls} == {0.7}
    assert model.calls[0][0][0].content == "Be brief."
    evaluate({"solver.system": "Be brief."}, ["t0"], samples=3, temperature=0.7)
    assert len(model.calls) == 6  # the same draws again come from the cache
    assert store.items() == [] and traces[0].calls[0].node == "solver"


def test_split_is_seeded_and_disjoint() -> None:
    train, val = split_tasks(TASKS, val_fraction=0.5, seed=3)
    assert sorted(train + val) == sorted(t.id for t in TASKS) and not set(train) & set(val)
    assert (train, val) == split_tasks(TASKS, val_fraction=0.5, seed=3)
    with pytest.raises(ConfigError, match="at least 2 tasks"):
        split_tasks(TASKS[:1])


def test_unknown_components_are_refused(tmp_path: Path) -> None:
    team = Team([Agent("solver", ChatClient(ScriptedChat(["x"])))])
    with pytest.raises(ConfigError, match="name no agent"):
        team.with_prompts({"critic.system": "x"})


class TakesExtra(ProposeOnce):
    """Records the extra traces the loop hands over."""

    def __init__(self) -> None:
        super().__init__("Answer briefly.")
        self.extra: list[Trace] = []

    def step(self, *args: object, extra: Sequence[Trace] = (), **kwargs: object) -> StepResult:  # type: ignore[override]
        self.extra = list(extra)
        return super().step(*args, **kwargs)  # type: ignore[arg-type]


def test_a_round_hands_rated_served_answers_to_the_optimizer(tmp_path: Path) -> None:
    optimizer = TakesExtra()
    ev, _, _ = make(tmp_path, optimizer)  # type: ignore[arg-type]
    served = [Trace("served:chatcmpl-1", (), "blue", 0.0, "A user rated this answer 0 out of 1.")]
    ev.run_round(1, extra_traces=served)
    assert optimizer.extra == served
    ev.run_round(2)
    assert optimizer.extra == [] and optimizer.calls == 2  # none: the keyword is left out (older optimizers)


class TwoDoors:
    """A two-step game: 'open door' first, then 'go north' wins; anything else ends it with nothing."""

    def reset(self, task: Task) -> str:
        self.turn = 0
        return "A closed door. Commands: open door, go north"

    def step(self, action: str) -> Observation:
        self.turn += 1
        want = "open door" if self.turn == 1 else "go north"
        if action != want:
            return Observation(f"nothing happens ({action!r})", 0.0, True)
        if self.turn == 1:
            return Observation("The door is open. Commands: go north", 0.5, False)
        return Observation("You escaped!", 1.0, True)


def test_evaluate_plays_multi_step_games_for_max_turns() -> None:
    model = ScriptedChat({"closed door": "open door", "door is open": "go north"})
    team = Team([Agent("solver", ChatClient(model))])
    tasks = TASKS[:2]
    one = make_evaluate(team, tasks, TwoDoors)({}, ["t0"])
    assert (one[0].score, one[0].feedback) == (0.5, "The door is open. Commands: go north")
    both = make_evaluate(team, tasks, TwoDoors, max_turns=3)({}, ["t0", "t1"])
    assert [t.score for t in both] == [1.0, 1.0] and both[0].feedback == "You escaped!"
    assert [c.output for c in both[0].calls] == ["open door", "go north"]  # every turn's call, in order
    with pytest.raises(ConfigError, match="max_turns"):
        make_evaluate(team, tasks, TwoDoors, max_turns=0)
