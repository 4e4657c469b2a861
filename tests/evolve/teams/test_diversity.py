"""K* and the other measures of how different a team's answers are, on cases whose answer is known."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import evolve.teams.diversity
from evolve.teams.diversity import agreement, correctness_correlation, kstar, majority, similarity_matrix


def unit_rows(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    rows = rng.standard_normal((n, dim))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_identical_outputs_are_one_channel_and_orthogonal_ones_are_n(n: int) -> None:
    same = (
        np.tile(unit_rows(np.random.default_rng(n), 1), (n, 1)) * np.arange(1, n + 1)[:, None]
    )  # lengths do not count
    assert kstar(same) == pytest.approx(1.0, abs=1e-9)
    assert kstar(np.eye(n, 32)) == pytest.approx(float(n), abs=1e-9)


def test_kstar_grows_with_what_outputs_do_not_share() -> None:
    """Outputs made of a shared part and a private part: the larger the private part, the more channels."""
    rng = np.random.default_rng(7)
    shared, private = unit_rows(rng, 1), unit_rows(rng, 8)
    measured = [kstar(shared + w * private) for w in (0.0, 0.2, 0.5, 1.0, 3.0)]
    assert measured[0] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(measured, measured[1:], strict=False))
    assert 1.0 < measured[-1] <= 8.0


def test_two_groups_of_copies_are_two_channels() -> None:
    a, b = np.eye(2, 16)
    assert kstar(np.stack([a, a, a, b, b, b])) == pytest.approx(2.0)
    assert kstar(np.stack([a, a, a, a, a, b])) < 2.0  # an unequal split carries less than two full channels


def test_kstar_does_not_depend_on_order_or_scale() -> None:
    rows = unit_rows(np.random.default_rng(3), 6)
    assert kstar(rows[::-1] * 7.5) == pytest.approx(kstar(rows))


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (np.zeros((0, 4)), "n >= 1"),
        (np.ones(4), "n >= 1"),
        (np.array([[1.0, 0.0], [0.0, 0.0]]), "zero length"),
        (np.array([[1.0, np.nan]]), "finite"),
    ],
)
def test_bad_vectors_are_a_clear_error(bad: np.ndarray, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        kstar(bad)


def test_similarity_matrix_is_the_cosine_of_each_pair() -> None:
    sims = similarity_matrix(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, -2.0]]))
    assert sims == pytest.approx(np.array([[1, 2**-0.5, 0], [2**-0.5, 1, -(2**-0.5)], [0, -(2**-0.5), 1]]))


def test_agreement_and_the_vote_compare_normalised_answers() -> None:
    assert agreement(["Zürich", " zürich. ", "ZÜRICH"]) == 1.0
    assert agreement(["4471", "4417", "9902"]) == 0.0
    assert agreement(["only one"]) == 1.0
    assert majority(["Genf", "Basel", "basel!", "Genf", "Bern"]) == 0  # 2 against 2: the earlier answer
    assert majority([None, "", "  ", "Basel"]) == 3  # failed and empty answers do not vote
    assert majority([None, ""]) is None


def test_correctness_correlation_is_one_for_agents_that_fail_together() -> None:
    correct = np.array([[1, 1, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    corr = correctness_correlation(correct)
    assert corr[0, 1] == pytest.approx(1.0)
    assert corr[0, 2] == pytest.approx(np.corrcoef(correct[:, 0], correct[:, 2])[0, 1])
    assert np.isnan(corr[3]).all() and np.isnan(corr[:, 3]).all()  # right every time: no variation to correlate
    with pytest.raises(ValueError, match="at least 2 tasks"):
        correctness_correlation(np.ones((1, 3)))


def test_the_module_examples_run() -> None:
    assert doctest.testmod(evolve.teams.diversity).failed == 0
