"""A spec names its files relative to itself: the tasks file and a SQLite database alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.spec import load_spec, resolve_database

FOLDER = Path("/srv/agents/Équipe support — nuit (fr)")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///runs/evolve.db", f"sqlite:///{FOLDER}/runs/evolve.db"),
        ("sqlite:///evolve.db?timeout=5", f"sqlite:///{FOLDER}/evolve.db?timeout=5"),
        ("sqlite+pysqlite:///../common/evolve.db", f"sqlite+pysqlite:///{FOLDER}/../common/evolve.db"),
        ("sqlite:////var/lib/evolve/evolve.db", "sqlite:////var/lib/evolve/evolve.db"),  # absolute: unchanged
        ("sqlite://", "sqlite://"),  # in memory
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("sqlite:///file:evolve.db?mode=ro&uri=true", "sqlite:///file:evolve.db?mode=ro&uri=true"),
        (
            "postgresql+psycopg://evolve:hunter2@db.internal/runs",
            "postgresql+psycopg://evolve:hunter2@db.internal/runs",
        ),
        (None, None),  # the default database: $EVOLVE_HOME/evolve.db
    ],
)
def test_a_relative_sqlite_path_is_relative_to_the_spec_folder(url: str | None, expected: str | None) -> None:
    assert resolve_database(url, FOLDER) == expected


def test_load_spec_puts_the_database_beside_the_spec_whatever_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "Équipe support — nuit (fr) 2025"
    folder.mkdir()
    spec = folder / "spec.toml"
    spec.write_text('[run]\ndatabase = "sqlite:///runs/evolve.db"\n\n[environment]\ntasks = "tasks.jsonl"\n')
    elsewhere = tmp_path / "somewhere else"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_spec(Path("..") / folder.name / "spec.toml")
    assert loaded.run.database == f"sqlite:///{folder.resolve()}/runs/evolve.db"
    assert loaded.resolve(loaded.environment.tasks) == folder.resolve() / "tasks.jsonl"  # as tasks always were


def test_memory_durability_full_reaches_the_store_s_sqlite_connection(tmp_path: Path) -> None:
    from evolve.build import build_store

    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[run]\nname = "durable run — nuit"\ndatabase = "sqlite:///evolve.db"\n\n[environment]\ntasks = "t.jsonl"\n\n'
        '[embedder]\nname = "hash"\n\n[memory]\ndurability = "full"\n'
    )
    store = build_store(load_spec(spec))
    assert store is not None
    with store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == 2  # FULL (NORMAL is 1)


def test_memory_recall_log_delay_reaches_the_store(tmp_path: Path) -> None:
    from evolve.build import build_store

    spec = tmp_path / "Équipe support — nuit (fr)" / "spec.toml"
    spec.parent.mkdir()
    spec.write_text(
        '[run]\nname = "group commit — nuit"\ndatabase = "sqlite:///evolve.db"\n\n[environment]\ntasks = "t.jsonl"\n\n'
        '[embedder]\nname = "hash"\n\n[memory]\nrecall_log_delay = 0.25\n'
    )
    store = build_store(load_spec(spec))
    assert store is not None
    with store:
        assert store.config.log_delay == 0.25


@pytest.mark.parametrize("keeps", ["feedback", "both", None])
def test_memory_failure_keeps_reaches_the_store(tmp_path: Path, keeps: str | None) -> None:
    from evolve.build import build_store
    from memory import WriteEntry

    spec = tmp_path / "Équipe support — nuit (fr)" / "spec.toml"
    spec.parent.mkdir()
    line = f'failure_keeps = "{keeps}"\n' if keeps else ""
    spec.write_text(f'[environment]\ntasks = "t.jsonl"\n\n[embedder]\nname = "hash"\n\n[memory]\n{line}')
    store = build_store(load_spec(spec))
    assert store is not None
    with store:
        assert store.config.failure_keeps == (keeps or "feedback")
        entry = WriteEntry(
            "Badge colour at Quartz?", trajectory="Answer given: blue", feedback="It is grey.", success=False
        )
        text = store.write_many([entry])[0].experience
    assert ("Answer given: blue" in text) == (keeps == "both") and "It is grey." in text


@pytest.mark.parametrize("text", ['[memory]\ndurability = "paranoid"\n', '[run]\nname = "codes\\u0000nul"\n',
                                  '[run]\nname = "two\\nlines"\n', '[memory]\nfailure_keeps = "answer"\n'])  # fmt: skip
def test_an_unknown_durability_or_a_control_character_in_a_run_name_is_refused(tmp_path: Path, text: str) -> None:
    from connectors import ConfigError

    spec = tmp_path / "spec.toml"
    spec.write_text(text + '\n[environment]\ntasks = "t.jsonl"\n' if "[run]" in text else text)
    with pytest.raises(ConfigError, match="durability|name|failure_keeps"):
        load_spec(spec)


def test_memory_trust_reaches_the_store_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    from connectors import ConfigError
    from evolve.build import build_store

    folder = tmp_path / "Équipe support — nuit (fr)"
    folder.mkdir()
    spec = folder / "spec.toml"
    head = '[environment]\ntasks = "t.jsonl"\n\n[embedder]\nname = "hash"\n\n[memory]\n'
    spec.write_text(head + 'trust = "quarantine"\ntrusted = ["run:*", "import:Übernahme 2025 *.jsonl"]\n')
    store = build_store(load_spec(spec))
    assert store is not None
    with store:
        assert (store.config.trust.mode, store.config.trust.trusted) == (
            "quarantine",
            ("run:*", "import:Übernahme 2025 *.jsonl"),
        )
        held = store.add("Türcode Nordhafen?", "9999", writer="tenant:Zürich Nordhafen Logistik GmbH (Lager 7)")
        assert store.quarantined() == [held] and store.items() == []
    spec.write_text(head + 'trust = "paranoid"\n')
    with pytest.raises(ConfigError, match="memory.trust: Input should be 'open', 'neutral' or 'quarantine'"):
        load_spec(spec)
    spec.write_text(head + 'trusted = ["tenat:*"]\n')
    with pytest.raises(ConfigError, match=r"memory.trusted: .*'tenat:\*'"):
        load_spec(spec)
