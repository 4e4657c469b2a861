"""The textual-gradient step end to end: a scripted critic, a fake team, both gates, budgets and bad answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from connectors import ChatClient, ConfigError, ConnectorError, Message, ScriptedChat
from optimizers import Budget, TextualGradientOptimizer, Trace, Version
from optimizers.types import NodeCall
from tests.optimizers.world import Router, RuleTeam, TwoAgentTeam, scripted_critic, transcript, user_prompts

TRAIN = {"t1": "units", "t2": "units", "t3": "units", "t4": "sign"}
VAL = {"v1": "units", "v2": "units", "v3": "units", "v4": "units", "v5": "units", "v6": "sign"}
START = "Answer the question briefly."
EVOLVED = "Answer the question briefly. Always state the units of the result."


def critique(messages: Sequence[Message]) -> str:
    if "units" in messages[1].content.split("Feedback from the environment:")[1]:
        return "The prompt never asks for units; ask the agent to always state them."
    return "The prompt should remind the agent to check the sign of the result."


REWRITE = "Rewrite one prompt component"
ROUTES: Router = {"Critique the prompts": critique, REWRITE: f"<new_text>\n{EVOLVED}\n</new_text>"}


def team() -> RuleTeam:
    return RuleTeam({**TRAIN, **VAL})


def start(system: str = START, scores: dict[str, float] | None = None) -> list[Version]:
    return [Version("v0", {"solver.system": system}, scores or {})]


def optimizer(client: ChatClient, **kwargs: object) -> TextualGradientOptimizer:
    kwargs.setdefault("minibatch_size", 4)
    return TextualGradientOptimizer(critic=client, **kwargs)  # type: ignore[arg-type]


def test_a_step_evolves_the_prompt_from_the_critique(golden: Callable[[str, str], None]) -> None:
    client, backend = scripted_critic(ROUTES)
    fake = team()
    result = optimizer(client).step(start(), "v0", fake, list(TRAIN), list(VAL))
    assert result.candidate == {"solver.system": EVOLVED}
    assert result.accepted
    assert result.reason == "validation: +0.83 mean over 6 examples, p = 0.03"
    assert result.parent == "v0"
    assert result.changed == ("solver.system",)
    assert result.minibatch == (0.0, 0.75)
    assert [q.example_ids for q in result.critiques] == [("t1",), ("t2",), ("t3",), ("t4",)]
    assert result.val_scores == {**dict.fromkeys(list(VAL)[:5], 1.0), "v6": 0.0}
    assert result.parent_scores == dict.fromkeys(VAL, 0.0)  # the parent had none: evaluated for the caller
    # forward on the minibatch, the proposal on it, then the parent and the proposal on validation
    assert [c.ids for c in fake.calls] == [list(TRAIN), list(TRAIN), list(VAL), list(VAL)]
    assert result.usage == client.usage and result.usage.total_tokens > 0
    assert set(result.usage_by_component) == {"solver.system"}
    golden(
        "textgrad_step.txt",
        transcript(backend) + f"######## proposal ({result.reason})\n{result.candidate['solver.system']}\n",
    )


def test_known_parent_scores_are_not_evaluated_again() -> None:
    client, _ = scripted_critic(ROUTES)
    fake = team()
    result = optimizer(client).step(start(scores=dict.fromkeys(VAL, 0.0)), "v0", fake, list(TRAIN), list(VAL))
    assert result.accepted and result.parent_scores is None
    assert [c.ids for c in fake.calls] == [list(TRAIN), list(TRAIN), list(VAL)]


def test_a_validation_regression_is_rejected() -> None:
    # the parent handles signs; the rewrite adds units but drops the sign rule
    client, _ = scripted_critic({**ROUTES, REWRITE: "<new_text>Always state the units.</new_text>"})
    val = {"w1": "sign", "w2": "sign", "w3": "sign", "w4": "units"}
    fake = RuleTeam({**TRAIN, **val})
    result = optimizer(client, minibatch_size=3).step(
        start("Check the sign."), "v0", fake, ["t1", "t2", "t3"], list(val)
    )
    assert result.minibatch == (0.0, 1.0)
    assert not result.accepted
    assert "regression" in result.reason
    assert result.val_scores == {"w1": 0.0, "w2": 0.0, "w3": 0.0, "w4": 1.0}
    assert result.candidate == {"solver.system": "Always state the units."}  # the proposal is still reported


def test_no_minibatch_improvement_is_rejected_before_validation_runs() -> None:
    client, _ = scripted_critic({**ROUTES, REWRITE: "<new_text>Answer very briefly.</new_text>"})
    fake = team()
    result = optimizer(client).step(start(), "v0", fake, list(TRAIN), list(VAL))
    assert not result.accepted
    assert result.reason == "minibatch did not improve (0.00 → 0.00)"
    assert not set(fake.evaluated()) & set(VAL)
    assert result.val_scores is None and result.parent_scores is None


def test_an_exhausted_budget_stops_the_step_without_calling_the_critic() -> None:
    client, backend = scripted_critic(ROUTES)
    result = optimizer(client, budget=Budget(max_calls=1)).step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.reason == "budget exhausted"
    assert result.candidate is None and not result.accepted
    assert backend.calls == []  # the one call is reserved for the rewrite: no critique fits

    client, backend = scripted_critic(ROUTES)
    result = optimizer(client, budget=Budget(max_tokens=50)).step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.reason == "budget exhausted" and backend.calls == []


def test_the_budget_keeps_room_for_the_rewrite() -> None:
    client, backend = scripted_critic(ROUTES)
    result = optimizer(client, budget=Budget.preset("light", max_calls=2)).step(
        start(), "v0", team(), list(TRAIN), list(VAL)
    )
    assert len(backend.calls) == 2  # one critique, one rewrite, never more than the budget
    assert len(result.critiques) == 1
    assert result.candidate == {"solver.system": EVOLVED}
    assert result.usage_by_component["solver.system"].total_tokens == result.usage.total_tokens


def test_an_unparseable_rewrite_is_retried_once_then_skipped() -> None:
    client, backend = scripted_critic({**ROUTES, REWRITE: "You should mention units."})
    result = optimizer(client).step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.reason == "critic answer unparseable twice: skipped"
    assert result.candidate is None and not result.accepted
    assert len(backend.calls) == 4 + 2
    retry = backend.calls[-1][0]
    assert [m.role for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[2].content == "You should mention units."
    assert "could not be used: expected the new text between <new_text> and </new_text>" in retry[3].content


def test_a_rewrite_fixed_on_retry_is_used() -> None:
    answers = iter(["Mention units.", f"<new_text>{EVOLVED}</new_text>"])
    client, _ = scripted_critic({**ROUTES, REWRITE: lambda m: next(answers)})
    result = optimizer(client).step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.accepted and result.candidate == {"solver.system": EVOLVED}


def test_empty_critiques_are_skipped_and_the_step_reports_it() -> None:
    client, backend = scripted_critic({"Critique the prompts": "  "})
    result = optimizer(client).step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.reason == "critic answer unparseable twice: skipped"
    assert len(backend.calls) == 8  # 4 critiques, each asked twice


def test_a_failing_critic_backend_ends_the_step_with_a_reason() -> None:
    def down(messages: Sequence[Message]) -> str:
        raise ConnectorError("503 from the critic")

    client = ChatClient(ScriptedChat(down, name="critic"), retries=0)
    result = optimizer(client).step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.reason.startswith("critic failed (critic, on solver.system): 503")
    assert result.candidate is None


def test_pareto_selection_builds_on_a_non_dominated_version() -> None:
    val = {"x": "units", "y": "sign", "z": "sign"}
    versions = [
        Version("v0", {"solver.system": "Answer."}, {"x": 0.0, "y": 0.0, "z": 0.0}),
        Version("units", {"solver.system": "Answer with units."}, {"x": 1.0, "y": 0.0, "z": 0.0}),
        Version("sign", {"solver.system": "Answer, mind the sign."}, {"x": 0.0, "y": 1.0, "z": 1.0}),
        Version("half", {"solver.system": "Answer, sign maybe."}, {"x": 0.0, "y": 1.0, "z": 0.0}),
    ]
    parents = set()
    for seed in range(12):
        client, _ = scripted_critic(ROUTES)
        fake = RuleTeam({**TRAIN, **val})
        result = optimizer(client, parent_selection="pareto", seed=seed).step(
            versions, "v0", fake, list(TRAIN), list(val)
        )
        parents.add(result.parent)
        assert fake.calls[0].candidate == dict(next(v.candidate for v in versions if v.id == result.parent))
    assert parents == {"units", "sign"}


def test_per_call_critiques_walk_back_from_the_output() -> None:
    routes: Router = {
        "(step 2 of 2, agent solver)": "The solver cannot repair a plan that ignores units.",
        "(step 1 of 2, agent planner)": "The planner must tell the solver to mind the units.",
        "Component: planner.system": "<new_text>Plan the steps and mind the units.</new_text>",
        "Component: solver.system": "<new_text>Follow the plan.</new_text>",
    }
    client, backend = scripted_critic(routes)
    fake = TwoAgentTeam({"t1": "units", "t2": "units", "v1": "units"})
    candidate = {"planner.system": "Plan the steps.", "solver.system": "Follow the plan."}
    result = optimizer(client, budget=Budget(max_components=2)).step(
        [Version("v0", candidate, {})], "v0", fake, ["t1", "t2"], ["v1"]
    )
    prompts = user_prompts(backend)
    assert [p.split("\n")[2] for p in prompts[:2]] == [
        "Component: solver.system — the agent's role and instructions (its system prompt)",
        "Component: planner.system — the agent's role and instructions (its system prompt)",
    ]
    assert "- on solver.system (step 2, agent solver): The solver cannot repair" in prompts[1]
    assert len(result.critiques) == 4
    assert result.changed == ("planner.system",)  # the solver's rewrite returned its current text
    assert result.candidate == {
        "planner.system": "Plan the steps and mind the units.",
        "solver.system": "Follow the plan.",
    }


def test_feedback_backward_uses_the_environments_feedback_as_the_critique() -> None:
    client, backend = scripted_critic({REWRITE: f"<new_text>{EVOLVED}</new_text>"})
    result = optimizer(client, backward="feedback").step(start(), "v0", team(), list(TRAIN), list(VAL))
    prompts = user_prompts(backend)
    assert len(prompts) == 1 and prompts[0].startswith(REWRITE)  # no critique calls: only the rewrite
    assert "1. (examples t1, t2, t3) wrong: the answer must take care of the units" in prompts[0]
    assert "2. (examples t4) wrong: the answer must take care of the sign" in prompts[0]
    assert [q.text for q in result.critiques][-1] == "wrong: the answer must take care of the sign"
    assert result.accepted and result.candidate == {"solver.system": EVOLVED}


def test_append_edit_adds_one_instruction_after_the_current_text() -> None:
    routes: Router = {
        "Critique the prompts": critique,
        "Add one instruction": "<new_text>Always state the units.</new_text>",
    }
    client, backend = scripted_critic(routes)
    result = optimizer(client, edit="append").step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.candidate == {"solver.system": f"{START}\nAlways state the units."}
    assert result.accepted
    assert user_prompts(backend)[-1].startswith("Add one instruction to a prompt component")


def test_an_addition_the_text_already_holds_is_no_change() -> None:
    routes: Router = {
        "Critique the prompts": critique,
        "Add one instruction": "<new_text>answer the question BRIEFLY.</new_text>",
    }
    client, _ = scripted_critic(routes)
    result = optimizer(client, edit="append").step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert (result.accepted, result.reason) == (False, "critic proposed no change")


def test_a_looping_untagged_rewrite_is_cut_before_the_loop() -> None:
    loop = "Always state the units. Check the sign. Always state the units. Always state the units. Alw"
    client, _ = scripted_critic({"Critique the prompts": critique, REWRITE: loop})
    result = optimizer(client, untagged=True).step(start(), "v0", team(), list(TRAIN), list(VAL))
    assert result.candidate == {"solver.system": "Always state the units. Check the sign."}


def test_long_texts_reach_the_critic_in_full() -> None:
    long = START + " " + " ".join(f"clause{i}." for i in range(2500))
    client, backend = scripted_critic(ROUTES)
    optimizer(client, minibatch_size=1).step(start(long), "v0", team(), ["t1"], list(VAL))
    critique_prompt, rewrite_prompt = user_prompts(backend)
    assert critique_prompt.count(long) == 2  # the component and the call's input
    assert f"<text>\n{long}\n</text>" in rewrite_prompt


def test_the_rewrite_sees_the_best_past_versions_and_recent_rejections() -> None:
    versions = [
        Version("v0", {"solver.system": START}, {**dict.fromkeys(VAL, 0.0), "v6": 0.5}),
        Version("v1", {"solver.system": "Answer with care."}, dict.fromkeys(VAL, 0.0)),
    ]
    rejected = [{"solver.system": "Answer in one word."}, {"solver.system": START}]
    client, backend = scripted_critic(ROUTES)
    optimizer(client).step(versions, "v0", team(), list(TRAIN), list(VAL), rejected=rejected)
    rewrite = user_prompts(backend)[-1]
    history = "[version v0: mean validation score 0.08 over 6 examples]\n" + START
    assert history + "\n\n[version v1: mean validation score 0.00 over 6 examples]\nAnswer with care." in rewrite
    assert "[rejected proposal 1]\nAnswer in one word." in rewrite
    assert "[rejected proposal 2]" not in rewrite  # the current text is not a rejected proposal


def test_a_proposal_equal_to_a_rejected_one_is_not_gated_again() -> None:
    client, _ = scripted_critic(ROUTES)
    fake = team()
    result = optimizer(client).step(start(), "v0", fake, list(TRAIN), list(VAL), rejected=[{"solver.system": EVOLVED}])
    assert result.reason == "proposal repeats a recently rejected candidate"
    assert not result.accepted and len(fake.calls) == 1


def test_poorly_rated_served_answers_are_critiqued_with_the_minibatch_but_never_gate() -> None:
    client, backend = scripted_critic(ROUTES)
    served = Trace(
        "served:chatcmpl-1",
        (NodeCall("solver", ("solver.system",), "How far is it?", "12"),),
        "12",
        0.0,
        "A user rated this answer 0 out of 1. Their comment: which units? km or miles?",
    )
    fake = team()
    result = optimizer(client).step(start("Always state units."), "v0", fake, ["t1", "t2"], list(VAL), extra=[served])
    assert [q.example_ids for q in result.critiques] == [("served:chatcmpl-1",)]
    assert any("km or miles?" in m.content for call, _ in backend.calls for m in call)
    assert all("served:chatcmpl-1" not in c.ids for c in fake.calls)  # evaluated: the tasks only


def test_nothing_to_learn_when_the_minibatch_succeeds() -> None:
    client, backend = scripted_critic(ROUTES)
    result = optimizer(client).step(start("Always state units."), "v0", team(), ["t1", "t2"], list(VAL))
    assert result.reason == "nothing to learn: every minibatch example succeeded"
    assert backend.calls == [] and result.candidate is None


def test_only_the_trainable_components_are_critiqued_and_rewritten() -> None:
    client, backend = scripted_critic(ROUTES)
    versions = [Version("v0", {"solver.system": START, "solver.format": "One line."}, {})]
    result = optimizer(client, components=["solver.system"]).step(versions, "v0", team(), list(TRAIN), list(VAL))
    assert "solver.format" not in "".join(user_prompts(backend)[:1])
    assert result.changed == ("solver.system",)
    assert result.candidate is not None and result.candidate["solver.format"] == "One line."
    with pytest.raises(ConfigError, match="not in the candidate"):
        optimizer(client, components=["planner.system"]).step(versions, "v0", team(), list(TRAIN), list(VAL))


def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="critic="):
        TextualGradientOptimizer(critic=None)  # type: ignore[arg-type]
    client, _ = scripted_critic(ROUTES)
    with pytest.raises(ConfigError, match="backward"):
        TextualGradientOptimizer(critic=client, backward="sideways")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="edit must be 'rewrite' or 'append'"):
        TextualGradientOptimizer(critic=client, edit="prepend")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown budget preset"):
        TextualGradientOptimizer(critic=client, budget="enormous")
    with pytest.raises(ConfigError, match="training example"):
        optimizer(client).step(start(), "v0", team(), [], list(VAL))
    with pytest.raises(ConfigError, match="head 'v9'"):
        optimizer(client).step(start(), "v9", team(), list(TRAIN), list(VAL))
