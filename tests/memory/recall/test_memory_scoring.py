"""The maths of memory (memory/recall/scoring.py), each checked against a plain-Python loop reference."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from connectors.errors import ConfigError
from memory.config import RetrievalConfig
from memory.learn.rule import alpha_for, credit_weights, td_update
from memory.recall.scoring import calibrate_threshold, phase_a, rank, select, two_phase_scores, zscore
from memory.write.grouping import assign_groups

SEEDS = [0, 1, 2, 3, 4]


# -- plain-loop references -----------------------------------------------------------------------
def ref_zscore(xs: list[float], clip: float) -> list[float]:
    if not xs:
        return []
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    if std <= 1e-12 * max(1.0, abs(mean)):
        return [0.0] * len(xs)
    return [max(-clip, min(clip, (x - mean) / std)) for x in xs]


def ref_phase_a(sims: list[float], k1: int, delta: float) -> list[int]:
    keep = [i for i, s in enumerate(sims) if s > delta]
    keep.sort(key=lambda i: (-sims[i], i))
    return keep[:k1]


def ref_select_order(sims: list[float], qs: list[float], lam: float, k2: int, clip: float) -> list[int]:
    zs, zq = ref_zscore(sims, clip), ref_zscore(qs, clip)
    scores = [(1 - lam) * a + lam * b for a, b in zip(zs, zq, strict=True)]
    order = sorted(range(len(sims)), key=lambda i: (-scores[i], -sims[i], i))
    return order[:k2]


def ref_groups(vecs: np.ndarray, keys: np.ndarray, threshold: float) -> list[int]:
    all_keys = [k for k in keys]
    labels = []
    for v in vecs:
        best, best_sim = -1, -math.inf
        for j, k in enumerate(all_keys):
            s = float(np.dot(v, k))
            if s > best_sim:
                best, best_sim = j, s
        if best_sim >= threshold - 1e-6:
            labels.append(best)
        else:
            labels.append(len(all_keys))
            all_keys.append(v)
    return labels


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# -- zscore --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_zscore_matches_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=int(rng.integers(1, 30))) * rng.uniform(0.01, 10)
    assert np.allclose(zscore(x, 3.0), ref_zscore(x.tolist(), 3.0), atol=1e-12)


def test_zscore_of_constant_values_is_zero_despite_rounding() -> None:
    # the mean of three 0.1s is 0.10000000000000002: the spread is rounding noise, not signal
    assert zscore(np.array([0.1, 0.1, 0.1])).tolist() == [0.0, 0.0, 0.0]
    assert zscore(np.array([5.0])).tolist() == [0.0]
    assert zscore(np.array([])).shape == (0,)


def test_zscore_clips_outliers() -> None:
    x = np.array([0.0] * 99 + [1.0])  # the outlier's raw z is 9.95
    z = zscore(x, clip=3.0)
    assert z.max() == 3.0
    assert z[0] == pytest.approx(-1 / math.sqrt(99))


# -- phase A -------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_phase_a_matches_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sims = np.round(rng.uniform(-1, 1, size=200), 1)  # rounding makes plenty of ties
    k1, delta = int(rng.integers(1, 40)), float(rng.uniform(-0.5, 0.5))
    assert phase_a(sims, k1, delta).tolist() == ref_phase_a(sims.tolist(), k1, delta)


def test_phase_a_floor_is_strict_and_can_empty_the_pool() -> None:
    sims = np.array([0.2, 0.5, 0.5, 0.1])
    assert phase_a(sims, 10, 0.5).tolist() == []
    assert phase_a(sims, 10, 0.49).tolist() == [1, 2]
    assert phase_a(np.array([np.nan, 0.9]), 5, 0.0).tolist() == [1]


def test_phase_a_ties_at_the_cut_keep_the_lower_index() -> None:
    sims = np.array([0.3, 0.7, 0.7, 0.7, 0.9])
    assert phase_a(sims, 3, 0.0).tolist() == [4, 1, 2]


def test_phase_a_rejects_empty_pool_size() -> None:
    with pytest.raises(ConfigError, match="k1"):
        phase_a(np.array([0.5]), 0, 0.0)


# -- phase B -------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_two_phase_scores_match_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 20))
    sims, qs, lam = rng.uniform(0, 1, n), rng.normal(size=n), float(rng.uniform())
    scores, z_sim, z_q = two_phase_scores(sims, qs, lam)
    zs, zq = ref_zscore(sims.tolist(), 3.0), ref_zscore(qs.tolist(), 3.0)
    assert np.allclose(z_sim, zs) and np.allclose(z_q, zq)
    assert np.allclose(scores, [(1 - lam) * a + lam * b for a, b in zip(zs, zq, strict=True)])


@pytest.mark.parametrize("seed", SEEDS)
def test_select_matches_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 15))
    sims, qs = np.round(rng.uniform(0, 1, n), 1), np.round(rng.uniform(0, 1, n), 1)
    cfg = RetrievalConfig(k1=max(n, 5), k2=int(rng.integers(1, 6)), lam=float(rng.choice([0.0, 0.3, 0.5, 1.0])))
    sel = select(sims, qs, cfg, np.random.default_rng(0))
    assert sel.order.tolist() == ref_select_order(sims.tolist(), qs.tolist(), cfg.lam, cfg.k2, cfg.z_clip)
    assert not sel.explored


def test_select_pool_of_one_and_empty_pool() -> None:
    cfg = RetrievalConfig(k1=5, k2=3)
    one = select(np.array([0.4]), np.array([0.9]), cfg, np.random.default_rng(0))
    assert one.order.tolist() == [0] and one.scores.tolist() == [0.0]
    empty = select(np.array([]), np.array([]), RetrievalConfig(epsilon=1.0), np.random.default_rng(0))
    assert empty.order.tolist() == [] and not empty.explored


def test_q_breaks_a_similarity_tie_and_lambda_zero_ignores_q() -> None:
    sims, qs = np.array([0.8, 0.8, 0.5]), np.array([0.0, 1.0, 0.5])
    rng = np.random.default_rng(0)
    assert select(sims, qs, RetrievalConfig(k1=3, k2=1, lam=0.5), rng).order.tolist() == [1]
    assert select(sims, qs, RetrievalConfig(k1=3, k2=3, lam=0.0), rng).order.tolist() == [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
def test_lambda_zero_is_similarity_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sims, qs = rng.uniform(0, 1, 12), rng.normal(size=12)
    sel = select(sims, qs, RetrievalConfig(k1=12, k2=12, lam=0.0), rng)
    assert sel.order.tolist() == sorted(range(12), key=lambda i: (-sims[i], i))


def test_equal_scores_keep_higher_similarity_then_lower_index() -> None:
    assert rank(np.array([1.0, 1.0, 1.0, 2.0]), np.array([0.5, 0.7, 0.7, 0.1])).tolist() == [3, 1, 2, 0]


def test_epsilon_one_always_explores_and_zero_never_draws() -> None:
    sims, qs = np.linspace(0.9, 0.1, 10), np.zeros(10)
    explored = [select(sims, qs, RetrievalConfig(k2=3, epsilon=1.0), np.random.default_rng(s)) for s in range(20)]
    assert all(s.explored and len(set(s.order.tolist())) == 3 for s in explored)
    assert len({tuple(s.order.tolist()) for s in explored}) > 1
    rng = np.random.default_rng(7)
    before = rng.bit_generator.state
    select(sims, qs, RetrievalConfig(k2=3, epsilon=0.0), rng)
    assert rng.bit_generator.state == before


# -- learning ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_td_update_matches_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, r, a = rng.normal(size=8), rng.normal(size=8), rng.uniform(size=8)
    assert td_update(q, r, a).tolist() == [qi + ai * (ri - qi) for qi, ri, ai in zip(q, r, a, strict=True)]


def test_td_update_paper_numbers() -> None:
    q1 = float(td_update(0.0, 1.0, 0.3))
    assert q1 == 0.3
    assert float(td_update(q1, 1.0, 0.3)) == pytest.approx(0.51, abs=1e-15)
    assert float(td_update(0.7, 0.0, 0.0)) == 0.7  # α = 0 freezes Q (the similarity-only baseline)


@pytest.mark.parametrize("seed", SEEDS)
def test_alpha_for_matches_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    visits, floor = rng.integers(0, 40, size=16), float(rng.uniform(0, 0.5))
    got = alpha_for(visits, alpha=0.3, schedule="visits", floor=floor)
    assert got.tolist() == [max(floor, 1.0 / (int(n) + 2)) for n in visits]
    assert alpha_for(visits, alpha=0.3).tolist() == [0.3] * 16  # constant: α whatever the visits


@pytest.mark.parametrize("seed", SEEDS)
def test_the_visits_schedule_is_a_running_mean_with_the_start_counted_once(seed: int) -> None:
    rng = np.random.default_rng(seed)
    q0, rewards = float(rng.uniform(-1, 1)), rng.choice([-1.0, 1.0], size=25)
    q = q0
    for n, r in enumerate(rewards):
        q = float(td_update(q, r, alpha_for(n, alpha=0.3, schedule="visits", floor=0.0)))
        assert q == pytest.approx((q0 + rewards[: n + 1].sum()) / (n + 2), abs=1e-12)


def test_one_wrong_rating_moves_a_memory_with_evidence_less_until_the_floor() -> None:
    """After 8 good ratings one wrong one moves Q by 2/10 (visits) instead of 2·0.3 (constant); at the
    floor a changed fact is still followed at that rate."""
    steps = alpha_for([0, 1, 8, 100], alpha=0.3, schedule="visits", floor=0.1).tolist()
    assert steps == [0.5, 1 / 3, 0.1, 0.1]
    assert float(alpha_for(3, alpha=0.3, schedule="visits", floor=0.1)) == 0.2


@pytest.mark.parametrize("bad", ["bayes", "", None])
def test_alpha_for_refuses_an_unknown_schedule(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"alpha schedule must be one of \('constant', 'visits'\)"):
        alpha_for(0, alpha=0.3, schedule=bad, floor=0.1)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", SEEDS)
def test_credit_weights_are_positive_with_mean_one(seed: int) -> None:
    scores = np.random.default_rng(seed).normal(size=6) * 3
    w = credit_weights(scores, "score")
    exp = [math.exp(s) for s in scores]
    assert np.allclose(w, [6 * e / sum(exp) for e in exp])
    assert (w > 0).all() and w.mean() == pytest.approx(1.0)
    assert list(np.argsort(-w)) == list(np.argsort(-scores))
    assert credit_weights(scores, "uniform").tolist() == [1.0] * 6


def test_credit_weights_reject_unknown_mode() -> None:
    with pytest.raises(ConfigError, match="uniform"):
        credit_weights(np.array([1.0]), "shapley")


# -- calibration and grouping --------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_calibrate_threshold_matches_loop(seed: int) -> None:
    x = unit_rows(np.random.default_rng(seed), 30, 8)
    pairs = [float(np.dot(x[i].astype(np.float64), x[j])) for i in range(30) for j in range(i + 1, 30)]
    assert calibrate_threshold(x, 0.8) == pytest.approx(statistics.quantiles(pairs, n=100, method="inclusive")[79])


def test_calibrate_threshold_subsamples_reproducibly_and_checks_input() -> None:
    x = unit_rows(np.random.default_rng(0), 300, 8)
    assert calibrate_threshold(x, max_items=50, seed=1) == calibrate_threshold(x, max_items=50, seed=1)
    with pytest.raises(ConfigError, match="at least 2"):
        calibrate_threshold(x[:1])
    with pytest.raises(ConfigError, match="quantile"):
        calibrate_threshold(x, 1.5)


@pytest.mark.parametrize("seed", SEEDS)
def test_assign_groups_matches_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = unit_rows(rng, 6, 16)
    noisy = base[rng.integers(0, 6, 80)] + rng.normal(scale=0.08, size=(80, 16)).astype(np.float32)
    vecs = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    keys = vecs[:3].copy()
    labels, new_rows = assign_groups(vecs[3:], keys, 0.9, chunk=16)  # chunks force cross-chunk grouping
    expected = ref_groups(vecs[3:], keys, 0.9)
    assert labels.tolist() == expected
    assert 0 < len(new_rows) < 77 and (labels < 3).any()  # some rows join old keys, some found new ones
    assert new_rows.tolist() == [i for i, lab in enumerate(expected) if lab >= 3 and lab not in expected[:i]]


def test_identical_vectors_group_even_at_threshold_one() -> None:
    v = unit_rows(np.random.default_rng(0), 1, 32)
    labels, new_rows = assign_groups(np.vstack([v, v, v]), np.zeros((0, 32), np.float32), 1.0)
    assert labels.tolist() == [0, 0, 0] and new_rows.tolist() == [0]
