"""Cross-tenant attempts by id: tenant A knows tenant B's memory and recall ids and tries every by-id call.

Memory ids are not secret (callers choose them, systems derive them from names), so every call that
takes an id must be bound to a namespace: reading, explaining, removing, reinforcing, and writing or
importing under an id B already holds. An attempt *succeeded* when the call returned without an error
or anything of B's changed (its memories' texts, Q, visits, or its recall log's feedback).

``by_id_probe(url)`` runs every attempt on a fresh store at ``url``; the tests assert each attempt on
SQLite and PostgreSQL, and ``bench.reliability_security`` reports the counts.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.embedders import HashEmbedder
from connectors.errors import EvolveError
from memory import MemoryStore, Recall, Reinforcement, WriteEntry

ALICE = "tenant «Alice» — north harbour operations/solver"
BOB = "tenant «Bob» — south depot night shift/solver"


@dataclass
class Scene:
    """Two tenants' memories in one store, and what alice (the attacker) knows of bob's."""

    store: MemoryStore
    bob_ids: list[str]
    bob_recall: Recall
    alice_recall: Recall
    folder: Path


@dataclass
class Outcome:
    """What each attempt did: the error it raised (None: it went through) and whether bob's state changed."""

    attempts: dict[str, str | None] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> list[str]:
        return [name for name, error in self.attempts.items() if error is None] + self.changed


def bob_state(store: MemoryStore) -> str:
    """Everything of bob's an attack could change: memories, Q, visits, and feedback on his recalls."""
    items = [(i.id, i.intent, i.experience, i.q, i.visits, dict(i.meta)) for i in store.items(BOB)]
    return json.dumps(items, sort_keys=True, default=str)


def scene(store: MemoryStore, folder: Path) -> Scene:
    bob_ids = [store.add(f"door code of the south depot {i}", f"bob's secret {i}", namespace=BOB).id for i in range(3)]
    store.add("door code of the north harbour", "alice's own lesson", namespace=ALICE)
    bob_recall = store.retrieve("door code of the south depot", namespace=BOB)
    alice_recall = store.retrieve("door code of the north harbour", namespace=ALICE)
    return Scene(store, bob_ids, bob_recall, alice_recall, folder)


def forged(recall: Recall, *, id: str, namespace: str) -> Recall:
    """A caller-built ``Recall`` listing ``recall``'s memories under another id or namespace."""
    return Recall(id, namespace, recall.query, recall.items, recall.scores, recall.details,
                  recall.pool_size, recall.filtered, recall.explored)  # fmt: skip


def import_file(s: Scene) -> Path:
    """An export-format file claiming one of bob's ids for a memory in alice's namespace."""
    path = s.folder / "claim.jsonl"
    header = {"format": "evolve.memory", "version": 1, "embedder": "other", "dim": 16}
    record = {"id": s.bob_ids[0], "namespace": ALICE, "intent": "x", "experience": "y", "q": 0.0, "created_at": 1.0}
    path.write_text(json.dumps(header) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    return path


ATTEMPTS: dict[str, Callable[[Scene], Any]] = {
    "get bob's memory from alice's namespace": lambda s: s.store.get(s.bob_ids[0], namespace=ALICE),
    "get bob's memory without a namespace": lambda s: s.store.get(s.bob_ids[0]),
    "explain bob's recall from alice's namespace": lambda s: s.store.explain(s.bob_recall.id, namespace=ALICE),
    "remove bob's memories from alice's namespace": lambda s: s.store.remove(s.bob_ids, namespace=ALICE) or None,
    "reinforce bob's recall id in alice's namespace": lambda s: s.store.reinforce(
        s.bob_recall.id, 1.0, namespace=ALICE
    ),
    "reinforce bob's recall id without a namespace": lambda s: s.store.reinforce(s.bob_recall.id, 1.0),
    "reinforce bob's Recall object as alice": lambda s: s.store.reinforce(s.bob_recall, 1.0, namespace=ALICE),
    "reinforce alice's logged recall listing bob's memories": lambda s: s.store.reinforce(
        forged(s.bob_recall, id=s.alice_recall.id, namespace=ALICE), 1.0
    ),
    "reinforce an unlogged recall listing bob's memories": lambda s: s.store.reinforce(
        forged(s.bob_recall, id="made-up-recall", namespace=ALICE), 1.0
    ),
    "reinforce bob's recall id relabelled as alice's": lambda s: s.store.reinforce(
        forged(s.bob_recall, id=s.bob_recall.id, namespace=ALICE), 1.0
    ),
    "reinforce_many naming bob's recall in alice's namespace": lambda s: s.store.reinforce_many(
        [Reinforcement(s.bob_recall.id, 1.0, "attack-1", ALICE)]
    ),
    "add under bob's id in alice's namespace": lambda s: s.store.add("x", "y", namespace=ALICE, id=s.bob_ids[0]),
    "write under bob's id in alice's namespace": lambda s: s.store.write(
        "x", trajectory="t", feedback="f", success=True, namespace=ALICE, id=s.bob_ids[1]
    ),
    "write_many under bob's id in alice's namespace": lambda s: s.store.write_many(
        [WriteEntry("x", trajectory="t", feedback="f", success=True, namespace=ALICE, id=s.bob_ids[2])]
    ),
    "import a file claiming bob's id for alice": lambda s: s.store.import_(import_file(s)),
}


def attempt(s: Scene, name: str) -> tuple[str | None, bool]:
    """One attempt: the error it raised (None when it went through) and whether bob's state changed."""
    before = bob_state(s.store)
    try:
        result = ATTEMPTS[name](s)
        error = None if result is not None else "returned nothing"
    except EvolveError as e:
        error = f"{type(e).__name__}: {e}"
    return error, bob_state(s.store) != before


def by_id_probe(url: str, *, rounds: int = 1) -> Outcome:
    """Every attempt, ``rounds`` times, on a fresh store at ``url``."""
    out = Outcome()
    with tempfile.TemporaryDirectory() as folder, MemoryStore(url, embedder=HashEmbedder(dim=16)) as store:
        s = scene(store, Path(folder))
        for r in range(rounds):
            for name in ATTEMPTS:
                error, changed = attempt(s, name)
                out.attempts[f"{name} #{r}" if rounds > 1 else name] = error
                if changed:
                    out.changed.append(name)
    return out
