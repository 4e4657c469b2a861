"""What the loop keeps in the database: runs, episodes (the checkpoint) and per-round metrics.

Tables live in the same database as memory, so one file (or one PostgreSQL schema) holds everything an
agent learned and how it got there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    case,
    distinct,
    func,
    insert,
    select,
    update,
)

from connectors import ConfigError, ToolCall
from connectors.db import check_chars, for_reads, sqlite_path
from evolve.envs.tasks import MAX_TASK_ID
from evolve.episode import Episode, Step
from evolve.tools.runs import ToolRun

MAX_RUN = 200
"""The most characters in a run's name (``<run>@<tenant>`` included): the run columns are VARCHAR(200)."""
MAX_EPISODE_ID = 300
"""Episode ids (``<run>:<round>:<task id>``) longer than this are shortened with a hash (``memory.write.checks.fit_id``)."""
WAL_AUTOCHECKPOINT_PAGES = 10_000
"""The run log's SQLite connections checkpoint the write-ahead log at the size the memory store's own
connection does: left at SQLite's 1,000 pages, the run log's small commits would checkpoint (and fsync)
the memory writes that share the file, at ~1.5 ms a batch."""
CHECKPOINT_PRAGMA = "PRAGMA wal_autocheckpoint=10000"  # WAL_AUTOCHECKPOINT_PAGES, written out (no SQL from values)

metadata = MetaData()

runs = Table(
    "evolve_runs",
    metadata,
    Column("name", String(MAX_RUN), primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("config", Text, nullable=False, default="{}"),
)

episodes = Table(
    "evolve_episodes",
    metadata,
    Column("id", String(MAX_EPISODE_ID), primary_key=True),
    Column("run", String(MAX_RUN), nullable=False, index=True),
    Column("round", Integer, nullable=False),
    Column("task_id", String(MAX_TASK_ID), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("reward", Float, nullable=False),
    Column("answer", Text, nullable=False),
    Column("feedback", Text, nullable=False),
    Column("error", Text),
    Column("tokens", Integer, nullable=False, default=0),
    Column("cost", Float, nullable=False, default=0.0),
    Column("steps", Text, nullable=False, default="[]"),
    Column("learned", Integer, nullable=False, default=0),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("run", "round", "task_id", name="uq_episode_run_round_task"),
)

rounds = Table(
    "evolve_rounds",
    metadata,
    Column("run", String(MAX_RUN), primary_key=True),
    Column("round", Integer, primary_key=True),
    Column("metrics", Text, nullable=False),
    Column("completed_at", Float, nullable=False),
)


@dataclass(frozen=True)
class RoundMetrics:
    """One round of the loop, as stored and reported."""

    round: int
    episodes: int
    success_rate: float
    mean_reward: float
    errors: int
    tokens: int
    cost: float
    seconds: float
    memory_size: int = 0
    q_mean: float = 0.0
    q_std: float = 0.0
    prompt_updates: int = 0
    prompt_version: str = ""
    prompt_note: str = ""
    optimizer_tokens: int = 0
    weight_updates: int = 0
    weights_note: str = ""
    solved_share: float | None = None
    """Share of the tasks attempted so far that succeeded in at least one round up to this one (MemRL's
    cumulative success); None for rounds recorded before it was kept."""
    team: list[str] | None = None
    """The parallel team's members from the next round on, when this round re-composed it (``recompose``)."""
    team_note: str = ""
    orders: dict[str, list[int]] | None = None
    """An ordered team's orders this round (``"a > b > c"``): episodes acted in each and how many succeeded."""


class RunLog:
    """Reads and writes one run's rows."""

    def __init__(self, engine: Engine, run: str, config: dict[str, Any] | None = None) -> None:
        self.engine = engine
        self.run = check_run(run)
        self._sqlite_file = engine.dialect.name == "sqlite" and sqlite_path(str(engine.url)) is not None
        metadata.create_all(engine)
        with self._write() as conn:
            if conn.execute(select(runs.c.name).where(runs.c.name == run)).first() is None:
                conn.execute(insert(runs).values(name=run, created_at=time.time(), config=json.dumps(config or {})))

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction (on a SQLite file, with the memory store's checkpoint size)."""
        with self.engine.begin() as conn:
            if self._sqlite_file:
                conn.exec_driver_sql(CHECKPOINT_PRAGMA)
            yield conn

    def done_task_ids(self, round_: int) -> set[str]:
        with for_reads(self.engine).connect() as conn:
            rows = conn.execute(
                select(episodes.c.task_id).where(episodes.c.run == self.run, episodes.c.round == round_)
            )
            return {r[0] for r in rows}

    def unlearned(self, round_: int) -> list[str]:
        with for_reads(self.engine).connect() as conn:
            rows = conn.execute(
                select(episodes.c.id).where(
                    episodes.c.run == self.run, episodes.c.round == round_, episodes.c.learned == 0
                )
            )
            return [r[0] for r in rows]

    def record_episodes(self, eps: Sequence[Episode], *, learned: Sequence[str] = ()) -> None:
        """Store a batch's episodes as not yet learned from; ``learned`` ids (an earlier batch's) are marked
        learned in the same transaction, which saves the loop a commit per batch."""
        now = time.time()
        rows = [
            {
                "id": e.id,
                "run": self.run,
                "round": e.round,
                "task_id": e.task_id,
                "reward": e.reward,
                "answer": e.answer,
                "feedback": e.feedback,
                "error": e.error,
                "tokens": e.usage.total_tokens,
                "cost": e.usage.cost,
                "prompt": e.prompt,
                "steps": steps_to_json(e.steps),
                "learned": 0,
                "created_at": now,
            }
            for e in eps
        ]
        if rows or learned:
            with self._write() as conn:
                if rows:
                    conn.execute(insert(episodes), rows)
                if learned:
                    _set_learned(conn, learned)

    def mark_learned(self, ids: Sequence[str]) -> None:
        """Note that these episodes' lessons reached memory (a resumed run does not learn them again)."""
        if ids:
            with self._write() as conn:
                _set_learned(conn, ids)

    def round_rows(self, round_: int) -> list[dict[str, Any]]:
        with for_reads(self.engine).connect() as conn:
            rows = conn.execute(select(episodes).where(episodes.c.run == self.run, episodes.c.round == round_))
            return [dict(r._mapping) for r in rows]

    def learned_episodes(self) -> list[Episode]:
        """Every episode of the run the loop has learned from, in the order they were recorded."""
        with for_reads(self.engine).connect() as conn:
            rows = conn.execute(
                select(episodes)
                .where(episodes.c.run == self.run, episodes.c.learned == 1)
                .order_by(episodes.c.created_at, episodes.c.round, episodes.c.task_id)
            )
            return [episode_from_row(dict(r._mapping)) for r in rows]

    def round_scores(self, round_: int) -> list[tuple[float, str | None, int, float]]:
        """``(reward, error, tokens, cost)`` of each episode of ``round_``: what the round's metrics need,
        without reading the episodes' prompts, answers and steps."""
        c = episodes.c
        with for_reads(self.engine).connect() as conn:
            rows = conn.execute(select(c.reward, c.error, c.tokens, c.cost).where(c.run == self.run, c.round == round_))
            return [(r[0], r[1], r[2], r[3]) for r in rows]

    def solved_share(self, round_: int) -> float:
        """Distinct tasks that succeeded (reward >= 1) in a round up to ``round_``, over those attempted."""
        c = episodes.c
        solved = func.count(distinct(case((c.reward >= 1.0, c.task_id))))
        query = select(func.count(distinct(c.task_id)), solved).where(c.run == self.run, c.round <= round_)
        with for_reads(self.engine).connect() as conn:
            tried, won = conn.execute(query).one()
        return won / tried if tried else 0.0

    def completed(self) -> dict[int, RoundMetrics]:
        with for_reads(self.engine).connect() as conn:
            rows = conn.execute(select(rounds.c.round, rounds.c.metrics).where(rounds.c.run == self.run))
            return {r[0]: RoundMetrics(**json.loads(r[1])) for r in rows}

    def record_round(self, m: RoundMetrics) -> None:
        with self._write() as conn:
            conn.execute(
                insert(rounds).values(
                    run=self.run, round=m.round, metrics=json.dumps(asdict(m)), completed_at=time.time()
                )
            )


_LEARNED = update(episodes).where(episodes.c.id == bindparam("episode_id")).values(learned=1)


def _set_learned(conn: Connection, ids: Sequence[str]) -> None:
    """Mark episodes learned: one prepared UPDATE by primary key, run for each id (cheaper than an
    ``IN`` list, which SQLAlchemy renders anew for every batch)."""
    conn.execute(_LEARNED, [{"episode_id": i} for i in ids])


def check_run(run: object) -> str:
    """A run's name as every table keyed by it can store it: 1-200 characters, no NUL or lone surrogate."""
    if not isinstance(run, str) or not run.strip() or len(run) > MAX_RUN:
        size = f" ({len(run)} characters)" if isinstance(run, str) else ""
        raise ConfigError(f"a run name is a non-empty string of at most {MAX_RUN} characters, got {run!r:.80}{size}")
    return check_chars("the run name", run)


def steps_to_json(steps: Sequence[Step]) -> str:
    """What a row keeps of the steps: agent, output, recall id and namespace, turn, and a tool-using
    agent's calls (name, arguments, id, result, ok), unusable calls, why the last model call ended and the
    checker's score of the output, when it was taken (messages are not stored)."""
    out = []
    for s in steps:
        row: dict[str, Any] = {"agent": s.agent, "output": s.output, "recall_id": s.recall_id, "namespace": s.recall_namespace, "turn": s.turn}  # fmt: skip
        if s.calls:
            row["calls"] = [
                {
                    "name": r.call.name,
                    "arguments": dict(r.call.arguments),
                    "id": r.call.id,
                    "result": r.result,
                    "ok": r.ok,
                }
                for r in s.calls
            ]
        if s.problems:
            row["problems"] = list(s.problems)
        if s.finish is not None:
            row["finish"] = s.finish
        if s.score is not None:
            row["score"] = s.score
        out.append(row)
    return json.dumps(out, ensure_ascii=False, default=str)


def steps_from_json(text: str) -> tuple[Step, ...]:
    """The steps ``steps_to_json`` stored, without their messages (rows written before the recall's
    namespace or the tool calls were kept have none)."""
    return tuple(
        Step(
            s["agent"],
            (),
            s["output"],
            recall_id=s["recall_id"],
            turn=s["turn"],
            recall_namespace=s.get("namespace"),
            calls=tuple(
                ToolRun(ToolCall(c["name"], c["arguments"], id=c["id"]), c["result"], c["ok"])
                for c in s.get("calls", ())
            ),
            problems=tuple(s.get("problems", ())),
            finish=s.get("finish"),
            score=s.get("score"),
        )  # fmt: skip
        for s in json.loads(text)
    )


def episode_from_row(row: dict[str, Any]) -> Episode:
    """A recorded episode, complete enough to learn from again after a restart."""
    steps = steps_from_json(row["steps"])
    return Episode(
        row["id"],
        row["task_id"],
        row["prompt"],
        steps,
        row["answer"],
        row["reward"],
        row["feedback"],
        row["round"],
        row["error"],
    )


def learned_mark(engine: Engine, run: str) -> tuple[int, float | None]:
    """How many of ``run``'s episodes the loop has learned from, and when the last of them was recorded: what
    a served team's learned order was replayed from changes exactly when this does (no rows: ``(0, None)``)."""
    metadata.create_all(engine, tables=[episodes])
    with for_reads(engine).connect() as conn:
        count, last = conn.execute(
            select(func.count(), func.max(episodes.c.created_at)).where(episodes.c.run == run, episodes.c.learned == 1)
        ).one()
    return int(count), last


def list_runs(engine: Engine) -> dict[str, list[RoundMetrics]]:
    """Every run in the database with its completed rounds, in order."""
    metadata.create_all(engine)
    out: dict[str, list[RoundMetrics]] = {}
    with for_reads(engine).connect() as conn:
        for name, _round, m in conn.execute(
            select(rounds.c.run, rounds.c.round, rounds.c.metrics).order_by(rounds.c.run, rounds.c.round)
        ):
            out.setdefault(name, []).append(RoundMetrics(**json.loads(m)))
    return out
