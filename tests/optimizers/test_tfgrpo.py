"""Training-Free GRPO end to end: groups of rollouts, semantic advantages, merged library operations, gates."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest

from connectors import ConfigError, Message
from optimizers import Budget, TrainingFreeGRPO, Version
from tests.optimizers.world import LibraryTeam, Router, scripted_critic, transcript, user_prompts

RULES = {"m1": "units", "m2": "sign", "h1": "scale", "e1": "units"}
KINDS = {"m1": "mixed", "m2": "mixed", "h1": "hard", "e1": "easy"}  # only m1 and m2 have mixed rewards
VAL = {f"v{i}": "units" for i in range(1, 6)} | {"v6": "sign"}
START = {"solver.system": "Solve it.", "solver.library": "[1] When unsure, guess."}
UNITS = "When a quantity has units, state them in the answer."
SIGN = "When unsure, check the sign before guessing."

SUMMARY, ADVANTAGE, OPERATIONS = (
    "Summarise one attempt",
    "Several attempts at the same task",
    "Update an experience library",
)


def summary(messages: Sequence[Message]) -> str:
    return (
        "It kept the key detail and succeeded." if "Reward: 1.00" in messages[1].content else "It missed it and failed."
    )


def advantage(messages: Sequence[Message]) -> str:
    return UNITS if "(example m1)" in messages[1].content else "When a result can be negative, check its sign."


def operations(messages: Sequence[Message]) -> str:
    if "units" in messages[1].content.split("New lessons:")[1]:
        ops = [{"op": "ADD", "id": None, "text": UNITS}, {"op": "DELETE", "id": 1, "text": None}]
    else:
        ops = [{"op": "UPDATE", "id": 1, "text": SIGN}]
    return "Here you go:\n```json\n" + json.dumps(ops) + "\n```"


ROUTES: Router = {SUMMARY: summary, ADVANTAGE: advantage, OPERATIONS: operations}


def team() -> LibraryTeam:
    return LibraryTeam({**RULES, **VAL}, kinds=KINDS)


def grpo(client: object, **kwargs: object) -> TrainingFreeGRPO:
    return TrainingFreeGRPO(critic=client, **kwargs)  # type: ignore[arg-type]


def start(candidate: dict[str, str] | None = None) -> list[Version]:
    return [Version("v0", candidate or START, {})]


def test_a_step_learns_a_library_from_groups_with_mixed_rewards(golden: Callable[[str, str], None]) -> None:
    client, backend = scripted_critic(ROUTES)
    fake = team()
    result = grpo(client).step(start(), "v0", fake, list(RULES), list(VAL))
    assert result.accepted, result.reason
    assert result.reason == "validation: +1.00 mean over 6 examples, p = 0.02"
    assert result.changed == ("solver.library",)
    assert result.candidate is not None and result.candidate["solver.system"] == "Solve it."
    assert result.candidate["solver.library"] == f"[1] {SIGN}\n[2] {UNITS}"  # the update beat the delete
    assert [(q.component, q.example_ids) for q in result.critiques] == [
        ("solver.library", ("m1",)),
        ("solver.library", ("m2",)),
    ]
    assert result.minibatch == (pytest.approx(9 / 20), pytest.approx(15 / 20))
    assert len(backend.calls) == 2 * (5 + 2)  # per kept group: G summaries, one advantage, one operations call
    assert set(result.usage_by_component) == {"solver.library"}
    golden(
        "tfgrpo_step.txt",
        transcript(backend) + f"######## library ({result.reason})\n{result.candidate['solver.library']}\n",
    )


def test_rollouts_are_requested_as_groups_at_the_sampling_temperature() -> None:
    client, _ = scripted_critic(ROUTES)
    fake = team()
    grpo(client, group_size=5, temperature=0.7).step(start(), "v0", fake, list(RULES), list(VAL))
    rollouts, batch_gate, parent_val, proposal_val = fake.calls
    assert (rollouts.samples, rollouts.temperature) == (5, 0.7)
    assert (batch_gate.samples, batch_gate.temperature) == (5, 0.7)  # the proposal is measured like the parent
    assert (parent_val.samples, parent_val.temperature) == (1, None)
    assert proposal_val.ids == list(VAL)


def test_groups_with_equal_rewards_are_dropped() -> None:
    client, backend = scripted_critic(ROUTES)
    grpo(client).step(start(), "v0", team(), list(RULES), list(VAL))
    summarised = {p.split("(example ")[1].split(")")[0] for p in user_prompts(backend) if p.startswith(SUMMARY)}
    assert summarised == {"m1", "m2"}  # h1 always fails, e1 always succeeds: nothing to compare


@pytest.mark.parametrize(
    ("ids", "library", "reason"),
    [
        (["m1", "e1"], "[1] When units or signs matter, mind them.", "nothing to learn: every rollout succeeded"),
        (["h1"], "", "nothing to learn: every rollout failed"),
        (["h1", "e1"], "", "nothing to learn: rewards were equal within every group"),
    ],
)
def test_nothing_to_learn_without_mixed_groups(ids: list[str], library: str, reason: str) -> None:
    client, backend = scripted_critic(ROUTES)
    result = grpo(client).step(start({**START, "solver.library": library}), "v0", team(), ids, list(VAL))
    assert result.reason == reason
    assert result.candidate is None and backend.calls == []


def test_unparseable_operations_are_retried_then_skipped() -> None:
    client, backend = scripted_critic({**ROUTES, OPERATIONS: "I would add a rule about units."})
    result = grpo(client).step(start(), "v0", team(), list(RULES), list(VAL))
    assert result.reason == "critic answer unparseable twice: skipped"
    assert result.candidate is None and not result.accepted
    assert len(backend.calls) == 2 * (5 + 1 + 2)
    assert "found no parseable JSON" in backend.calls[-1][0][-1].content


def test_an_exhausted_budget_stops_before_a_group_it_cannot_finish() -> None:
    client, backend = scripted_critic(ROUTES)
    result = grpo(client, budget=Budget(max_calls=6)).step(start(), "v0", team(), list(RULES), list(VAL))
    assert result.reason == "budget exhausted" and backend.calls == []

    client, backend = scripted_critic(ROUTES)
    result = grpo(client, budget=Budget(max_calls=10)).step(start(), "v0", team(), list(RULES), list(VAL))
    assert len(backend.calls) == 7  # one whole group; the second would not fit
    assert result.candidate is not None and result.candidate["solver.library"] == f"[1] {UNITS}"


def test_no_lesson_means_no_proposal() -> None:
    client, _ = scripted_critic({**ROUTES, ADVANTAGE: "NONE"})
    result = grpo(client).step(start(), "v0", team(), list(RULES), list(VAL))
    assert result.reason == "critic proposed no change to the library"
    assert result.candidate is None


def test_an_empty_or_missing_library_starts_from_nothing() -> None:
    client, backend = scripted_critic({**ROUTES, OPERATIONS: json.dumps([{"op": "ADD", "text": UNITS}])})
    result = grpo(client, minibatch_gate=False).step(
        start({"solver.system": "Solve it."}), "v0", team(), ["m1"], list(VAL)
    )
    assert "(the library is empty)" in user_prompts(backend)[0]
    assert result.candidate == {"solver.system": "Solve it.", "solver.library": f"[1] {UNITS}"}
    assert result.minibatch is None  # the batch gate was switched off


def test_no_batch_improvement_is_rejected_before_validation() -> None:
    client, _ = scripted_critic({**ROUTES, OPERATIONS: json.dumps([{"op": "ADD", "text": "When tired, rest."}])})
    fake = team()
    result = grpo(client).step(start(), "v0", fake, list(RULES), list(VAL))
    assert result.reason == "minibatch did not improve (0.45 → 0.45)"
    assert not set(fake.evaluated()) & set(VAL)


def test_a_library_rejected_recently_is_not_proposed_again() -> None:
    client, _ = scripted_critic(ROUTES)
    rejected = [{**START, "solver.library": f"[1] {SIGN}\n[2] {UNITS}"}]
    result = grpo(client).step(start(), "v0", team(), list(RULES), list(VAL), rejected=rejected)
    assert result.reason == "proposal repeats a recently rejected library"
    assert not result.accepted


def test_configuration_errors() -> None:
    client, _ = scripted_critic(ROUTES)
    with pytest.raises(ConfigError, match="critic="):
        TrainingFreeGRPO(critic=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="group_size must be >= 2"):
        grpo(client, group_size=1)
    with pytest.raises(ConfigError, match="batch_size"):
        grpo(client, batch_size=0)
    with pytest.raises(ConfigError, match="head 'v9'"):
        grpo(client).step(start(), "v9", team(), list(RULES), list(VAL))


def test_unparseable_operations_fall_back_to_the_lessons_when_untagged() -> None:
    from optimizers.tfgrpo import lessons_as_additions

    ops = lessons_as_additions(
        "1. When asked for a capital, answer in one short sentence.\n- Keep it short\n1. When asked for a capital, answer in one short sentence.\nok"
    )
    assert [(o.op, o.text) for o in ops] == [
        ("ADD", "When asked for a capital, answer in one short sentence."),
        ("ADD", "Keep it short"),
    ]
