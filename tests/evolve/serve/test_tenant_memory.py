"""``TenantMemory.remember`` (``evolve mcp``): an outside agent's memories are written by ``mcp:<tenant>``, so
the trust policy can hold them back from every recall until an operator releases them (issue 40, item 3)."""

from __future__ import annotations

from pathlib import Path

from evolve.serve.tenant_memory import TenantMemory
from evolve.spec import RunSpec

ZURICH, MUNSTER = "Zürich-Nordhafen-Logistik-Lager-7", "Ärztekammer-Westfalen-Lippe-Münster"
QUESTION = "Wie lautet der Türcode des Lagers am Nordhafen?"


def tenant_memory(folder: Path, trust: str) -> TenantMemory:
    spec = RunSpec.model_validate({
        "environment": {"tasks": "unused.jsonl"}, "run": {"name": "Türcodes Pilot 2026", "database": f"sqlite:///{folder / 'm.db'}"},
        "embedder": {"name": "hash"}, "memory": {"trust": trust},
    })  # fmt: skip
    return TenantMemory(spec)


def test_remember_writes_as_the_tenant_over_mcp_and_quarantine_holds_it_until_released(tmp_path: Path) -> None:
    memory = tenant_memory(tmp_path, "quarantine")
    try:
        kept = memory.remember(ZURICH, QUESTION, success=True, what_worked="Vom Lageplan abgelesen: 4471.")
        memory.remember(MUNSTER, QUESTION, success=False, instead="Beim Pförtner nachfragen.")
        assert memory.recall(ZURICH, QUESTION)["memories"] == []
        held = {m.meta["writer"]: m for m in memory.store.quarantined()}
        assert set(held) == {f"mcp:{ZURICH}", f"mcp:{MUNSTER}"} and held[f"mcp:{ZURICH}"].id == kept["id"]
        assert memory.store.release(writer=f"mcp:{ZURICH}") == 1
        assert [m["id"] for m in memory.recall(ZURICH, QUESTION)["memories"]] == [kept["id"]]
        assert memory.recall(MUNSTER, QUESTION)["memories"] == []  # still held
    finally:
        memory.close()


def test_remember_under_open_trust_is_recalled_at_once(tmp_path: Path) -> None:
    memory = tenant_memory(tmp_path, "open")
    try:
        kept = memory.remember(ZURICH, QUESTION, success=True, what_worked="4471")
        assert [m["id"] for m in memory.recall(ZURICH, QUESTION)["memories"]] == [kept["id"]]
        assert memory.store.get(kept["id"], namespace=memory.namespaces(ZURICH).own).meta["writer"] == f"mcp:{ZURICH}"
    finally:
        memory.close()
