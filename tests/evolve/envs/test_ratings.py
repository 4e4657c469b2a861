"""Wrong ratings on purpose (``evolve.envs.ratings``): what memory is told is flipped at the rate asked, the
checker's verdict is kept, and the same seed flips the same ratings whatever the memory does."""

from __future__ import annotations

import pytest

from connectors import ConfigError, Observation
from evolve.envs.ratings import SAID_CORRECT, SAID_WRONG, NoisyRatings, flipped
from evolve.envs.tasks import Task, TaskEnv

SITE = "Zürich Nordhafen Logistikzentrum, Halle 7 (Süd)"
TASKS = [Task(id=f"{SITE} door {i}", prompt=f"Door code of {SITE}, door {i}?", answer=str(1000 + i)) for i in range(40)]


def rate_all(rated: NoisyRatings, answer_right: bool) -> list[Observation]:
    out = []
    for t in TASKS:
        env = rated()
        env.reset(t.id)
        out.append(env.step(str(t.answer) if answer_right else "no idea"))
    return out


def test_a_share_rho_of_verdicts_is_flipped_and_the_checker_verdict_is_kept() -> None:
    rated = NoisyRatings(lambda: TaskEnv(TASKS), rho=0.3, seed=1)
    told = [rate_all(rated, answer_right=True) for _ in range(5)]  # 200 ratings of right answers
    wrong = sum(o.reward == 0.0 for round_ in told for o in round_)
    assert 40 <= wrong <= 80 and rated.flips == wrong  # about 60 of 200
    assert all(o.text == SAID_WRONG for round_ in told for o in round_ if o.reward == 0.0)
    assert rated.true_rewards([t.id for t in TASKS], 4) == [1.0] * 40  # the checker said right every time
    bad = NoisyRatings(lambda: TaskEnv(TASKS), rho=1.0, seed=1)
    assert {(o.reward, o.text) for o in rate_all(bad, answer_right=False)} == {(1.0, SAID_CORRECT)}


def test_the_same_seed_flips_the_same_ratings_and_a_larger_rho_flips_more_of_them() -> None:
    draws = {rho: [flipped(rho, 3, t.id, n) for t in TASKS for n in range(8)] for rho in (0.0, 0.1, 0.2)}
    assert not any(draws[0.0])
    assert all(b for a, b in zip(draws[0.1], draws[0.2], strict=True) if a)  # every flip at 0.1 is one at 0.2
    assert sum(draws[0.2]) > sum(draws[0.1])
    first = [o.reward for o in rate_all(NoisyRatings(lambda: TaskEnv(TASKS), rho=0.5, seed=9), answer_right=True)]
    again = [o.reward for o in rate_all(NoisyRatings(lambda: TaskEnv(TASKS), rho=0.5, seed=9), answer_right=True)]
    assert first == again


@pytest.mark.parametrize("rho", [-0.1, 1.5, "0.2", True, float("nan")])
def test_rho_outside_zero_one_is_refused(rho: object) -> None:
    with pytest.raises(ConfigError, match=r"rho must be a number in \[0, 1\]"):
        NoisyRatings(lambda: TaskEnv(TASKS), rho=rho, seed=0)  # type: ignore[arg-type]
