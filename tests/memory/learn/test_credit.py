"""Credit over several steps (memory/learn/credit.py), checked by hand and against a plain BFS loop reference."""

from __future__ import annotations

import doctest
import time
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory.learn.credit as credit
from connectors.errors import ConfigError
from memory.learn.credit import Provenance, apply_credit, propagate, traced_credit
from memory.learn.rule import credit_weights, td_update

# Memories as a Zürich logistics team would have written them: C with A and B in context, D with C.
A, B, C, D = (
    "mem-Zürich-Nordhafen-Zollformular-Ablauf-01",
    "mem-Zürich-Nordhafen-Palettenzählung-Regel-02",
    "mem-Zürich-Nordhafen-Grenzübertritt-Skript-03",
    "mem-Zürich-Nordhafen-Lieferschein-Prüfung-04",
)
WORKED = {C: [A, B], D: [C]}


# -- plain-loop reference ------------------------------------------------------------------------
def ref_traced(
    direct: Mapping[str, float], parents: Mapping[str, Sequence[str]], gamma_lambda: float, depth: int
) -> dict[str, float]:
    """One BFS per recalled memory (first visit = shortest distance), best source wins, ancestors capped at 1."""
    trace: dict[str, float] = {}
    for source, w in direct.items():
        seen = {source}
        queue = deque([(source, w, 0)])
        while queue:
            memory_id, weight, dist = queue.popleft()
            trace[memory_id] = max(trace.get(memory_id, 0.0), weight)
            if dist == depth:
                continue
            for up in parents.get(memory_id, ()):
                if up not in seen:
                    seen.add(up)
                    queue.append((up, weight * gamma_lambda, dist + 1))
    out = {m: max(w, min(1.0, trace[m])) for m, w in direct.items()}
    for memory_id, weight in trace.items():
        if memory_id not in out and weight > 0:
            out[memory_id] = min(1.0, weight)
    return out


@st.composite
def graphs(draw: st.DrawFn, *, acyclic: bool) -> tuple[dict[str, float], dict[str, list[str]], float, int]:
    """A random provenance graph (parents older than children when acyclic), some recalled memories."""
    n = draw(st.integers(1, 12))
    ids = [f"mem-Nordhafen-{i:02d}-Zollprüfung" for i in range(n)]
    parents: dict[str, list[str]] = {}
    for i in range(n):
        pool = ids[:i] if acyclic else ids
        if pool and draw(st.booleans()):
            parents[ids[i]] = draw(st.lists(st.sampled_from(pool), max_size=4, unique=True))
    recalled = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=4, unique=True))
    weights = st.floats(0.0, 3.0, allow_nan=False)
    direct = {m: draw(weights) for m in recalled}
    return direct, parents, draw(st.floats(0.0, 1.0)), draw(st.integers(0, 6))


# -- the worked example --------------------------------------------------------------------------
def test_worked_example_weights_and_q_changes_step_by_step() -> None:
    weights = traced_credit({D: 1.0}, WORKED, gamma_lambda=0.5, depth=2)
    assert weights == {D: 1.0, C: 0.5, A: 0.25, B: 0.25}
    q = apply_credit({D: 0.2, C: 0.5, A: 0.0, B: 0.8}, weights, reward=1.0, alpha=0.3)
    assert q == pytest.approx({D: 0.44, C: 0.575, A: 0.075, B: 0.815}, abs=1e-15)
    # the rates α·w are 0.3, 0.15, 0.075, 0.075: from Q = 0 they are the Q changes themselves
    assert apply_credit(dict.fromkeys(weights, 0.0), weights, reward=1.0, alpha=0.3) == pytest.approx(
        {D: 0.3, C: 0.15, A: 0.075, B: 0.075}, abs=1e-15
    )


def test_the_docstring_examples_run() -> None:
    result = doctest.testmod(credit)
    assert result.failed == 0 and result.attempted >= 8


# -- depth 0 is today's behaviour ----------------------------------------------------------------
@pytest.mark.parametrize("mode", ["uniform", "score"])
@pytest.mark.parametrize(("gamma_lambda", "depth"), [(0.5, 0), (0.0, 3), (0.0, 0)])
def test_depth_or_decay_zero_moves_only_the_recalled_memories_at_todays_rates(
    mode: str, gamma_lambda: float, depth: int
) -> None:
    scores = np.array([1.7, 0.2, -0.4])
    direct = dict(zip([D, C, B], credit_weights(scores, mode).tolist(), strict=True))  # C's parents are recalled too
    weights = traced_credit(direct, WORKED, gamma_lambda=gamma_lambda, depth=depth)
    assert weights == direct and list(weights) == [D, C, B]
    q = {D: 0.2, C: -0.5, B: 0.9}
    today = td_update(np.array(list(q.values())), 1.0, np.minimum(1.0, 0.3 * np.array(list(direct.values()))))
    assert list(apply_credit(q, weights, reward=1.0, alpha=0.3).values()) == today.tolist()


# -- shapes of provenance ------------------------------------------------------------------------
def test_a_diamond_credits_the_shared_ancestor_once_by_its_shortest_path() -> None:
    # D written with B and C in context, both of them written with A: two paths from D to A
    diamond = {D: [B, C], B: [A], C: [A]}
    assert traced_credit({D: 1.0}, diamond, gamma_lambda=0.5, depth=3) == {D: 1.0, B: 0.5, C: 0.5, A: 0.25}


def test_a_ladder_of_diamonds_cannot_blow_up() -> None:
    # 30 stacked diamonds hold 2^30 paths from top to bottom; a sum over paths would give 2^30 at γλ = 1
    parents: dict[str, list[str]] = {}
    for k in range(30):
        top, left, right, bottom = f"top-{k}", f"left-{k}", f"right-{k}", f"top-{k + 1}"
        parents[top], parents[left], parents[right] = [left, right], [bottom], [bottom]
    weights = traced_credit({"top-0": 1.0}, parents, gamma_lambda=1.0, depth=60)
    assert len(weights) == 91 and max(weights.values()) == 1.0 and weights["top-30"] == 1.0
    # below the cap too: the bottom gets its one shortest path's 0.5^60, not 2^30 · 0.5^60 = 0.5^30
    assert traced_credit({"top-0": 1.0}, parents, gamma_lambda=0.5, depth=60)["top-30"] == 0.5**60


def test_a_long_chain_is_cut_at_depth() -> None:
    chain = [f"mem-Lagerhalle-Süd-Schritt-{i:02d}" for i in range(50)]
    parents = {chain[i]: [chain[i + 1]] for i in range(49)}
    weights = traced_credit({chain[0]: 1.0}, parents, gamma_lambda=0.5, depth=3)
    assert weights == {chain[0]: 1.0, chain[1]: 0.5, chain[2]: 0.25, chain[3]: 0.125}
    assert len(traced_credit({chain[0]: 1.0}, parents, gamma_lambda=0.9, depth=49)) == 50


def test_a_cycle_in_bad_data_terminates_with_shortest_path_weights() -> None:
    bad = {A: [B, A], B: [C], C: [A]}  # a self-loop and a 3-cycle
    start = time.perf_counter()
    weights = traced_credit({A: 1.0}, bad, gamma_lambda=1.0, depth=10**9)
    assert weights == {A: 1.0, B: 1.0, C: 1.0}
    assert traced_credit({A: 1.0}, bad, gamma_lambda=0.5, depth=10**9) == {A: 1.0, B: 0.5, C: 0.25}
    assert time.perf_counter() - start < 60  # a generous bound: an endless loop would never return


def test_memories_without_provenance() -> None:
    # recalled but absent from parents, or with an empty list: only itself moves
    assert traced_credit({A: 1.0}, WORKED, gamma_lambda=0.5, depth=4) == {A: 1.0}
    assert traced_credit({A: 0.7}, {A: []}, gamma_lambda=0.5, depth=4) == {A: 0.7}
    assert traced_credit({A: 1.0, B: 1.0}, {}, gamma_lambda=0.9, depth=4) == {A: 1.0, B: 1.0}
    # an ancestor without provenance ends the path: depth beyond it adds nothing
    assert traced_credit({D: 1.0}, {D: [C]}, gamma_lambda=0.5, depth=9) == {D: 1.0, C: 0.5}


def test_a_recalled_ancestor_is_not_credited_twice() -> None:
    # D and its parent C were both recalled: C keeps weight 1 (uniform), not 1 + γλ
    assert traced_credit({D: 1.0, C: 1.0}, WORKED, gamma_lambda=0.5, depth=2) == {D: 1.0, C: 1.0, A: 0.5, B: 0.5}
    # score mode: a weakly weighted recalled parent is lifted to what its child passes down
    assert traced_credit({D: 1.6, C: 0.4}, WORKED, gamma_lambda=0.5, depth=1)[C] == pytest.approx(0.8)


def test_ancestors_are_capped_at_one_and_every_step_stays_convex() -> None:
    weights = traced_credit({D: 3.0}, WORKED, gamma_lambda=0.5, depth=2)
    assert weights == {D: 3.0, C: 1.0, A: 0.75, B: 0.75}  # D keeps its score-mode weight; C is capped
    q = apply_credit({D: 0.0, C: 0.0, A: 0.0, B: 0.0}, weights, reward=1.0, alpha=0.5)
    assert q == pytest.approx({D: 1.0, C: 0.5, A: 0.375, B: 0.375})  # D's rate min(1, 1.5) = 1 lands on r


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from([A, B, C, D]), st.floats(0.0, 50.0), min_size=1),
    st.floats(-5.0, 5.0),
    st.floats(0.0, 1.0),
    st.floats(-5.0, 5.0),
)
def test_every_update_lands_between_the_old_q_and_the_reward(
    weights: dict[str, float], q0: float, alpha: float, reward: float
) -> None:
    new = apply_credit(dict.fromkeys(weights, q0), weights, reward=reward, alpha=alpha)
    lo, hi = min(q0, reward), max(q0, reward)
    assert all(lo - 1e-12 <= v <= hi + 1e-12 for v in new.values())


# -- vectorised against the loop -----------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(graphs(acyclic=True))
def test_traced_credit_matches_the_loop_reference_on_random_dags(case: tuple) -> None:
    direct, parents, gamma_lambda, depth = case
    assert traced_credit(direct, parents, gamma_lambda=gamma_lambda, depth=depth) == ref_traced(
        direct, parents, gamma_lambda, depth
    )


@settings(max_examples=150, deadline=None)
@given(graphs(acyclic=False))
def test_traced_credit_matches_the_loop_reference_on_graphs_with_cycles(case: tuple) -> None:
    direct, parents, gamma_lambda, depth = case
    assert traced_credit(direct, parents, gamma_lambda=gamma_lambda, depth=depth) == ref_traced(
        direct, parents, gamma_lambda, depth
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(graphs(acyclic=True), min_size=1, max_size=5), st.floats(0.0, 1.0), st.integers(0, 6))
def test_many_rewards_at_once_match_one_reward_at_a_time(cases: list, gamma_lambda: float, depth: int) -> None:
    parents: dict[str, list[str]] = {}
    for _, more, _, _ in cases:  # one store's provenance: the union of the drawn graphs (still a DAG)
        for child, ups in more.items():
            parents[child] = sorted(set(parents.get(child, [])) | set(ups))
    prov = Provenance.from_parents(parents, ids=sorted({m for direct, *_ in cases for m in direct}))
    rows = np.zeros((len(cases), len(prov.ids)))
    for i, (direct, *_) in enumerate(cases):
        rows[i, [prov.ids.index(m) for m in direct]] = list(direct.values())
    out = propagate(rows, prov.child, prov.parent, gamma_lambda=gamma_lambda, depth=depth)
    for i, (direct, *_) in enumerate(cases):
        expected = ref_traced(direct, parents, gamma_lambda, depth)
        assert {m: float(out[i, j]) for j, m in enumerate(prov.ids) if out[i, j] > 0 or m in direct} == expected


# -- input checks --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma_lambda": 0.5, "depth": -1}, "depth must be an integer >= 0"),
        ({"gamma_lambda": 0.5, "depth": 2.0}, "depth must be an integer >= 0"),
        ({"gamma_lambda": 0.5, "depth": True}, "depth must be an integer >= 0"),
        ({"gamma_lambda": -0.1, "depth": 2}, r"gamma_lambda \(γλ\) must be a number in \[0, 1\]"),
        ({"gamma_lambda": 1.5, "depth": 2}, r"gamma_lambda \(γλ\) must be a number in \[0, 1\]"),
        ({"gamma_lambda": float("nan"), "depth": 2}, r"gamma_lambda \(γλ\) must be a number in \[0, 1\]"),
    ],
)
def test_bad_decay_or_depth_is_a_config_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        traced_credit({D: 1.0}, WORKED, **kwargs)
    with pytest.raises(ConfigError, match=match):
        propagate(np.ones(2), np.array([0]), np.array([1]), **kwargs)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.5])
def test_non_finite_or_negative_weights_are_config_errors(bad: float) -> None:
    with pytest.raises(ConfigError, match="direct weights must be finite and >= 0"):
        traced_credit({D: bad}, WORKED, gamma_lambda=0.5, depth=2)
    with pytest.raises(ConfigError, match="direct weights must be finite and >= 0"):
        propagate(np.array([1.0, bad]), np.array([0]), np.array([1]), gamma_lambda=0.5, depth=2)
    with pytest.raises(ConfigError, match="direct weights must be finite and >= 0"):
        apply_credit({D: 0.0}, {D: bad}, reward=1.0, alpha=0.3)


def test_malformed_provenance_and_updates_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"parents\['mem-.*'\] must be a list of ids"):
        traced_credit({D: 1.0}, {D: C}, gamma_lambda=0.5, depth=2)  # a string would be read letter by letter
    with pytest.raises(ConfigError, match="memory ids must be strings"):
        traced_credit({D: 1.0}, {D: [7]}, gamma_lambda=0.5, depth=2)  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"edge indices must be in \[0, 2\)"):
        propagate(np.ones(2), np.array([0]), np.array([2]), gamma_lambda=0.5, depth=2)
    with pytest.raises(ConfigError, match="equal-length 1-D integer arrays"):
        propagate(np.ones(2), np.array([0, 1]), np.array([1]), gamma_lambda=0.5, depth=2)
    with pytest.raises(ConfigError, match="q has no current value"):
        apply_credit({D: 0.0}, {D: 1.0, C: 0.5}, reward=1.0, alpha=0.3)
    with pytest.raises(ConfigError, match=r"alpha must be a number in \[0, 1\]"):
        apply_credit({D: 0.0}, {D: 1.0}, reward=1.0, alpha=1.5)
