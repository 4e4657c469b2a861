"""What you train is what you serve: the bundled spec (SmolLM2 + MiniLM) trained by ``evolve run``, then
served to two tenants with the real ``openai`` SDK. Both recall the trained memories; one tenant's ratings
change its own ranking and not the other's, nor the trained memories themselves; ``evolve job --tenant``
learns from them.

Run and tenant names are as users write them: 30+ characters, spaces, accents, a dash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from apps.cli import main
from memory import MemoryStore
from tests.support.serve import serving

BUNDLED = Path(__file__).resolve().parents[2] / "data" / "facility_codes.toml"
RUN = "Acme facilities — night shift codes"  # 35 characters
ALICE = "Nordlicht-Logistik_Filiale-Zürich"  # 33
BOB = "Ärztekammer-Westfalen-Lippe-Münster"  # 35
KEYS = {"sk-nordlicht-3f9c2a7e": ALICE, "sk-aerztekammer-b81d4e0f": BOB}
KEY_OF = {tenant: key for key, tenant in KEYS.items()}
QUESTION = "What is the door code of the Harbor warehouse?"
SHARED, OWN_A, OWN_B = f"{RUN}/solver", f"{RUN}@{ALICE}/solver", f"{RUN}@{BOB}/solver"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled spec, renamed and pointed at a temporary database, after one round of ``evolve run``."""
    folder = tmp_path_factory.mktemp("shared serve")
    text = BUNDLED.read_text()
    text = text.replace('name = "facility-codes"', f'name = "{RUN}"')
    text = text.replace('database = "sqlite:///runs/evolve.db"', f'database = "sqlite:///{folder / "runs.db"}"')
    text = text.replace('tasks = "facility_codes.jsonl"', f'tasks = "{BUNDLED.parent / "facility_codes.jsonl"}"')
    assert RUN in text and str(folder) in text and str(BUNDLED.parent) in text
    spec = folder / "spec.toml"
    spec.write_text(text)
    assert main(["run", str(spec), "--rounds", "1", "--quiet"]) == 0
    return spec


def ask(url: str, tenant: str) -> tuple[str, str]:
    """One answer through the SDK: its response id and the recall id in Evolve's extension field."""
    client = openai.OpenAI(base_url=url, api_key=KEY_OF[tenant], max_retries=0)
    completion = client.chat.completions.create(model=RUN, messages=[{"role": "user", "content": QUESTION}])
    (recall_id,) = completion.model_extra["evolve"]["recall_ids"]  # type: ignore[index]
    return completion.id, recall_id


def rate(url: str, tenant: str, response_id: str, score: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEY_OF[tenant]}"}
    body = {"response_id": response_id, "score": score, "comment": "That code did not open the door."}
    response = httpx.post(f"{url}/feedback", content=json.dumps(body), headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def ranking(store: MemoryStore, recall_id: str, namespace: str) -> list[tuple[str, float, str]]:
    """The recall's pool as phase B ranked it: (memory id, the Q it ranked by, source), best first."""
    pool = [c for c in store.explain(recall_id, namespace=namespace)["candidates"] if c["in_pool"]]
    return [(c["id"], c["q"], c["source"]) for c in sorted(pool, key=lambda c: -c["score"])]


def test_tenants_are_served_the_trained_memory_and_one_tenants_ratings_move_only_its_ranking(
    trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(trained, KEYS) as served:
        store = served.deployment.store
        assert store is not None
        stored = {m.id: (m.q, m.visits) for m in store.items(SHARED)}
        assert stored  # evolve run wrote the trained memories

        _, first_a = ask(served.url, ALICE)
        _, first_b = ask(served.url, BOB)
        before_a, before_b = ranking(store, first_a, OWN_A), ranking(store, first_b, OWN_B)
        assert {source for _, _, source in before_a} == {SHARED}  # both recall what evolve run trained
        assert before_a == before_b
        top = before_a[0][0]

        for _ in range(3):  # alice's users say the recalled code was wrong, three times
            response_id, _ = ask(served.url, ALICE)
            assert rate(served.url, ALICE, response_id, 0.0)["reinforced"] == 1  # k2 = 1 in the bundled spec
        _, after_a = ask(served.url, ALICE)
        _, after_b = ask(served.url, BOB)

        q_a = {i: q for i, q, _ in ranking(store, after_a, OWN_A)}
        assert q_a[top] < stored[top][0]  # alice ranks the memory she rated down lower
        assert ranking(store, after_a, OWN_A) != before_a
        assert ranking(store, after_b, OWN_B) == before_b  # bob's ranking did not move
        assert {m.id: (m.q, m.visits) for m in store.items(SHARED)} == stored  # nor the trained memories
        assert store.items(OWN_B) == []

    capsys.readouterr()
    assert main(["job", str(trained), "--tenant", ALICE, "--once", "--quiet"]) == 0
    assert f"ran {RUN}@{ALICE} round 1" in capsys.readouterr().out
    with MemoryStore(f"sqlite:///{trained.parent / 'runs.db'}", embedder=served.deployment.store.embedder) as store:
        learned = [m for m in store.items(OWN_A) if "feedback" in (m.meta.get("provenance") or {})]
        assert len(learned) == 3  # the job wrote alice's three rated answers into her memory
        assert all("did not open the door" in m.experience for m in learned)
        assert store.items(OWN_B) == [] and {m.id: (m.q, m.visits) for m in store.items(SHARED)} == stored
