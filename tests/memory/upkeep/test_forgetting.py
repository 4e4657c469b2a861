"""Forgetting with a budget (memory/upkeep/forgetting.py): eviction order, merges and removal records, checked by
hand and against plain-Python loop references."""

from __future__ import annotations

import doctest
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory.upkeep.forgetting as forgetting
from connectors.embedders import normalise_rows
from connectors.errors import ConfigError
from memory.learn.rule import td_update
from memory.storage.records import MemoryItem
from memory.upkeep.forgetting import (
    DAY,
    TIERS,
    ForgetConfig,
    MemoryUsage,
    Removal,
    eviction_order,
    keeper,
    merged_values,
    near_duplicates,
    plan_eviction,
    restorable,
)

NOW = 400 * DAY
NEVER = math.nan
TENANT = "Zürich-Nordhafen-Logistik-Team-07"
CONFIG = ForgetConfig(capacity=3, min_visits=3, stale_after=30 * DAY)


def usage(rows: Sequence[tuple[float, int, float, float, bool]]) -> MemoryUsage:
    """Rows of (q, visits, last_recalled, created_at, superseded)."""
    q, visits, recalled, created, superseded = zip(*rows, strict=True) if rows else ([], [], [], [], [])
    return MemoryUsage(
        q=np.asarray(q, float),
        visits=np.asarray(visits, np.int64),
        last_recalled=np.asarray(recalled, float),
        created_at=np.asarray(created, float),
        superseded=np.asarray(superseded, bool),
    )


def random_usage(rng: np.random.Generator, n: int) -> MemoryUsage:
    """A namespace with every tier represented and many ties (few distinct values)."""
    return MemoryUsage(
        q=rng.choice([-0.5, 0.0, 0.25, 0.8], size=n),
        visits=rng.integers(0, 6, size=n),
        last_recalled=np.where(rng.random(n) < 0.3, np.nan, NOW - rng.choice([1, 20, 45, 90], size=n) * DAY),
        created_at=NOW - rng.choice([2, 50, 100, 300], size=n) * DAY,
        superseded=rng.random(n) < 0.15,
    )


# -- plain-loop reference ------------------------------------------------------------------------
def ref_order(u: MemoryUsage, now: float, cfg: ForgetConfig) -> list[int]:
    def key(i: int) -> tuple[float, float, float, int]:
        q, visits, created = float(u.q[i]), int(u.visits[i]), float(u.created_at[i])
        last = float(u.last_recalled[i])
        idle = now - (created if math.isnan(last) else last)
        trusted = visits >= cfg.min_visits
        if u.superseded[i]:
            return (0, created, created, i)
        if trusted and q <= cfg.low_q:
            return (1, q, created, i)
        if not trusted and cfg.stale_after is not None and idle >= cfg.stale_after:
            return (2, -idle, created, i)
        if trusted:
            return (4, q, created, i)
        return (3, created, created, i)

    return sorted(range(len(u)), key=key)


def ref_greedy(x: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    pairs = []
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            s = float(np.dot(x[i], x[j]))
            if s >= threshold - 1e-6:
                pairs.append((-s, i, j))
    used: set[int] = set()
    out = []
    for _, i, j in sorted(pairs):
        if i not in used and j not in used:
            used |= {i, j}
            out.append((i, j))
    return out


def test_the_docstring_examples_run() -> None:
    result = doctest.testmod(forgetting)
    assert result.failed == 0 and result.attempted >= 14


# -- defaults and capacity -----------------------------------------------------------------------
def test_the_defaults_evict_and_merge_nothing_however_full_or_duplicated() -> None:
    u = random_usage(np.random.default_rng(0), 500)
    cfg = ForgetConfig()
    assert cfg.capacity is None and cfg.merge_similarity is None
    rows, reasons = plan_eviction(u, now=NOW, config=cfg, incoming=10_000)
    assert rows.size == 0 and reasons == []
    copies = normalise_rows(np.ones((500, 8)))  # 500 identical memories
    assert near_duplicates(copies, cfg.merge_similarity, u) == []


@pytest.mark.parametrize("incoming", [0, 1, 4])
@pytest.mark.parametrize("capacity", [1, 5, 19, 20, 21, 40])
def test_capacity_is_respected_exactly(capacity: int, incoming: int) -> None:
    u = random_usage(np.random.default_rng(capacity), 20)
    rows, reasons = plan_eviction(u, now=NOW, config=ForgetConfig(capacity=capacity), incoming=incoming)
    assert len(rows) == len(reasons) == min(20, max(0, 20 + incoming - capacity))
    assert len(set(rows.tolist())) == len(rows)
    held = 20 - len(rows) + incoming
    # over budget: exactly `capacity` stay (or just the incoming ones, never evicted by their own arrival)
    assert held == (max(capacity, incoming) if 20 + incoming > capacity else 20 + incoming)
    assert rows.tolist() == eviction_order(u, now=NOW, config=ForgetConfig(capacity=capacity))[: len(rows)].tolist()


# -- the order rules -----------------------------------------------------------------------------
def test_superseded_go_first_whatever_their_q_and_visits() -> None:
    u = usage([(-0.9, 9, NOW - DAY, 10 * DAY, False), (0.99, 40, NOW - DAY, 20 * DAY, True)])
    rows, reasons = plan_eviction(u, now=NOW, config=ForgetConfig(capacity=1))
    assert rows.tolist() == [1] and reasons == ["superseded"]


def test_a_trusted_low_q_goes_before_an_untrusted_lower_one_and_before_stale_ones() -> None:
    u = usage([
        (-5.0, 2, NOW - DAY, NOW - 2 * DAY, False),      # untrusted (2 < 3 rewards), recent: new
        (-5.0, 1, NEVER, NOW - 300 * DAY, False),        # untrusted, never recalled in 300 days: stale
        (-0.62, 5, NOW - DAY, NOW - 100 * DAY, False),   # trusted, Q <= 0: low
        (0.0, 3, NOW - DAY, NOW - 100 * DAY, False),     # trusted, Q == low_q: low too
    ])  # fmt: skip
    assert eviction_order(u, now=NOW, config=CONFIG).tolist() == [2, 3, 1, 0]
    _, reasons = plan_eviction(u, now=NOW, config=ForgetConfig(capacity=1, min_visits=3))
    assert reasons == ["low Q -0.62 after 5 rewards", "low Q 0.00 after 3 rewards", "never recalled in 300 days"]


def test_stale_ones_go_longest_idle_first_then_new_oldest_first_then_proven_by_q() -> None:
    u = usage([
        (0.9, 6, NOW - DAY, NOW - 200 * DAY, False),      # proven, Q 0.9
        (0.0, 1, NOW - 40 * DAY, NOW - 90 * DAY, False),  # stale: not recalled in 40 days
        (0.0, 0, NOW - DAY, NOW - 2 * DAY, False),        # new, 2 days old
        (0.0, 0, NEVER, NOW - 61 * DAY, False),           # stale: never recalled in 61 days
        (0.2, 4, NOW - DAY, NOW - 200 * DAY, False),      # proven, Q 0.2
        (0.0, 2, NOW - DAY, NOW - 9 * DAY, False),        # new, 9 days old, recalled yesterday
    ])  # fmt: skip
    assert eviction_order(u, now=NOW, config=CONFIG).tolist() == [3, 1, 5, 2, 4, 0]
    _, reasons = plan_eviction(u, now=NOW, config=ForgetConfig(capacity=1, min_visits=3))
    assert reasons == [
        "never recalled in 61 days",
        "not recalled in 40 days",
        "over capacity: new, 2 of 3 rewards in 9 days",
        "over capacity: new, 0 of 3 rewards in 2 days",
        "over capacity: lowest kept Q 0.20 after 4 rewards",
    ]


def test_without_stale_after_an_untrusted_memory_is_never_stale() -> None:
    u = usage([(0.0, 0, NEVER, 0.0, False), (0.5, 3, NOW, NOW - DAY, False)])
    cfg = ForgetConfig(capacity=1, stale_after=None)
    [reason] = plan_eviction(u, now=NOW, config=cfg)[1]
    assert reason.startswith("over capacity: new, 0 of 3 rewards in ")  # old and never recalled, yet not stale


@pytest.mark.parametrize("seed", range(6))
def test_the_order_matches_a_plain_loop_and_puts_tiers_in_sequence(seed: int) -> None:
    rng = np.random.default_rng(seed)
    u = random_usage(rng, 300)
    cfg = ForgetConfig(capacity=10, min_visits=int(rng.integers(1, 5)), low_q=float(rng.choice([0.0, 0.25])))
    order = eviction_order(u, now=NOW, config=cfg)
    assert order.tolist() == ref_order(u, NOW, cfg)
    assert sorted(order.tolist()) == list(range(300))
    _, reasons = plan_eviction(u, now=NOW, config=ForgetConfig(capacity=1, min_visits=cfg.min_visits, low_q=cfg.low_q))
    tiers = [reason_tier(r) for r in reasons]
    assert tiers == sorted(tiers) and set(tiers) == set(range(len(TIERS)))  # every tier, in sequence


def reason_tier(reason: str) -> int:
    prefixes = ("superseded", "low Q", "n", "over capacity: new", "over capacity: lowest kept")
    return next(t for t, p in enumerate(prefixes) if reason.startswith(p))


def test_the_order_is_deterministic_and_ties_fall_to_the_older_then_the_lower_row() -> None:
    twins = usage([(0.1, 4, NOW - DAY, 5 * DAY, False)] * 4 + [(0.1, 4, NOW - DAY, 1 * DAY, False)])
    assert eviction_order(twins, now=NOW, config=CONFIG).tolist() == [4, 0, 1, 2, 3]
    u = random_usage(np.random.default_rng(7), 200)
    runs = {tuple(plan_eviction(u, now=NOW, config=ForgetConfig(capacity=50))[0].tolist()) for _ in range(3)}
    assert len(runs) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_which_memories_go_does_not_depend_on_row_order(seed: int, capacity: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    ids = np.array([f"mem-{TENANT}-{i:03d}" for i in range(n)])
    u = random_usage(rng, n)
    u = MemoryUsage(
        q=u.q,
        visits=u.visits,
        last_recalled=u.last_recalled,
        created_at=u.created_at + rng.random(n),
        superseded=u.superseded,
    )  # distinct creation times: no row-index ties
    perm = rng.permutation(n)
    shuffled = MemoryUsage(
        q=u.q[perm],
        visits=u.visits[perm],
        last_recalled=u.last_recalled[perm],
        created_at=u.created_at[perm],
        superseded=u.superseded[perm],
    )
    cfg = ForgetConfig(capacity=capacity)
    assert ids[plan_eviction(u, now=NOW, config=cfg)[0]].tolist() == (
        ids[perm][plan_eviction(shuffled, now=NOW, config=cfg)[0]].tolist()
    )


# -- merging -------------------------------------------------------------------------------------
def test_merge_rule_visits_add_and_q_is_the_visit_weighted_mean() -> None:
    assert merged_values(0.5, 3, 0.9, 1) == pytest.approx((0.6, 4), abs=1e-15)
    assert merged_values(0.2, 0, 0.6, 0) == (0.4, 0)  # both unvisited: the plain mean
    assert merged_values(-1.0, 0, 0.35, 7) == (0.35, 7)  # an unvisited Q carries no evidence


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e6, 1e6), st.integers(0, 10**6), st.floats(-1e6, 1e6), st.integers(0, 10**6))
def test_merged_q_lies_between_the_two_and_merging_is_symmetric(qa: float, va: int, qb: float, vb: int) -> None:
    q, visits = merged_values(qa, va, qb, vb)
    assert min(qa, qb) <= q <= max(qa, qb) and visits == va + vb
    assert merged_values(qb, vb, qa, va) == (q, visits)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, -1.0, 0.5]), min_size=1, max_size=12),
    st.lists(st.sampled_from([0.0, 1.0, -1.0, 0.5]), min_size=1, max_size=12),
)
def test_with_running_mean_updates_the_merge_equals_receiving_both_sets_of_rewards(
    a: list[float], b: list[float]
) -> None:
    def replay(q: float, rewards: list[float], start: int) -> float:
        for n, r in enumerate(rewards, start + 1):  # α = 1/visits: Q is the running mean
            q = float(td_update(q, r, 1.0 / n))
        return q

    merged, visits = merged_values(replay(0.0, a, 0), len(a), replay(0.0, b, 0), len(b))
    assert visits == len(a) + len(b)
    assert merged == pytest.approx(replay(replay(0.0, a, 0), b, len(a)), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 0.5, 0.9]), st.integers(0, 3), st.sampled_from([1.0, 2.0])),
        min_size=2,
        max_size=2,
    )
)
def test_the_keep_rule_is_order_independent(rows: list[tuple[float, int, float]]) -> None:
    (qa, va, ca), (qb, vb, cb) = rows
    u = usage([(qa, va, NOW, ca, False), (qb, vb, NOW, cb, False)])
    keep, drop = keeper(0, 1, u)
    assert keeper(1, 0, u) == (keep, drop)
    best = min((0, 1), key=lambda i: (-int(u.visits[i]), -float(u.q[i]), float(u.created_at[i]), i))
    assert keep == best and drop == 1 - best
    assert merged_values(qa, va, qb, vb) == merged_values(qb, vb, qa, va)


def _unit(*angles_deg: float) -> np.ndarray:
    rad = np.radians(angles_deg)
    return np.stack([np.cos(rad), np.sin(rad), np.zeros_like(rad)], axis=1).astype(np.float32)


def test_near_duplicates_take_the_closest_pair_first_and_each_memory_merges_once() -> None:
    x = _unit(0.0, 8.0, 12.0, 90.0)  # cos(0,8)=0.990, cos(8,12)=0.998, cos(0,12)=0.978; row 3 is apart
    u = usage(
        [(0.1, 1, NOW, 1.0, False), (0.4, 5, NOW, 2.0, False), (0.9, 5, NOW, 3.0, False), (0.0, 0, NOW, 4.0, False)]
    )
    assert near_duplicates(x, 0.97, u) == [(2, 1)]  # rows 1 and 2 (equal visits: the higher Q stays); 0 waits
    assert near_duplicates(x, 0.97) == [(1, 2)]  # without usage: the lower (older) row stays
    assert near_duplicates(x[[0, 2, 3]], 0.97, None) == [(0, 1)]  # the next pass folds row 0 in
    assert near_duplicates(x, 0.999, u) == []


def test_exact_copies_merge_at_threshold_one_and_superseded_memories_never_merge() -> None:
    x = normalise_rows(np.array([[1.0, 2.0, 3.0]] * 3))
    assert near_duplicates(x, 1.0) == [(0, 1)]
    u = usage([(0.0, 0, NOW, 1.0, True), (0.0, 0, NOW, 2.0, False), (0.0, 0, NOW, 3.0, False)])
    assert near_duplicates(x, 1.0, u) == [(1, 2)]


@pytest.mark.parametrize("seed", range(4))
def test_near_duplicates_match_a_plain_greedy_loop_across_blocks(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    centres = normalise_rows(rng.normal(size=(6, 16)))
    x = normalise_rows(centres[rng.integers(0, 6, 60)] + 0.05 * rng.normal(size=(60, 16)))
    want = ref_greedy(x, 0.98)
    assert near_duplicates(x, 0.98) == want and want
    monkeypatch.setattr(forgetting, "_CHUNK", 7)  # blocks of 7 rows give the same pairs
    got = near_duplicates(x, 0.98)
    assert got == want
    flat = [i for pair in got for i in pair]
    assert len(flat) == len(set(flat))  # each memory in at most one merge per pass


# -- removal records -----------------------------------------------------------------------------
ITEM = MemoryItem(
    f"mem-{TENANT}-Zollformular-03",
    TENANT,
    "Zollformular für Sendung nach Basel ausfüllen",
    "Feld 7 bleibt leer; Ursprungsland als ISO-Code",
    0.4,
    2,
    10 * DAY,
    {"success": True},
)


def test_a_removal_is_restorable_until_the_retention_period_passes() -> None:
    vector = np.ones(4, dtype=np.float32).tobytes()
    r = Removal(ITEM, "low Q -0.62 after 5 rewards", removed_at=100 * DAY, vector=vector)
    assert restorable(r, 100 * DAY, 30 * DAY) and restorable(r, 130 * DAY - 1, 30 * DAY)
    assert not restorable(r, 130 * DAY, 30 * DAY) and not restorable(r, 400 * DAY, 30 * DAY)
    assert restorable(r, 99 * DAY, 30 * DAY)  # a clock behind the removal: still restorable
    assert restorable(r, 10_000 * DAY, None) and not restorable(r, 100 * DAY, 0.0)
    assert r.item == ITEM and np.frombuffer(r.vector or b"", np.float32).tolist() == [1.0] * 4


def test_a_merge_record_names_the_survivor_and_its_values_before() -> None:
    r = Removal(ITEM, "merged", 5.0, intent_id="intent-Zollformular", merged_into="mem-keep", kept_before=(0.5, 3))
    assert (r.merged_into, r.kept_before) == ("mem-keep", (0.5, 3))
    with pytest.raises(ConfigError, match="merged_into and kept_before go together"):
        Removal(ITEM, "merged", 5.0, intent_id="k", merged_into="mem-keep")
    with pytest.raises(ConfigError, match="vector .* or the intent_id"):
        Removal(ITEM, "superseded", 5.0)
    with pytest.raises(ConfigError, match="reason must be a non-empty string"):
        Removal(ITEM, " ", 5.0, intent_id="k")


# -- input checks --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "capacity must be an integer >= 1"),
        ({"capacity": True}, "capacity must be an integer >= 1"),
        ({"capacity": "500"}, "capacity must be an integer >= 1"),
        ({"min_visits": 0}, "min_visits must be an integer >= 1"),
        ({"low_q": math.nan}, "low_q must be a number"),
        ({"stale_after": -1.0}, r"stale_after \(seconds\) must be a number in \[0.0"),
        ({"merge_similarity": 0.0}, r"merge_similarity must be a cosine in \(0, 1\]"),
        ({"merge_similarity": 1.5}, r"merge_similarity must be a cosine in \(0, 1\]"),
        ({"retention": math.inf}, r"retention \(seconds\) must be a number"),
    ],
)
def test_bad_config_values_are_refused_with_what_was_expected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ForgetConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"visits": [1, 2]}, r"visits must be 1-D of length 3 \(like q\)"),
        ({"q": [0.0, math.nan, 0.0]}, "q must be finite"),
        ({"visits": [0, -1, 2]}, "visits must be integers >= 0"),
        ({"visits": [0.0, 1.5, 2.0]}, "visits must be integers >= 0"),
        ({"last_recalled": [0.0, math.inf, 0.0]}, "last_recalled NaN: never recalled"),
        ({"created_at": [0.0, math.nan, 0.0]}, "must be finite Unix times"),
        ({"superseded": [0, 1, 0]}, "superseded must be booleans"),
    ],
)
def test_bad_columns_are_refused_with_what_was_expected(change: dict[str, list[float]], message: str) -> None:
    columns: dict[str, list] = {
        "q": [0.0] * 3,
        "visits": [0] * 3,
        "last_recalled": [NEVER] * 3,
        "created_at": [0.0] * 3,
        "superseded": [False] * 3,
    }
    with pytest.raises(ConfigError, match=message):
        MemoryUsage(**{**columns, **change})  # type: ignore[arg-type]


def test_bad_calls_are_refused_with_what_was_expected() -> None:
    u = usage([(0.0, 0, NEVER, 0.0, False)] * 2)
    with pytest.raises(ConfigError, match="now must be a finite Unix time"):
        eviction_order(u, now=math.nan, config=CONFIG)
    with pytest.raises(ConfigError, match="incoming must be an integer >= 0"):
        plan_eviction(u, now=NOW, config=CONFIG, incoming=-1)
    with pytest.raises(ConfigError, match="must be L2-normalised rows .* row 1 has norm"):
        near_duplicates(np.array([[1.0, 0.0], [3.0, 4.0]]), 0.97)
    with pytest.raises(ConfigError, match=r"vectors must be 2-D"):
        near_duplicates(np.array([1.0, 0.0]), 0.97)
    with pytest.raises(ConfigError, match="3 vectors for 2 memories"):
        near_duplicates(np.eye(3), 0.97, u)
    with pytest.raises(ConfigError, match="merge_similarity must be a cosine"):
        near_duplicates(np.eye(2), 2.0)
    with pytest.raises(ConfigError, match="Q-values must be finite"):
        merged_values(math.inf, 1, 0.0, 1)
    with pytest.raises(ConfigError, match="visits_b must be an integer >= 0"):
        merged_values(0.0, 1, 0.0, -2)
