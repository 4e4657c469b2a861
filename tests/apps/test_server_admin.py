"""`evolve serve`'s operator routes (issue 40): a live server driven with httpx, two tenants served beside the
operator. Distrust hides a tenant's memories from its recall and undo brings them back; release lets a held
memory in; a tenant's key opens no operator route, an operator key no tenant's, and without operator keys the
routes are off and say how to turn them on; bad input is a 400 naming what was expected."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from apps.cli import main
from connectors import ConfigError
from evolve.serve.protocols.keys import load_admin_keys
from memory import MemoryStore
from tests.support.serve import QUESTION, Served, serving, write_serve_spec

RUN = "Türcodes Pilot 2026 — Nordhafen"
ZURICH = "Zürich-Nordhafen-Logistik-Team-07"
OSAKA = "Ōsaka-Hafenbetrieb-Disposition-Süd-12"
LODZ = "Łódź-Kontraktlogistik-Nachtschicht-03"
KEYS = {"sk-zurich-7c2e91aa": ZURICH, "sk-osaka-4d0b63bb": OSAKA, "sk-lodz-91aa07cc": LODZ}
KEY_OF = {tenant: key for key, tenant in KEYS.items()}
OPERATOR = "sk-ops-b81e-22f4-9d0c"
DUMP = "import:Übernahme Altbestand 2025 (Lager 7).jsonl"
ROUTES = [
    ("GET", "/admin/memory/quarantined", None),
    ("POST", "/admin/memory/distrust", {"writer": f"tenant:{ZURICH}"}),
    ("POST", "/admin/memory/undo", {"writer": f"tenant:{ZURICH}"}),
    ("POST", "/admin/memory/release", {"writer": DUMP}),
]


def write_spec(folder: Path) -> Path:
    """The served team of ``write_serve_spec`` under a run name with spaces, holding untrusted writers' memories."""
    spec = write_serve_spec(folder)
    text = spec.read_text().replace('name = "codes"', f'name = "{RUN}"')
    spec.write_text(text.replace("[memory]\n", '[memory]\ntrust = "quarantine"\n'))
    return spec


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(write_spec(tmp_path_factory.mktemp("admin")), KEYS, admin_keys=[OPERATOR]) as live:
        yield live


def call(served: Served, method: str, path: str, body: Any = None, *, key: str | None = OPERATOR,
         params: dict[str, str] | None = None) -> httpx.Response:  # fmt: skip
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    content = body if isinstance(body, str) or body is None else json.dumps(body)
    return httpx.request(method, f"{served.url}{path}", content=content, params=params, headers=headers, timeout=30)


def error_of(response: httpx.Response, status: int, code: str | None = None) -> str:
    """The message of an error in the server's usual shape; the status and code must be these."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert code is None or error["code"] == code, error
    assert "Traceback" not in response.text and OPERATOR not in response.text
    return str(error["message"])


def store_of(served: Served) -> MemoryStore:
    assert served.deployment.store is not None
    return served.deployment.store


def namespace(tenant: str) -> str:
    return f"{RUN}@{tenant}/solver"


def recalled(served: Served, tenant: str) -> set[str]:
    """The memories the tenant's answer to the question recalled (its recall, ``evolve.recall_ids``, explained)."""
    body = {"model": RUN, "messages": [{"role": "user", "content": QUESTION}]}
    response = call(served, "POST", "/chat/completions", body, key=KEY_OF[tenant])
    assert response.status_code == 200, response.text
    (recall_id,) = response.json()["evolve"]["recall_ids"]
    return set(store_of(served).explain(recall_id, namespace=namespace(tenant))["selected"])


# ---- what the operator does --------------------------------------------------------------------------------


def test_distrust_hides_a_tenants_memory_from_its_recall_and_undo_brings_it_back(served: Served) -> None:
    store = store_of(served)
    bad = store.add(QUESTION, "The door code is 9999.", namespace=namespace(ZURICH), writer=f"tenant:{ZURICH}").id
    other = store.add(QUESTION, "The door code is 4471.", namespace=namespace(OSAKA), writer=f"tenant:{OSAKA}").id
    assert bad in recalled(served, ZURICH) and other in recalled(served, OSAKA)

    done = call(served, "POST", "/admin/memory/distrust", {"writer": f"tenant:{ZURICH}"})
    assert done.status_code == 200, done.text
    assert done.json() == {"object": "memory.distrust", "writer": f"tenant:{ZURICH}", "action": "remove",
                           "removed": 1, "reset": 0, "dropped": 0, "total": 1}  # fmt: skip
    assert bad not in recalled(served, ZURICH)
    assert other in recalled(served, OSAKA)  # another tenant's memories are not touched
    again = call(served, "POST", "/admin/memory/distrust", {"writer": f"tenant:{ZURICH}", "action": "remove"})
    assert again.json()["total"] == 0  # twice is a no-op

    undone = call(served, "POST", "/admin/memory/undo", {"writer": f"tenant:{ZURICH}", "namespace": namespace(ZURICH)})
    assert undone.status_code == 200, undone.text
    assert undone.json() | {"object": None} == {"object": None, "writer": f"tenant:{ZURICH}", "action": "undo",
                                                "removed": 1, "reset": 0, "dropped": 0, "total": 1}  # fmt: skip
    assert bad in recalled(served, ZURICH)


def test_a_reset_sets_a_writers_q_back_and_undo_gives_it_back(served: Served) -> None:
    store = store_of(served)
    writer = f"tenant:{OSAKA}"
    rated = store.add("Alarm code of the Ōsaka cold store?", "It is 1234.", namespace=namespace(OSAKA), q=0.9,
                      writer=writer)  # fmt: skip
    reset = call(served, "POST", "/admin/memory/distrust", {"writer": writer, "action": "reset"}).json()
    assert (reset["action"], reset["reset"], reset["removed"]) == ("reset", 1, 0)
    assert store.get(rated.id, namespace=namespace(OSAKA)).q == store.config.q_init
    assert call(served, "POST", "/admin/memory/undo", {"writer": writer}).json()["reset"] == 1
    assert store.get(rated.id, namespace=namespace(OSAKA)).q == pytest.approx(0.9)


def test_release_lets_a_held_memory_into_the_tenants_recall(served: Served) -> None:
    held = store_of(served).add(QUESTION, "Übernommen: 4471.", namespace=namespace(LODZ), writer=DUMP).id
    assert held not in recalled(served, LODZ)  # the trust policy holds an import back

    listed = call(served, "GET", "/admin/memory/quarantined", params={"writer": DUMP})
    assert listed.status_code == 200, listed.text
    [entry] = listed.json()["data"]
    assert entry | {"created_at": 0} == {"id": held, "namespace": namespace(LODZ), "writer": DUMP, "intent": QUESTION,
                                         "experience": "Übernommen: 4471.", "kind": "episode", "created_at": 0}  # fmt: skip
    by_namespace = call(served, "GET", "/admin/memory/quarantined", params={"namespace": namespace(LODZ)}).json()
    assert [e["id"] for e in by_namespace["data"]] == [held]

    released = call(served, "POST", "/admin/memory/release", {"ids": [held], "namespace": namespace(LODZ)})
    assert released.json() == {"object": "memory.release", "released": 1}
    assert held in recalled(served, LODZ)
    assert call(served, "GET", "/admin/memory/quarantined", params={"writer": DUMP}).json()["data"] == []
    assert call(served, "POST", "/admin/memory/release", {"writer": DUMP}).json()["released"] == 0


# ---- who may ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_a_tenants_key_opens_no_operator_route(served: Served, method: str, path: str, body: Any) -> None:
    kept = store_of(served).add(QUESTION, "Lager 7: 4471.", namespace=namespace(ZURICH), writer=f"tenant:{ZURICH}")
    message = error_of(call(served, method, path, body, key=KEY_OF[ZURICH]), 403, "not_operator")
    assert "a tenant's API key does not open the operator routes" in message
    error_of(call(served, method, path, body, key=None), 401, "invalid_api_key")
    error_of(call(served, method, path, body, key=OPERATOR + "x"), 401, "invalid_api_key")
    assert store_of(served).get(kept.id, namespace=namespace(ZURICH)).id == kept.id  # nothing was distrusted


def test_an_operator_key_is_no_tenants(served: Served) -> None:
    body = {"model": RUN, "messages": [{"role": "user", "content": QUESTION}]}
    message = error_of(call(served, "POST", "/chat/completions", body), 403, "operator_key")
    assert "an operator key is no tenant's" in message
    error_of(call(served, "GET", "/models"), 403, "operator_key")
    error_of(call(served, "POST", "/feedback", {"response_id": "chatcmpl-x", "score": 1}), 403, "operator_key")


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_without_an_operator_key_the_routes_are_off_and_say_how_to_turn_them_on(
    tmp_path: Path, method: str, path: str, body: Any
) -> None:
    with serving(write_spec(tmp_path), KEYS) as live:
        store = store_of(live)
        kept = store.add(QUESTION, "Lager 7: 4471.", namespace=namespace(ZURICH), writer=f"tenant:{ZURICH}")
        for key in (None, KEY_OF[ZURICH], OPERATOR):
            message = error_of(call(live, method, path, body, key=key), 403, "admin_disabled")
            assert "the operator routes are off" in message and "--admin-key KEY" in message
            assert "$EVOLVE_ADMIN_KEYS" in message
        assert kept.id in recalled(live, ZURICH)


# ---- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("distrust", {"writer": "robot:R2-D2"}, "writer: writer must be '<kind>:<name>' with kind one of"),
        ("distrust", {"writer": "tenant:Niemand-Unbekannt-Logistik-GmbH"}, "no memory of this store was written by"),
        ("distrust", {"writer": f"tenant:{ZURICH}", "action": "delete"}, "action: Input should be 'remove' or 'reset'"),
        (
            "distrust",
            {"writer": f"tenant:{ZURICH}", "tenant": ZURICH},
            "tenant: unknown field: this takes only writer, namespace, action",
        ),
        ("distrust", {}, "writer: Field required"),
        ("distrust", [f"tenant:{ZURICH}"], "body: Input should be a valid dictionary"),
        ("undo", {"writer": 7}, "writer: Input should be a valid string"),
        ("undo", {"writer": f"tenant:{ZURICH}", "action": "reset"}, "action: unknown field: this takes only writer"),
        ("release", {}, "say which held memories to release: writer, ids and/or namespace"),
        ("release", {"ids": []}, "ids: List should have at least 1 item"),
        ("release", {"namespace": ""}, "namespace: String should have at least 1 character"),
    ],
)
def test_bad_operator_input_is_a_400_that_names_what_was_expected(
    served: Served, path: str, body: Any, says: str
) -> None:
    assert says in error_of(call(served, "POST", f"/admin/memory/{path}", body), 400)


def test_a_bad_body_or_query_is_a_400_too(served: Served) -> None:
    error_of(call(served, "POST", "/admin/memory/distrust", "{writer: tenant"), 400, "invalid_json")
    bad_writer = call(served, "GET", "/admin/memory/quarantined", params={"writer": "tenant:"})
    assert "writer must be '<kind>:<name>'" in error_of(bad_writer, 400)
    unknown = call(served, "GET", "/admin/memory/quarantined", params={"tenant": ZURICH})
    assert "tenant: unknown field: this takes only namespace, writer" in error_of(unknown, 400)
    known = error_of(call(served, "POST", "/admin/memory/undo", {"writer": "mcp:Niemand"}), 400)
    assert "known writers include" in known and f"'tenant:{ZURICH}'" in known


# ---- the operator's keys ----------------------------------------------------------------------------------------


def test_operator_keys_come_from_the_keys_file_the_environment_and_flags(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[keys]\n"sk-zurich-7c2e91aa" = "{ZURICH}"\n\n[admin]\nkeys = ["sk-ops-file-1"]\n')
    found = load_admin_keys(tenants=KEYS, file=keys, keys=["sk-ops-flag-3", "sk-ops-file-1"], env=" sk-ops-env-2, ,")
    assert found == ("sk-ops-file-1", "sk-ops-env-2", "sk-ops-flag-3")
    assert load_admin_keys(tenants=KEYS) == ()  # none: the routes are off
    keys.write_text(f'[keys]\n"sk-zurich-7c2e91aa" = "{ZURICH}"\n')
    assert load_admin_keys(tenants=KEYS, file=keys) == ()


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('keys = ["sk-zurich-7c2e91aa"]', f"is also the API key of tenant {ZURICH!r}"),
        ('keys = ["sk ops spaced"]', "operator key #1 must be 1-512 characters without spaces"),
        ('keys = "sk-ops-not-a-list"', 'the [admin] table must hold only keys = ["KEY", ...]'),
        ('key = ["sk-ops-typo"]', 'the [admin] table must hold only keys = ["KEY", ...]'),
    ],
)
def test_a_bad_operator_key_in_the_keys_file_is_refused_without_echoing_it(
    tmp_path: Path, table: str, says: str
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[keys]\n"sk-zurich-7c2e91aa" = "{ZURICH}"\n\n[admin]\n{table}\n')
    with pytest.raises(ConfigError) as caught:
        load_admin_keys(tenants=KEYS, file=keys)
    assert says in str(caught.value) and "sk-ops" not in str(caught.value) and "sk-zurich" not in str(caught.value)


def test_evolve_serve_refuses_an_operator_key_that_is_a_tenants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVOLVE_API_KEYS", raising=False)
    spec = str(write_spec(tmp_path))
    assert main(["serve", spec, "--port", "0", "--key", f"sk-zurich-7c2e91aa={ZURICH}",
                 "--admin-key", "sk-zurich-7c2e91aa"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert f"--admin-key: operator key #1 is also the API key of tenant {ZURICH!r}" in err
    monkeypatch.setenv("EVOLVE_ADMIN_KEYS", "sk ops")
    assert main(["serve", spec, "--port", "0", "--key", f"sk-zurich-7c2e91aa={ZURICH}"]) == 2
    assert "$EVOLVE_ADMIN_KEYS: operator key #1 must be 1-512 characters" in capsys.readouterr().err
