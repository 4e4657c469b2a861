"""The loop over a faulting model server: failed episodes say why, the rest learn, nothing escapes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.reliability.faults import RETRIES, FaultRound, evolver_under_faults
from tests.support.fake_openai import FAULT_KINDS, FaultMix, Reply, chat_body

# what an episode's error says for each fault that outlasts the retry budget
REASONS = (
    "HTTP 429",
    "HTTP 500",
    "did not answer in time",
    "does not parse",
    "cannot reach",
    "no choices",
    "over the cap",
)


RUN: dict[str, Any] = {"seed": 2, "n_tasks": 16, "rounds": 2, "rate": 0.07}  # this seed injects every kind of fault
EPISODES = 32


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> FaultRound:
    return evolver_under_faults(tmp_path_factory.mktemp("faults"), **RUN)


def test_no_exception_escapes_and_every_round_finishes(faulted: FaultRound) -> None:
    assert faulted.escaped is None
    assert len(faulted.success_rates) == 2 and len(faulted.episodes) == EPISODES


def test_faults_of_many_kinds_were_injected(faulted: FaultRound) -> None:
    assert {k for k in FAULT_KINDS if faulted.kinds[k]} == set(FAULT_KINDS)


def test_failed_episodes_carry_the_reason(faulted: FaultRound) -> None:
    failed = [e for e in faulted.episodes if e.error is not None]
    assert failed, "the seed should fail some episodes"
    for e in failed:
        assert e.error.startswith("solver: openai/test-model") and any(r in e.error for r in REASONS), e.error
        assert e.reward == 0.0 and not e.success


def test_requests_stay_within_the_retry_budget(faulted: FaultRound) -> None:
    assert faulted.requests <= faulted.calls_bound == (RETRIES + 1) * EPISODES
    assert faulted.requests > EPISODES  # some faults were retried


def test_successful_episodes_learn_and_failed_ones_teach_nothing(faulted: FaultRound) -> None:
    ok = [e for e in faulted.episodes if e.error is None]
    assert faulted.memories == len(ok)  # one experience per answered episode, none for a failed call
    assert faulted.success_rates[1] > faulted.success_rates[0] == 0.0  # round 2 copies what round 1 revealed


def test_the_fault_mix_is_seeded() -> None:
    def kinds(seed: int) -> list[str]:
        mix = FaultMix(lambda request: Reply(200, chat_body("ok")), dict.fromkeys(FAULT_KINDS, 0.07), seed=seed)
        return [mix({}).kind for _ in range(200)]

    assert kinds(2) == kinds(2) != kinds(3)
    assert set(kinds(2)) == {*FAULT_KINDS, "ok"}
