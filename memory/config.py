"""Configuration of the memory engine: retrieval knobs and the learning rule, as frozen dataclasses.

Defaults are the MemRL paper's (arXiv 2601.03192): α = 0.3, λ = 0.5, Q_init = 0, k1 = 10, k2 = 5,
ε = 0. Change a field with ``dataclasses.replace``; every value is checked when the object is built.

Example:
    >>> from dataclasses import replace
    >>> cfg = MemoryConfig(retrieval=RetrievalConfig(k1=20, k2=3))
    >>> replace(cfg, alpha=0.1).alpha
    0.1
    >>> similarity_only(cfg).retrieval.lam, similarity_only(cfg).alpha
    (0.0, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from connectors.db import DURABILITY_LEVELS, Durability
from connectors.errors import ConfigError
from memory.defences.trust import TrustPolicy

CreditMode = Literal["uniform", "score"]
FailureKeeps = Literal["feedback", "attempt", "both"]
FAILURE_KEEPS: tuple[str, ...] = ("feedback", "attempt", "both")
IndexKind = Literal["auto", "adaptive", "flat", "hnsw", "ivf", "pgvector"]
CREDIT_MODES: tuple[str, ...] = ("uniform", "score")
DrawFrom = Literal["both", "episodes", "strategies"]
DRAW_FROM: tuple[str, ...] = ("both", "episodes", "strategies")
AlphaSchedule = Literal["constant", "visits"]
ALPHA_SCHEDULES: tuple[str, ...] = ("constant", "visits")
ContextStart = Literal["global", "neutral"]
CONTEXT_STARTS: tuple[str, ...] = ("global", "neutral")
StrategyStart = Literal["q_init", "sources"]
STRATEGY_STARTS: tuple[str, ...] = ("q_init", "sources")
INDEX_KINDS: tuple[str, ...] = ("flat", "hnsw", "ivf")  # the in-process (FAISS / NumPy) kinds
SERVER_INDEX_KINDS: tuple[str, ...] = ("pgvector",)  # kinds the database itself serves
INDEX_CHOICES: tuple[str, ...] = ("auto", "adaptive", *INDEX_KINDS, *SERVER_INDEX_KINDS)


def check_int(owner: str, name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ConfigError(f"{owner}.{name} must be an integer >= {low}, got {value!r}")


def _check_range(owner: str, name: str, value: object, low: float, high: float) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not low <= value <= high:  # type: ignore[operator]
        raise ConfigError(f"{owner}.{name} must be a number in [{low}, {high}], got {value!r}")


def _check_finite(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{owner}.{name} must be a finite number, got {value!r}")


DAY = 86_400.0
RECALL_LOG_DELAY = 0.01
"""Seconds a recall's log row waits for its group commit by default (``MemoryConfig.recall_log_delay``)."""
MAX_RECALL_LOG_DELAY = 10.0


def real_number(value: object) -> float | None:
    """``value`` as a finite float, or None when it is not a finite real number (bools are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def check_number(owner: str, name: str, value: object, *, low: float, high: float = math.inf) -> None:
    number = real_number(value)
    if number is None or not low <= number <= high:
        raise ConfigError(f"{owner}.{name} must be a number in [{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class ForgetConfig:
    """How a namespace forgets. The defaults forget nothing (no capacity, no merging).

    Attributes:
        capacity: the most memories a namespace keeps; beyond it the most evictable go (the
            module's order). None: never evict.
        min_visits: how many rewards a memory's Q needs before it is trusted (ranked by Q).
        low_q: a trusted memory with Q at or below this has shown it does not help (0.0: no better
            than a fresh memory's default Q_init); it goes before untrusted ones.
        stale_after: seconds without a recall (from creation when never recalled) after which an
            untrusted memory is stale. None: none is ever stale.
        merge_similarity: cosine at or above which two memories of one namespace are near-duplicates
            and merge (e.g. 0.97). None: no merging.
        retention: seconds a removal stays reversible from its record. None: forever.
        recall_retention: seconds a logged recall stays explainable and reinforceable by its id; older
            ones leave the log at the next prune, what they taught folded into a summary
            (``memory.recall.expiry`` has the trade-off). None: keep every recall.

    Example:
        >>> ForgetConfig(capacity=500, merge_similarity=0.97).min_visits
        3
    """

    capacity: int | None = None
    min_visits: int = 3
    low_q: float = 0.0
    stale_after: float | None = 30 * DAY
    merge_similarity: float | None = None
    retention: float | None = 30 * DAY
    recall_retention: float | None = None

    def __post_init__(self) -> None:
        owner = "ForgetConfig"
        if self.capacity is not None:
            check_int(owner, "capacity", self.capacity, 1)
        check_int(owner, "min_visits", self.min_visits, 1)
        check_number(owner, "low_q", self.low_q, low=-1e12, high=1e12)
        if self.stale_after is not None:
            check_number(owner, "stale_after (seconds)", self.stale_after, low=0.0)
        if self.merge_similarity is not None:
            sim = real_number(self.merge_similarity)
            if sim is None or not 0.0 < sim <= 1.0:
                raise ConfigError(
                    f"{owner}.merge_similarity must be a cosine in (0, 1] or None, got {self.merge_similarity!r}"
                )
        if self.retention is not None:
            check_number(owner, "retention (seconds)", self.retention, low=0.0)
        if self.recall_retention is not None:
            check_number(owner, "recall_retention (seconds)", self.recall_retention, low=0.0)


@dataclass(frozen=True)
class RetrievalConfig:
    """How one recall picks memories: phases A and B (docs/design/decisions.md, "Two-phase recall").

    Attributes:
        k1: phase A pool size — the k1 most similar items above the floor.
        k2: how many items a recall returns (``k2 <= k1``).
        delta: phase A similarity floor δ; only items with cosine > δ enter the pool.
        lam: λ, the weight of ẑ(Q) against ẑ(sim) in phase B; 0 is plain similarity ranking.
        epsilon: probability of replacing the selection by a random k2 of the pool (exploration).
        z_clip: z-scores inside the pool are clipped to ±z_clip.
        context_q: Q in context (the default). A recall made for a context (``retrieve(...,
            context=task_id)``, as the ``Evolver`` does) ranks each memory by the Q it earned in recalls
            of that context (``Q ← Q + α·(r − Q)`` over them, from ``context_start``). A memory that
            helped one task then ranks high for that task only, not for every look-alike. A recall
            without a context (a served request) ranks by the global Q. False: one Q per memory (the
            MemRL paper's rule). Chosen by measurement: on the four bundled families (rule reader,
            10 seeds) it is above one Q per memory pooled (+0.086 [+0.074, +0.099] mean success over
            8 epochs) and below it on none (bench/results/learning_findings.md).
        context_start: with ``context_q``, what a memory's Q is in a context that has not rewarded it.
            ``"neutral"`` (the default): ``MemoryConfig.q_init``, and its Q there folds from ``q_init``:
            a Q earned on other tasks (a look-alike's failure) does not outweigh similarity for a task
            that never recalled the memory (``memory.recall.context_q``; measured in bench/results/learning_findings.md:
            mean success over 8 epochs +0.035 [+0.030, +0.040] over ``"global"`` on the four families,
            10 seeds). ``"global"``: its stored Q, and its Q there folds from the Q it had when that
            context first recalled it.
        draw_from: which kinds of memory a recall draws from: ``"both"`` (episodes and the strategies
            consolidation distilled from them, ranked together), ``"episodes"`` or ``"strategies"``
            (``memory.upkeep.strategies``). A store with no strategies recalls the same under all but
            ``"strategies"``, which then finds nothing.

    Example:
        >>> RetrievalConfig(k1=8, k2=2, delta=0.3).k2
        2
    """

    k1: int = 10
    k2: int = 5
    delta: float = 0.0
    lam: float = 0.5
    epsilon: float = 0.0
    z_clip: float = 3.0
    context_q: bool = True
    context_start: ContextStart = "neutral"
    draw_from: DrawFrom = "both"

    def __post_init__(self) -> None:
        owner = "RetrievalConfig"
        if self.draw_from not in DRAW_FROM:
            raise ConfigError(f"{owner}.draw_from must be one of {DRAW_FROM}, got {self.draw_from!r}")
        if not isinstance(self.context_q, bool):
            raise ConfigError(f"{owner}.context_q must be True or False, got {self.context_q!r}")
        if self.context_start not in CONTEXT_STARTS:
            raise ConfigError(
                f"{owner}.context_start must be one of {CONTEXT_STARTS} (the Q of a memory a context has not"
                f" rewarded: its stored Q, or q_init), got {self.context_start!r}"
            )
        check_int(owner, "k2", self.k2, 1)
        check_int(owner, "k1", self.k1, 1)
        if self.k1 < self.k2:
            raise ConfigError(
                f"{owner}.k1 must be >= k2 (the pool must hold the selection), got k1={self.k1}, k2={self.k2}"
            )
        _check_range(owner, "delta", self.delta, -1.0, 1.0)
        _check_range(owner, "lam", self.lam, 0.0, 1.0)
        _check_range(owner, "epsilon", self.epsilon, 0.0, 1.0)
        _check_finite(owner, "z_clip", self.z_clip)
        if self.z_clip <= 0:
            raise ConfigError(f"{owner}.z_clip must be > 0, got {self.z_clip!r}")


@dataclass(frozen=True)
class MemoryConfig:
    """The memory store's behaviour: retrieval, the Q learning rule, grouping, index and capacity.

    Attributes:
        retrieval: the default ``RetrievalConfig`` (a recall may pass its own).
        alpha: α, the Q learning rate in ``Q ← Q + α·(r − Q)`` (with ``alpha_schedule="constant"``).
        alpha_schedule: how big a step one reward takes. ``"constant"`` (the default, the MemRL paper's):
            α every time. ``"visits"``: ``α_n = max(alpha_floor, 1/(n + 2))`` with n the rewards the memory
            had before this one (its ``visits``; in a context, the rewards of that context's recalls:
            ``memory.recall.context_q``): a running mean with one pseudo-observation at the starting Q, so one
            wrong rating moves a memory with evidence less, floored so a fact that changes can still be
            followed (``memory.learn.rule.alpha_for``). ``alpha`` is then unused. Not the default: on the
            noisy-ratings bench (``bench.noise_alpha``: Q in context, rule reader, four families, 10 seeds,
            ρ = 0 to 0.3 wrong ratings) floors 0.1 and 0.2 are level with the constant α pooled at every ρ
            (last epoch at ρ = 0.3: −0.005 [−0.025, +0.014]) and below it on changing facts at ρ = 0.2
            (−0.017 [−0.032, −0.001]): a memory meets at most 8 rewards in one context there, too few for
            the steps to differ much.
        alpha_floor: the smallest step of ``alpha_schedule="visits"``, in [0, 1] (0: a plain running mean).
        q_init: the Q a new memory starts with (unless ``add(q=...)`` says otherwise).
        group_threshold: for writes that name no task, a new intent whose cosine with an existing
            intent key of the same namespace is >= this joins that key's group and is stored with the
            key's embedding. 0.98, calibrated on the four bundled families (``python -m bench.grouping``):
            the lowest threshold at which MiniLM merges no two different tasks; at the former 0.9,
            42-75% of each family's tasks shared a group with a look-alike. At 0.98 near-identical
            questions still group and paraphrases mostly do not (no threshold separates them from
            look-alikes); writes that name their task group by task whatever this says.
        credit: how one reward is shared by the items of a recall: ``"uniform"`` (the paper) or
            ``"score"`` (weights from the selection scores, mean 1).
        index: ``"flat"`` (exact inner product), ``"hnsw"`` or ``"ivf"`` (approximate, need faiss;
            ``"ivf"`` stays exact below 20,000 items), ``"pgvector"`` (PostgreSQL answers phase A
            through an HNSW index on the intents' ``vector`` column; no index in the process) or
            ``"auto"`` (the default): ``"pgvector"`` on PostgreSQL, ``"adaptive"`` elsewhere. ``"adaptive"``
            is exact while a namespace holds fewer than 20,000 items, then an HNSW graph whose ``efSearch`` is
            tuned for recall@10 >= 0.99 on sampled queries (or where more stops paying:
            ``memory.mirror.graph.tuned_ef``), built, merged and re-measured in the background while recalls
            go on (``memory.mirror.adaptive``; ``MemoryStore.index_details`` shows its state). The graph
            holds each distinct vector once, so the copies an intent group or a repeated text makes cost
            it nothing (``memory.mirror.twins``); without faiss it is NumPy's exact search. Approximate
            kinds also group intents through the index instead of comparing each new intent with every key.
        capacity: the most items a namespace keeps; beyond it the lowest-utility, oldest items go.
        item_cache: how many recalled memories' texts a process keeps in memory (least recently
            used out); a recall reads the others from SQL. Any size is correct, bigger is faster.
        durability: what a committed write survives. ``"normal"``: an application or process crash
            loses nothing; a power loss or OS crash may lose the last transactions, never corrupts
            (SQLite ``synchronous=NORMAL`` under WAL; PostgreSQL keeps the server's
            ``synchronous_commit``). ``"full"``: a committed transaction survives a power loss (SQLite
            ``synchronous=FULL``, PostgreSQL ``synchronous_commit=on`` for the store's sessions), at the
            cost of a disk flush per commit (``bench/reliability_storage.py``).
        recall_log_delay: seconds a recall's row in the recall log may wait for its group commit (None:
            ``RECALL_LOG_DELAY`` under ``"normal"`` durability, 0 under ``"full"``; 0: each recall commits its row
            before it returns). Recalls in that window are committed together by a background writer, before
            any other transaction of the store (a ``reinforce`` finds its recall), and on ``close``. What it
            risks: a process killed in the window loses those recalls' rows (their memories and Q are
            untouched; rating one of them afterwards is a ``StoreError`` that says so). An acknowledged
            ``reinforce`` or write is never deferred.
        failure_keeps: what a failure memory stores of its attempt besides the task and outcome.
            ``"feedback"`` (the default): the feedback, not the attempt (the wrong answer or steps);
            ``"attempt"``: the attempt, not the feedback; ``"both"``: both, as the MemRL paper does.
            A failure whose kept part is empty keeps the other, so no memory is stored blank; a
            success always keeps both. With SmolLM2 on the four bundled families (5 seeds, paired),
            dropping the wrong answer lifted Q-memory by +0.115 [+0.048, +0.181] pooled, from +0.283
            on facility codes to level on look-alikes: a small model copies a remembered wrong answer
            instead of the feedback's correction (``bench/results/learning_findings.md``). Measured on
            single-answer tasks only; for multi-step agents whose failed steps are worth reading,
            ``"both"`` keeps them.
        supersede: facts that change. When true, a memory written by ``write``/``write_many`` that
            states a different fact than older valid memories of its intent group (a success that gave
            another answer, a failure whose feedback revealed another one: the rule is in
            ``memory.upkeep.supersession``) supersedes them: they stay stored, marked ``valid_to`` and
            ``superseded_by``, and no recall finds them any more (``retrieve(as_of=...)`` still does).
            Off by default, so that a run whose answers vary in wording keeps recalling all its memories.
            On the bundled changing-facts family (oracle reader, 10 seeds, ``bench/changing_facts.py``)
            the tasks whose answer changed succeed 0.39 of the time in the round after the change
            instead of 0.03, and success from the change on rises by +0.086 [+0.076, +0.097].

        credit_depth: credit over several steps (``memory.learn.credit``): how many provenance edges a reward
            travels back from the memories a recall selected to the memories that were in context when
            those were written. 0 (the default, the switch off): only the recalled memories move. On a
            bundled three-step family whose deciding memory sits two edges above the only reward
            (``bench/multistep_credit.py``, rule reader, 10 seeds), depth 2 lifts mean success over 12
            rounds from 0.543 to 0.931, +0.389 [+0.370, +0.407]; it costs −0.062 [−0.126, +0.001] in the
            first round, where a failure also blames memories that were not at fault.
        credit_decay: γλ in [0, 1], the weight factor per edge: an ancestor ``d`` edges away gets
            ``(γλ)^d`` of the recalled memory's weight.
        forget: forgetting with a budget (``memory.upkeep.forgetting.ForgetConfig``: capacity, eviction order,
            merging of near-duplicates, how long a removal stays reversible), applied by
            ``MemoryStore.prune`` and ``evolve job``. The default forgets nothing.
        trust: which writers' memories count as written (``memory.defences.trust.TrustPolicy``): ``"open"`` (the
            default) stores every writer's alike; ``"neutral"`` starts an untrusted writer's memories at
            ``q_init`` with no visits; ``"quarantine"`` holds them where no recall finds them until
            ``MemoryStore.release``.
        strategy_start: the Q a strategy that consolidation distils for a group without one starts with
            (``memory.upkeep.strategies``; a refined strategy always takes over its predecessor's Q and visits).
            ``"q_init"`` (the default): ``q_init``, like any new memory. ``"sources"``: the Q its source
            episodes earned, their mean weighted by visits (unweighted when none was rewarded yet), with no
            visits of its own. Under ``RetrievalConfig.context_q`` with the ``"neutral"`` start a task's
            recalls never read a memory's stored Q, so there the choice only moves recalls made without a
            context (served requests).

    Example:
        >>> MemoryConfig(alpha=0.5, capacity=1000).capacity
        1000
    """

    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    alpha: float = 0.3
    alpha_schedule: AlphaSchedule = "constant"
    alpha_floor: float = 0.1
    q_init: float = 0.0
    group_threshold: float = 0.98
    credit: CreditMode = "uniform"
    index: IndexKind = "auto"
    capacity: int | None = None
    item_cache: int = 20_000
    durability: Durability = "normal"
    recall_log_delay: float | None = None
    failure_keeps: FailureKeeps = "feedback"
    supersede: bool = False
    credit_depth: int = 0
    credit_decay: float = 0.5
    forget: ForgetConfig = field(default_factory=ForgetConfig)
    trust: TrustPolicy = field(default_factory=TrustPolicy)
    strategy_start: StrategyStart = "q_init"

    def __post_init__(self) -> None:
        owner = "MemoryConfig"
        if self.strategy_start not in STRATEGY_STARTS:
            raise ConfigError(f"{owner}.strategy_start must be one of {STRATEGY_STARTS}, got {self.strategy_start!r}")
        if not isinstance(self.trust, TrustPolicy):
            raise ConfigError(
                f"{owner}.trust must be a memory.defences.trust.TrustPolicy, got {type(self.trust).__name__}"
            )
        check_int(owner, "credit_depth", self.credit_depth, 0)
        _check_range(owner, "credit_decay", self.credit_decay, 0.0, 1.0)
        if not isinstance(self.forget, ForgetConfig):
            raise ConfigError(f"{owner}.forget must be a ForgetConfig, got {type(self.forget).__name__}")
        if not isinstance(self.retrieval, RetrievalConfig):
            raise ConfigError(f"{owner}.retrieval must be a RetrievalConfig, got {type(self.retrieval).__name__}")
        _check_range(owner, "alpha", self.alpha, 0.0, 1.0)
        if self.alpha_schedule not in ALPHA_SCHEDULES:
            raise ConfigError(
                f"{owner}.alpha_schedule must be one of {ALPHA_SCHEDULES} (a step of alpha per reward, or"
                f" max(alpha_floor, 1/(visits + 2))), got {self.alpha_schedule!r}"
            )
        _check_range(owner, "alpha_floor", self.alpha_floor, 0.0, 1.0)
        _check_range(owner, "q_init", self.q_init, -1e12, 1e12)  # memory.write.inserts.MAX_VALUE: Q stays finite
        ok = isinstance(self.group_threshold, (int, float)) and not isinstance(self.group_threshold, bool)
        if not ok or not 0.0 < self.group_threshold <= 1.0:
            raise ConfigError(f"{owner}.group_threshold must be a number in (0, 1], got {self.group_threshold!r}")
        if self.credit not in CREDIT_MODES:
            raise ConfigError(f"{owner}.credit must be one of {CREDIT_MODES}, got {self.credit!r}")
        if self.index not in INDEX_CHOICES:
            raise ConfigError(f"{owner}.index must be one of {INDEX_CHOICES}, got {self.index!r}")
        if self.capacity is not None:
            check_int(owner, "capacity", self.capacity, 1)
        check_int(owner, "item_cache", self.item_cache, 0)
        if self.durability not in DURABILITY_LEVELS:
            raise ConfigError(f"{owner}.durability must be one of {DURABILITY_LEVELS}, got {self.durability!r}")
        if self.recall_log_delay is not None:
            _check_range(owner, "recall_log_delay", self.recall_log_delay, 0.0, MAX_RECALL_LOG_DELAY)
            if self.durability == "full" and self.recall_log_delay > 0:
                raise ConfigError(
                    f"{owner}.recall_log_delay must be 0 (or None) with durability='full', which commits every "
                    f"recall before it returns; got {self.recall_log_delay!r}"
                )
        if self.failure_keeps not in FAILURE_KEEPS:
            raise ConfigError(f"{owner}.failure_keeps must be one of {FAILURE_KEEPS}, got {self.failure_keeps!r}")
        if not isinstance(self.supersede, bool):
            raise ConfigError(f"{owner}.supersede must be True or False, got {self.supersede!r}")

    @property
    def log_delay(self) -> float:
        """``recall_log_delay`` resolved: the seconds a recall's log row may wait (0: committed in the call)."""
        if self.recall_log_delay is not None:
            return float(self.recall_log_delay)
        return 0.0 if self.durability == "full" else RECALL_LOG_DELAY


def similarity_only(cfg: MemoryConfig | None = None) -> MemoryConfig:
    """The RAG/MemP baseline: λ = 0 (rank by similarity alone) and α = 0 (Q never moves: the constant schedule).

    Exploration is switched off too (ε = 0): the baseline retrieves deterministically. Everything else (k1, k2, δ, grouping, index) is kept, so a benchmark compares like with like.
    """
    cfg = cfg if cfg is not None else MemoryConfig()
    return replace(cfg, alpha=0.0, alpha_schedule="constant", retrieval=replace(cfg.retrieval, lam=0.0, epsilon=0.0))


def recall_config(base: RetrievalConfig, k: int | None) -> RetrievalConfig:
    """``base`` with ``k2 = k`` (phase A's pool ``k1`` widened to hold it); ``base`` itself for None: a caller's
    "give me k" (LangChain's ``k``, LangGraph's ``limit + offset``) as a recall's settings.

    Example:
        >>> cfg = recall_config(RetrievalConfig(k1=10, k2=5), 20)
        >>> cfg.k1, cfg.k2
        (20, 20)
    """
    if k is None:
        return base
    return replace(base, k2=k, k1=max(base.k1, k))
