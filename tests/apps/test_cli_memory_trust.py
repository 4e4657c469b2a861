"""The defences from the command line (issue 40, item 3): ``evolve memory distrust|undo --writer``, ``quarantined``,
``release`` and ``import --writer`` work on an existing store without loading its embedder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main
from connectors import load_embedder
from memory import MemoryConfig, MemoryStore, TrustPolicy
from tests.apps.test_cli import exit_status

ZURICH = "tenant:Zürich Nordhafen Logistik GmbH (Lager 7)"
MUNSTER = "tenant:Ärztekammer Westfalen-Lippe — Münster"
NS = "Türcodes Pilot 2026 — Nordhafen/solver"
DUMP = "Übernahme Altbestand 2025.jsonl"


def open_store(folder: Path, trust: str = "open") -> MemoryStore:
    config = MemoryConfig(trust=TrustPolicy(mode=trust))  # type: ignore[arg-type]
    return MemoryStore(f"sqlite:///{folder / 'läufe.db'}", embedder=load_embedder("hash"), config=config)


def test_distrust_undo_quarantined_and_release_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(tmp_path, "quarantine") as store:
        bad = [
            m.id
            for m in store.add_many(
                [("Türcode Nordhafen?", "9999"), ("Türcode Süd?", "0000")], namespace=NS, writer=ZURICH
            )
        ]
        good = store.add("Türcode Nordhafen?", "4471", namespace=NS, writer=MUNSTER).id
        store.add("Türcode Ost?", "5555", namespace=NS, writer=f"mcp:{MUNSTER[7:]}")
        store.export(tmp_path / DUMP)
    db = ["--db", f"sqlite:///{tmp_path / 'läufe.db'}"]
    capsys.readouterr()

    assert main(["memory", "distrust", "--writer", ZURICH, *db]) == 0
    assert f"{ZURICH}: removed 2 memories" in capsys.readouterr().out
    assert main(["memory", "history", *db]) == 0
    assert capsys.readouterr().out.count(f"distrusted: {ZURICH}") == 2
    assert main(["memory", "distrust", "--writer", ZURICH, *db]) == 0
    assert "nothing to distrust" in capsys.readouterr().out
    assert main(["memory", "undo", "--writer", ZURICH, *db]) == 0
    assert f"{ZURICH}: restored 2 memories" in capsys.readouterr().out
    assert main(["memory", "distrust", "--writer", MUNSTER, "--reset", "--namespace", NS, *db]) == 0
    assert "nothing to distrust" in capsys.readouterr().out  # its memory is at Q_init already

    assert main(["memory", "quarantined", *db]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert f"mcp:{MUNSTER[7:]}" in line and "Türcode Ost?" in line
    assert main(["memory", "release", "--writer", f"mcp:{MUNSTER[7:]}", *db]) == 0
    assert "released 1 memories" in capsys.readouterr().out
    with open_store(tmp_path) as store:
        assert {m.id for m in store.items(NS)} >= {*bad, good} and len(store.items(NS)) == 4


def test_import_with_a_writer_stamps_every_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for folder in ("quelle", "ziel"):
        (tmp_path / folder).mkdir()
    with open_store(tmp_path / "quelle") as source:
        source.add("Türcode Nordhafen?", "4471", namespace=NS, writer=ZURICH)
        source.export(tmp_path / DUMP)
    db = ["--db", f"sqlite:///{tmp_path / 'ziel' / 'läufe.db'}", "--embedder", "hash"]
    assert main(["memory", "import", str(tmp_path / DUMP), "--writer", f"import:{DUMP}", *db]) == 0
    with open_store(tmp_path / "ziel") as store:
        [item] = store.items()
    assert (item.meta["writer"], item.meta["claimed_writer"]) == (f"import:{DUMP}", ZURICH)
    assert json.loads((tmp_path / DUMP).read_text(encoding="utf-8").splitlines()[1])["meta"]["writer"] == ZURICH


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["memory", "distrust"], "needs --writer KIND:NAME"),
        (["memory", "release"], "needs --writer KIND:NAME"),
        (["memory", "distrust", "--writer", "robot:R2"], "must be '<kind>:<name>' with kind one of run, tenant"),
        (["memory", "distrust", "--writer", "tenant:niemand"], f"known writers include {ZURICH!r}"),
        (["memory", "undo", "some-id", "--writer", ZURICH], "one of the two"),
        (["memory", "stats", "--writer", ZURICH], "does not take --writer"),
        (["memory", "prune", "--capacity", "5", "--reset"], "does not take --reset"),
    ],
)
def test_bad_defence_commands_say_what_was_expected(
    tmp_path: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(tmp_path) as store:
        store.add("Türcode Nordhafen?", "4471", namespace=NS, writer=ZURICH)
    assert exit_status([*argv, "--db", f"sqlite:///{tmp_path / 'läufe.db'}"]) == 2  # refused by the parser or after
    assert says in capsys.readouterr().err
