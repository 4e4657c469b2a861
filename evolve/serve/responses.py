"""What serving keeps in the database: the responses it gave, and the ratings users sent, queued for jobs.

A rating waits in ``evolve_feedback`` until a job learns it into memory (``learned``). One that a job
cannot learn (its response's stored steps cannot be read, or memory refuses what it would write) is
quarantined: the reason is kept in its ``quarantined`` column, later jobs pass over it instead of failing
on it again, ``quarantined`` lists it and ``release`` queues it again once the cause is fixed.

Example:
    >>> from connectors import make_engine
    >>> engine = make_engine("sqlite://")
    >>> open_tables(engine)
    >>> quarantined(engine, "codes@acme"), quarantine_note(engine, "codes@acme")
    ([], '')
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import (
    Column,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import OperationalError, ProgrammingError

from connectors import StoreError
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


def open_tables(engine: Engine) -> None:
    """Create the serving tables if missing, and add the columns a database from an older version lacks."""
    metadata.create_all(engine)
    if "quarantined" in _columns(engine):
        return
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE evolve_feedback ADD COLUMN quarantined TEXT"))
        log.info("serving tables: added %s.quarantined", feedback_rows.name)
    except (OperationalError, ProgrammingError) as e:
        if "quarantined" not in _columns(engine):  # else another process added it first
            raise StoreError(f"cannot add {feedback_rows.name}.quarantined in {engine.url!r}: {e}") from e


def _columns(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {c["name"] for c in inspect(conn).get_columns(feedback_rows.name)}


def stored_steps(response_id: str, raw: str) -> tuple[Step, ...]:
    """A response's steps as stored; a ``StoreError`` naming the response when they cannot be read."""
    try:
        return steps_from_json(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise StoreError(
            f"the stored steps of response {response_id!r} cannot be read ({type(e).__name__}: {e}): {raw!r:.120}"
        ) from None


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
    with engine.connect() as conn:
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


def quarantine_note(engine: Engine, run: str) -> str:
    """What a job's line says about the run's quarantined ratings ("" when there are none)."""
    open_tables(engine)
    f = feedback_rows.c
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).where(f.run == run, f.quarantined.is_not(None))).scalar_one()
    if not n:
        return ""
    return f"{n} served rating{'s' if n > 1 else ''} quarantined (Deployment.quarantined says why)"


__all__ = [
    "MAX_RESPONSE_ID",
    "QuarantinedRating",
    "feedback_rows",
    "open_tables",
    "quarantine",
    "quarantine_note",
    "quarantined",
    "release",
    "responses",
    "stored_steps",
]
