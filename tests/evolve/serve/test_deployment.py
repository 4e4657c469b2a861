"""Serving a team: answers from memory and HEAD prompts, feedback on exactly the recalled memories."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import update

from connectors import ChatClient, ConfigError, ConnectorError, HashEmbedder, Message, load_chat
from connectors.fakes import ScriptedChat
from evolve.jobs.served import feedback_traces, learn_from_feedback
from evolve.serve.answers import UnknownResponse
from evolve.serve.chat_requests import conversation
from evolve.serve.deployment import Deployment
from evolve.serve.responses import feedback_rows
from evolve.spec import RunSpec

QUESTION = "What is the door code of the Harbor warehouse?"


def make_spec(tmp_path: Path, *, agents: list[dict] | None = None) -> RunSpec:
    return RunSpec.model_validate(
        {
            "run": {"name": "codes", "database": f"sqlite:///{tmp_path / 'serve.db'}"},
            "model": {"chat": "fake/scripted", "options": {"replies": ["4471"]}},
            "embedder": {"name": "hash"},
            "environment": {"tasks": "unused.jsonl"},
            "memory": {"k1": 10, "k2": 2},
            "agents": agents or [{"name": "solver", "system": "Reply with the code only."}],
        }
    )


@pytest.fixture
def seen() -> list[list[Message]]:
    return []


@pytest.fixture
def deployment(tmp_path: Path, seen: list[list[Message]]) -> Deployment:
    def reply(messages: Sequence[Message]) -> str:
        seen.append(list(messages))
        return "4471"

    d = Deployment(make_spec(tmp_path), chat=load_chat("fake/scripted", replies=reply))
    yield d
    d.close()


def seed(d: Deployment, tenant: str, n: int = 5) -> list[str]:
    """Memories in the tenant's solver namespace: harbor ones near the question, others far from it."""
    assert d.store is not None
    ns = f"{d.run_name(tenant)}/solver"
    intents = [QUESTION, "Door code of the Harbor warehouse?", "harbor warehouse door", "summit alarm", "lunch menu"]
    return [d.store.add(intents[i], f"lesson {i} for {tenant}", namespace=ns).id for i in range(n)]


def qs(d: Deployment, ids: list[str]) -> dict[str, tuple[float, int]]:
    assert d.store is not None
    every = {m.id: (m.q, m.visits) for m in d.store.items()}
    return {i: every[i] for i in ids}


def test_feedback_moves_the_q_of_exactly_the_recalled_memories(deployment: Deployment) -> None:
    ids = seed(deployment, "alice")
    answer = deployment.answer([Message("user", QUESTION)], tenant="alice")
    assert answer.text == "4471" and answer.id.startswith("chatcmpl-") and len(answer.recall_ids) == 1
    recalled = set(deployment.store.explain(answer.recall_ids[0], namespace="codes@alice/solver")["selected"])  # type: ignore[union-attr]
    assert len(recalled) == 2  # k2
    before = qs(deployment, ids)

    receipt = deployment.feedback(answer.id, 1.0, tenant="alice", comment="right code")

    after = qs(deployment, ids)
    assert receipt.applied and receipt.reinforced == 2 and receipt.reward == 1.0
    assert {i for i in ids if after[i] != before[i]} == recalled
    for i in recalled:
        assert after[i] == pytest.approx((0.3, 1))  # Q <- 0 + 0.3 * (1 - 0), one visit


def test_a_repeated_key_changes_nothing_and_a_new_key_applies_again(deployment: Deployment) -> None:
    ids = seed(deployment, "alice")
    answer = deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.feedback(answer.id, 0.0, tenant="alice")
    once = qs(deployment, ids)
    repeat = deployment.feedback(answer.id, 1.0, tenant="alice")  # same (default) key: ignored, score too
    assert not repeat.applied and repeat.reinforced == 0 and qs(deployment, ids) == once
    other = deployment.feedback(answer.id, 0.0, tenant="alice", key="second-rater")
    assert other.applied and other.reinforced == 2 and qs(deployment, ids) != once


def test_tenants_share_no_memories_no_responses_and_no_prompts(deployment: Deployment, seen: list) -> None:
    alice = seed(deployment, "alice")
    answer = deployment.answer([Message("user", QUESTION)], tenant="alice")
    with pytest.raises(UnknownResponse):
        deployment.feedback(answer.id, 1.0, tenant="bob")
    with pytest.raises(UnknownResponse):
        deployment.response(answer.id, tenant="bob")
    assert qs(deployment, alice) == {i: (0.0, 0) for i in alice}

    seen.clear()
    bob = deployment.answer([Message("user", QUESTION)], tenant="bob")
    assert (
        deployment.store is not None
        and not deployment.store.explain(bob.recall_ids[0], namespace="codes@bob/solver")["selected"]
    )
    assert "lesson" not in seen[0][-1].content  # bob's prompt quotes none of alice's experiences

    graph = deployment.graph("alice")
    graph.commit({"solver.system": "Alice's evolved prompt.", "solver.library": ""}, parents=[graph.head().id])
    seen.clear()
    deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.answer([Message("user", QUESTION)], tenant="bob")
    assert [m[0].content for m in seen] == ["Alice's evolved prompt.", "Reply with the code only."]


def test_answers_follow_head_after_a_rollback(deployment: Deployment, seen: list) -> None:
    graph = deployment.graph(None)
    seed_version = graph.head().id
    graph.commit({"solver.system": "Newer prompt.", "solver.library": ""}, parents=[seed_version])
    assert deployment.answer([Message("user", QUESTION)]).prompt_version != seed_version
    graph.rollback(seed_version)
    again = deployment.answer([Message("user", QUESTION)])
    assert again.prompt_version == seed_version and seen[-1][0].content == "Reply with the code only."


def test_bad_requests_get_clear_errors_and_store_nothing(deployment: Deployment) -> None:
    ids = seed(deployment, "alice")
    answer = deployment.answer([Message("user", QUESTION)], tenant="alice")
    for score in (1.5, -0.1, float("nan"), "good", None):
        with pytest.raises(ConfigError, match="score must be a number in"):
            deployment.feedback(answer.id, score, tenant="alice")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="user message"):
        deployment.answer([Message("system", "be brief")], tenant="alice")
    with pytest.raises(ConfigError, match="unsupported parameters"):
        deployment.answer([Message("user", QUESTION)], tenant="alice", params={"logit_bias": {}})
    with pytest.raises(ConfigError, match="tenant name"):
        deployment.answer([Message("user", QUESTION)], tenant="../alice")
    assert qs(deployment, ids) == {i: (0.0, 0) for i in ids}


class Unpenalized(ScriptedChat):
    takes_penalties = False  # a backend that would drop them


def test_penalties_a_model_cannot_take_are_refused_naming_it_and_zero_asks_nothing(tmp_path: Path) -> None:
    d = Deployment(make_spec(tmp_path), chat=ChatClient(Unpenalized(["4471"])))
    refusal = r"presence_penalty cannot be honoured: the model of solver \(scripted\) takes none"
    for ask in (d.answer, d.stream):
        with pytest.raises(ConfigError, match=refusal):
            ask([Message("user", QUESTION)], params={"presence_penalty": 0.4})
    d.answer([Message("user", QUESTION)], params={"presence_penalty": 0.0, "frequency_penalty": 0.0})
    sent = d.chat.backend.calls[-1][1]  # type: ignore[attr-defined]
    assert "presence_penalty" not in sent and "frequency_penalty" not in sent
    d.close()


def test_the_specs_max_tokens_is_the_default_and_a_requests_own_wins(deployment: Deployment) -> None:
    calls = deployment.chat.backend.calls  # type: ignore[attr-defined]
    deployment.answer([Message("user", QUESTION)])
    assert calls[-1][1]["max_tokens"] == 32  # ModelSection's default: this spec sets none
    deployment.answer([Message("user", QUESTION)], params={"max_tokens": 5})
    assert calls[-1][1]["max_tokens"] == 5


def test_a_repeated_question_is_embedded_once(tmp_path: Path) -> None:
    embedded: list[str] = []

    class Recording(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            embedded.extend(texts)
            return super().embed(texts)

    d = Deployment(make_spec(tmp_path), chat=load_chat("fake/scripted", replies=["4471"]), embedder=Recording())
    assert d.store is not None
    d.store.add("harbor warehouse door", "the code is 4471", namespace="codes@alice/solver")
    for _ in range(3):
        assert d.answer([Message("user", QUESTION)], tenant="alice").recall_ids
    assert embedded.count(QUESTION) == 1
    d.close()


def test_a_failing_model_is_a_connector_error(tmp_path: Path) -> None:
    d = Deployment(make_spec(tmp_path), chat=load_chat("fake/scripted", replies=[], retries=0))
    with pytest.raises(ConnectorError, match="could not answer"):
        d.answer([Message("user", QUESTION)])
    d.close()


def test_a_multi_turn_chat_answers_the_last_user_message_and_recalls_by_it() -> None:
    observation, query = conversation(
        [
            Message("system", "You are the Acme bot."),
            Message("user", "Hi"),
            Message("assistant", "Hello!"),
            Message("user", QUESTION),
        ]
    )
    assert query == QUESTION
    assert observation.startswith("Instructions from the app:\nYou are the Acme bot.")
    assert "user: Hi\nassistant: Hello!" in observation and observation.endswith(f"Reply to: {QUESTION}")
    assert conversation([Message("user", QUESTION)]) == (QUESTION, QUESTION)


def test_named_speakers_are_shown_with_their_turns_and_memory_still_recalls_by_the_question() -> None:
    observation, query = conversation(
        [
            Message("system", "Route codes to the desk.", name="router"),
            Message("assistant", "The Harbor file is open.", name="researcher"),
            Message("user", QUESTION, name="alice"),
        ]
    )
    assert query == QUESTION  # the name never enters the recall query
    assert "Instructions from the app:\nrouter: Route codes to the desk." in observation
    assert "assistant (researcher): The Harbor file is open." in observation
    assert observation.endswith(f"Reply to alice: {QUESTION}")
    assert conversation([Message("user", QUESTION, name="alice")]) == (f"Reply to alice: {QUESTION}", QUESTION)


def test_jobs_learn_queued_feedback_once_even_after_a_crash(deployment: Deployment) -> None:
    ids = seed(deployment, "alice")
    team, _ = deployment.team("alice")
    store = deployment.store
    assert store is not None
    answer = deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.feedback(answer.id, 1.0, tenant="alice", comment="4471 is right")
    # A server killed after reinforcing but before marking the feedback applied leaves it unapplied:
    crashed = deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.feedback(crashed.id, 1.0, tenant="alice")
    reinforced = qs(deployment, ids)
    fid = f"{crashed.id}:default"
    with deployment.engine.begin() as conn:
        conn.execute(update(feedback_rows).where(feedback_rows.c.id == fid).values(applied=0))

    run = deployment.run_name("alice")
    assert learn_from_feedback(store, team, run) == 2
    written = [it for it in store.items(f"{run}/solver") if it.id.startswith("served:")]
    assert len(written) == 2 and all(it.success for it in written)
    assert "4471 is right" in " ".join(it.experience for it in written)
    after = qs(deployment, ids)
    assert after == reinforced  # re-applying the unmarked feedback is a no-op: its feedback ids were used
    assert learn_from_feedback(store, team, run) == 0  # nothing queued: nothing written twice
    assert len(store.items(f"{run}/solver")) == len(ids) + 2


def test_rated_answers_become_traces_for_the_prompt_optimizer(deployment: Deployment) -> None:
    first = deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.feedback(first.id, 0.0, tenant="alice", comment="the code changed to 4472")
    deployment.answer([Message("user", "unrated question")], tenant="alice")
    bob = deployment.answer([Message("user", QUESTION)], tenant="bob")
    deployment.feedback(bob.id, 1.0, tenant="bob")

    traces = feedback_traces(deployment.engine, deployment.run_name("alice"))
    assert [(t.example_id, t.output, t.score) for t in traces] == [(f"served:{first.id}", "4471", 0.0)]
    assert traces[0].feedback.endswith("Their comment: the code changed to 4472")
    assert [c.node for c in traces[0].calls] == ["solver"] and traces[0].calls[0].prompt == QUESTION
    assert feedback_traces(deployment.engine, deployment.run_name("alice"), since=time.time() + 1) == []


def test_a_bad_rating_keeps_the_answer_it_judged_unless_its_comment_says_what_was_wrong(
    deployment: Deployment,
) -> None:
    team, _ = deployment.team("alice")
    store = deployment.store
    assert store is not None
    silent = deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.feedback(silent.id, 0.0, tenant="alice")
    told = deployment.answer([Message("user", "Alarm code of the Summit office — east stair?")], tenant="alice")
    deployment.feedback(told.id, 0.0, tenant="alice", comment="the code changed to 4472")

    run = deployment.run_name("alice")
    assert learn_from_feedback(store, team, run) == 2
    by_answer = {it.id.split(":", 1)[1].split("/")[0]: it.experience for it in store.items(f"{run}/solver")}
    # "rated 0 (bad)" alone says nothing of what was wrong: the memory shows the answer it judged
    assert "Answer given: 4471" in by_answer[silent.id] and "(bad)" in by_answer[silent.id]
    # a comment says it, as an environment's feedback does: the wrong answer is not kept (the default)
    assert "4471" not in by_answer[told.id] and "the code changed to 4472" in by_answer[told.id]
