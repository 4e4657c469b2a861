"""Every by-id call is bound to a namespace: knowing another tenant's ids reads, explains, removes,
reinforces and overwrites nothing of theirs (``tests.reliability.tenant_probes``), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from connectors.errors import StoreError
from memory.store import MemoryStore
from tests.reliability.tenant_probes import ATTEMPTS, BOB, attempt, forged, scene

Open = Callable[..., MemoryStore]


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_a_cross_tenant_call_by_id_is_refused_and_changes_nothing(
    store: MemoryStore, tmp_path: Path, name: str
) -> None:
    s = scene(store, tmp_path)
    error, changed = attempt(s, name)
    assert error is not None, f"{name}: went through"
    assert not changed, f"{name}: changed bob's memories"
    assert bob_s_secret_not_in(error)


def bob_s_secret_not_in(error: str) -> bool:
    return "bob's secret" not in error  # a refusal quotes no text of the other tenant


def test_the_owner_uses_the_same_ids_in_its_own_namespace(store: MemoryStore, tmp_path: Path) -> None:
    s = scene(store, tmp_path)
    assert store.get(s.bob_ids[0], namespace=BOB).experience == "bob's secret 0"
    assert store.explain(s.bob_recall.id, namespace=BOB)["selected"] == list(s.bob_recall.ids)
    assert store.reinforce(s.bob_recall.id, 1.0, namespace=BOB) == len(s.bob_recall)
    assert store.reinforce(s.bob_recall, 1.0) == len(s.bob_recall)  # a Recall carries its namespace
    assert store.add("x", "y", namespace=BOB, id=s.bob_ids[0]).experience == "bob's secret 0"  # idempotent
    assert store.remove([s.bob_ids[2]], namespace=BOB) == 1


def test_unknown_and_foreign_ids_get_the_same_answer(store: MemoryStore, tmp_path: Path) -> None:
    """A refusal does not tell the caller whether the id exists in another namespace (for reads)."""
    s = scene(store, tmp_path)
    errors = []
    for memory_id in (s.bob_ids[0], "no-such-memory-id"):
        with pytest.raises(StoreError) as e:
            store.get(memory_id, namespace="someone else")
        errors.append(str(e.value).replace(memory_id, "<id>"))
    assert errors[0] == errors[1]


def test_a_recall_that_does_not_match_its_log_is_refused(store: MemoryStore, tmp_path: Path) -> None:
    s = scene(store, tmp_path)
    trimmed = forged(s.bob_recall, id=s.bob_recall.id, namespace=BOB)
    shorter = type(trimmed)(trimmed.id, BOB, trimmed.query, trimmed.items[:1], trimmed.scores[:1], (), 1, 0, False)
    with pytest.raises(StoreError, match="the log selected"):
        store.reinforce(shorter, 1.0)
    assert all(i.visits == 0 for i in store.items(BOB))
