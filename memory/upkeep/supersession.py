"""Facts that change: a newer experience that contradicts older ones supersedes them
(docs/design/decisions.md, "Supersession").

With ``MemoryConfig(supersede=True)``, a memory written by ``MemoryStore.write``/``write_many`` is
compared with the valid memories of its intent group (same namespace, same intent key: the writer's
grouping, one group per task when the write names its task). Each memory *states a fact* or none:

- an explicit ``WriteEntry(fact=...)`` (stored as ``meta["fact"]``) is the fact, whatever the outcome;
- else a success states the answer it gave: the rest of the last ``Answer given:`` line of its
  experience (the line ``evolve.episode.condense`` writes for a one-agent attempt);
- else a failure states the answer its feedback revealed: what follows the last ``The expected
  answer is:`` of its experience (the feedback ``evolve.envs.tasks`` gives in ``"reveal"`` mode;
  the feedback is the last part of every stored failure);
- anything else (a failure that revealed nothing, a multi-agent trajectory, ``add()``) states none.

Facts compare after ``normalise_fact`` (case, spacing, a final full stop). The new memory **contradicts**
an older valid one of its group when both state a fact and the facts differ: then the older one gets
``valid_to`` = the new one's ``valid_from`` (its creation time) and ``superseded_by`` = the new one's id,
in the transaction that inserts the new one. A new memory stating the same fact, or none, supersedes
nothing. ``write_many`` behaves as the same writes one after another, in order. Superseded memories stay
in the store (``get``, ``items``, ``explain``, ``retrieve(as_of=...)``) but leave the mirrors, so no
recall finds them.

Example:
    >>> stated_fact(True, "Outcome: success\\nAnswer given: The code is 4471\\nFeedback: Correct.", {})
    'the code is 4471'
    >>> plan_supersession([("old", "the code is 4471")], [("new", "the code is 9902")])
    {'old': 'new'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, bindparam, update

from memory.storage.items import fetch_items
from memory.storage.schema import memory_items

if TYPE_CHECKING:
    from memory.mirror.arrays import NamespaceMirror

ANSWER_GIVEN = re.compile(r"^Answer given:[ \t]*(.*)$", re.MULTILINE)
"""A success's answer: the line ``evolve.episode.condense`` ends a one-agent trajectory with."""
REVEALED = "The expected answer is:"
"""What a failure's feedback says before the right answer (``evolve.envs.tasks``, ``"reveal"`` mode)."""
FACT_KEY = "fact"
"""The ``meta`` key of a fact the writer was told (``WriteEntry.fact``)."""
SUPERSEDE = (
    update(memory_items)
    .where(memory_items.c.id == bindparam("old_id"), memory_items.c.valid_to.is_(None))
    .values(valid_to=bindparam("until"), superseded_by=bindparam("new_id"), updated_gen=bindparam("gen"))
)


def normalise_fact(text: str) -> str | None:
    """A fact as compared: spacing collapsed, case folded, quotes and a final full stop dropped (None if empty).

    Example:
        >>> normalise_fact("  `751`. "), normalise_fact("Extension  751") == normalise_fact("extension 751")
        ('751', True)
    """
    out = " ".join(text.split()).casefold().rstrip(".").strip("\"'` ")
    return out or None


def stated_fact(success: bool | None, experience: str, meta: Mapping[str, Any]) -> str | None:
    """The fact a memory states (the module's rule), normalised, or None when it states none."""
    explicit = meta.get(FACT_KEY)
    if isinstance(explicit, str):
        return normalise_fact(explicit)
    if success is True:
        given = ANSWER_GIVEN.findall(experience)
        return normalise_fact(given[-1]) if given else None
    if success is False and REVEALED in experience:
        return normalise_fact(experience.rsplit(REVEALED, 1)[1])
    return None


def plan_supersession(
    older: Sequence[tuple[str, str | None]], newer: Sequence[tuple[str, str | None]]
) -> dict[str, str]:
    """Within one intent group: ``{superseded id: superseding id}``.

    ``older`` are the group's valid memories and ``newer`` the ones being written, in write order, each
    as ``(id, fact or None)``. Each new memory stating a fact supersedes every valid one (older, or
    written before it in ``newer``) stating a different fact; it then joins the valid ones.
    """
    valid = dict(older)
    out: dict[str, str] = {}
    for new_id, fact in newer:
        if fact is not None:
            for old_id in [i for i, f in valid.items() if f is not None and f != fact]:
                out[old_id] = new_id
                del valid[old_id]
        valid[new_id] = fact
    return out


@dataclass(frozen=True)
class Supersession:
    """What one insert supersedes: ``by`` maps each superseded id (stored, or of the batch itself) to the
    id superseding it; ``rows`` are the stored ones' rows in the namespace's mirror."""

    by: dict[str, str]
    rows: np.ndarray


def supersessions(
    conn: Connection, mirror: NamespaceMirror, ids: Sequence[str], facts: Sequence[str | None], labels: np.ndarray
) -> Supersession:
    """What new memories (``ids``, their ``facts``, their intent groups ``labels``: positions in the mirror's
    keys, then new keys) supersede, inside the caller's write transaction (the mirror is current: it holds
    exactly the valid memories)."""
    n_old, by, rows = len(mirror.key_ids), dict[str, str](), list[int]()
    for label in sorted({int(labels[i]) for i, f in enumerate(facts) if f is not None}):
        in_group = np.flatnonzero(mirror.intent_codes == label) if label < n_old else np.zeros(0, np.int64)
        stored = fetch_items(conn, [str(i) for i in mirror.ids[in_group]], mirror.namespace)
        older = [(item.id, stated_fact(item.success, item.experience, item.meta)) for item in stored]
        newer = [(ids[i], facts[i]) for i in range(len(ids)) if int(labels[i]) == label]
        group = plan_supersession(older, newer)
        by.update(group)
        rows.extend(int(r) for r, item_id in zip(in_group, mirror.ids[in_group], strict=True) if item_id in group)
    return Supersession(by, np.array(sorted(rows), dtype=np.int64))


def mark_superseded(conn: Connection, by: Mapping[str, str], since: Mapping[str, float], generation: int) -> None:
    """Stamp stored memories superseded: ``valid_to`` = the superseding memory's ``since`` (its ``valid_from``),
    ``superseded_by`` its id, in the caller's transaction (a memory already superseded is left as it is)."""
    if by:
        params = [{"old_id": o, "new_id": n, "until": since[n], "gen": generation} for o, n in by.items()]
        conn.execute(SUPERSEDE, params)
