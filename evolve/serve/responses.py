"""What serving keeps in the database: the responses it gave, and the ratings users sent, queued for jobs.

A rating waits in ``evolve_feedback`` until a job learns it into memory (``learned``). One that a job
cannot learn (its response's stored steps cannot be read, or memory refuses what it would write) is
quarantined: the reason is kept in its ``quarantined`` column, later jobs pass over it instead of failing
on it again, ``quarantined`` lists it and ``release`` queues it again once the cause is fixed.

A response served through OpenAI's Responses API (``evolve.serve.protocols.openai_responses``) is the same row;
while it is stored there (``store`` not false), its ``api_state`` column also keeps the response object and the
conversation it answered, so it can be fetched, continued with ``previous_response_id`` and deleted.

Example:
    >>> from connectors import make_engine
    >>> engine = make_engine("sqlite://")
    >>> open_tables(engine)
    >>> quarantined(engine, "codes@acme"), quarantine_note(engine, "codes@acme")
    ([], '')
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import OperationalError, ProgrammingError

from connectors import StoreError
from connectors.db import for_reads
from evolve.episode import Step
from evolve.run_log import MAX_RUN, steps_from_json

log = logging.getLogger(__name__)

MAX_RESPONSE_ID = 64
MAX_REASON = 2_000
"""The most characters of an error message kept as a quarantine reason."""

metadata = MetaData()

responses = Table(
    "evolve_responses",
    metadata,
    Column("id", String(MAX_RESPONSE_ID), primary_key=True),
    Column("run", String(MAX_RUN), nullable=False, index=True),
    Column("created_at", Float, nullable=False),
    Column("query", Text, nullable=False),
    Column("messages", Text, nullable=False),
    Column("answer", Text, nullable=False),
    Column("steps", Text, nullable=False),
    Column("prompt_version", String(64), nullable=False, default=""),
    Column("tokens", Integer, nullable=False, default=0),
    # the Responses API's response object and conversation (JSON), while it is stored there (``keep_state``);
    # NULL for a chat completion and for ``store: false``
    Column("api_state", Text, nullable=True),
)

feedback_rows = Table(
    "evolve_feedback",
    metadata,
    Column("id", String(330), primary_key=True),  # <response id (64)>:<idempotency key (200)>
    Column("response_id", String(MAX_RESPONSE_ID), nullable=False, index=True),
    Column("run", String(MAX_RUN), nullable=False, index=True),
    Column("score", Float, nullable=False),
    Column("comment", Text, nullable=False, default=""),
    Column("created_at", Float, nullable=False),
    Column("applied", Integer, nullable=False, default=0),  # the recalled memories were reinforced
    Column("learned", Integer, nullable=False, default=0),  # a job wrote the response into memory
    Column("quarantined", Text, nullable=True),  # why no job could learn it (None: not quarantined)
)


@dataclass(frozen=True)
class QuarantinedRating:
    """A rating no job could learn, and why (``reason``: the error it raised)."""

    feedback_id: str
    response_id: str
    run: str
    score: float
    comment: str
    reason: str
    created_at: float


ADDED = {
    (feedback_rows, "quarantined"): "ALTER TABLE evolve_feedback ADD COLUMN quarantined TEXT",
    (responses, "api_state"): "ALTER TABLE evolve_responses ADD COLUMN api_state TEXT",
}
"""Columns added after their table was first made (each TEXT, nullable), with the statement that adds one to an
older database (written out: no SQL is built from names)."""


def open_tables(engine: Engine) -> None:
    """Create the serving tables if missing, and add the columns a database from an older version lacks."""
    metadata.create_all(engine)
    for (table, column), statement in ADDED.items():
        if column in _columns(engine, table):
            continue
        try:
            with engine.begin() as conn:
                conn.execute(text(statement))
            log.info("serving tables: added %s.%s", table.name, column)
        except (OperationalError, ProgrammingError) as e:
            if column not in _columns(engine, table):  # else another process added it first
                raise StoreError(f"cannot add {table.name}.{column} in {engine.url!r}: {e}") from e


def _columns(engine: Engine, table: Table) -> set[str]:
    with for_reads(engine).connect() as conn:
        return {c["name"] for c in inspect(conn).get_columns(table.name)}


def stored_steps(response_id: str, raw: str) -> tuple[Step, ...]:
    """A response's steps as stored; a ``StoreError`` naming the response when they cannot be read."""
    try:
        return steps_from_json(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise StoreError(
            f"the stored steps of response {response_id!r} cannot be read ({type(e).__name__}: {e}): {raw!r:.120}"
        ) from None


def keep_state(engine: Engine, response_id: str, state: Mapping[str, Any]) -> None:
    """Keep a recorded response's Responses API state (its response object and conversation): from now on it can
    be fetched and continued (``stored_state``)."""
    with engine.begin() as conn:
        conn.execute(update(responses).where(responses.c.id == response_id).values(api_state=json.dumps(state)))


def stored_state(engine: Engine, response_id: str, run: str) -> dict[str, Any] | None:
    """The Responses API state ``keep_state`` kept for this run's response; None when there is none (an unknown
    id, another run's, a chat completion's, or one made with ``store: false``)."""
    with for_reads(engine).connect() as conn:
        raw = conn.execute(
            select(responses.c.api_state).where(responses.c.id == response_id, responses.c.run == run)
        ).scalar_one_or_none()
    return None if raw is None else dict(json.loads(raw))


def forget(engine: Engine, response_id: str, run: str) -> bool:
    """Delete this run's stored Responses API response: its record and its ratings (what a job already learned
    from them stays in memory). False, and nothing deleted, when it has no stored state (``stored_state``)."""
    r = responses.c
    with engine.begin() as conn:
        gone = conn.execute(
            delete(responses).where(r.id == response_id, r.run == run, r.api_state.is_not(None))
        ).rowcount
        if gone:
            conn.execute(delete(feedback_rows).where(feedback_rows.c.response_id == response_id))
    return bool(gone)


def quarantine(engine: Engine, feedback_id: str, reason: str) -> None:
    """Take a rating out of the queue with ``reason``: jobs pass over it until it is released."""
    with engine.begin() as conn:
        conn.execute(
            update(feedback_rows).where(feedback_rows.c.id == feedback_id).values(quarantined=reason[:MAX_REASON])
        )


def quarantined(engine: Engine, run: str) -> list[QuarantinedRating]:
    """The run's quarantined ratings, oldest first."""
    open_tables(engine)
    f = feedback_rows.c
    query = select(f.id, f.response_id, f.run, f.score, f.comment, f.quarantined, f.created_at)
    with for_reads(engine).connect() as conn:
        rows = conn.execute(query.where(f.run == run, f.quarantined.is_not(None)).order_by(f.created_at)).all()
    return [QuarantinedRating(*row) for row in rows]


def release(engine: Engine, run: str, feedback_ids: Sequence[str] | None = None) -> int:
    """Queue the run's quarantined ratings (all, or those of ``feedback_ids``) again for the next job,
    once the cause is fixed; returns how many."""
    open_tables(engine)
    where = [feedback_rows.c.run == run, feedback_rows.c.quarantined.is_not(None)]
    if feedback_ids is not None:
        where.append(feedback_rows.c.id.in_(list(feedback_ids)))
    with engine.begin() as conn:
        return int(conn.execute(update(feedback_rows).where(*where).values(quarantined=None)).rowcount)


def count_quarantined(engine: Engine) -> int:
    """How many ratings are quarantined now, every run's together (``/metrics``: ``evolve_ratings_quarantined``).
    The caller has opened the tables (``open_tables``)."""
    with for_reads(engine).connect() as conn:
        return int(conn.execute(select(func.count()).where(feedback_rows.c.quarantined.is_not(None))).scalar_one())


def quarantine_note(engine: Engine, run: str) -> str:
    """What a job's line says about the run's quarantined ratings ("" when there are none)."""
    open_tables(engine)
    f = feedback_rows.c
    with for_reads(engine).connect() as conn:
        n = conn.execute(select(func.count()).where(f.run == run, f.quarantined.is_not(None))).scalar_one()
    if not n:
        return ""
    return f"{n} served rating{'s' if n > 1 else ''} quarantined (Deployment.quarantined says why)"


__all__ = [
    "MAX_RESPONSE_ID",
    "QuarantinedRating",
    "count_quarantined",
    "feedback_rows",
    "forget",
    "keep_state",
    "open_tables",
    "quarantine",
    "quarantine_note",
    "quarantined",
    "release",
    "responses",
    "stored_state",
    "stored_steps",
]
