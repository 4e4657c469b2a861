"""The run log's cheaper writes and reads (issue 25, item 4) keep what the loop relies on."""

from __future__ import annotations

from pathlib import Path

from connectors import HashEmbedder
from evolve.episode import Episode
from evolve.run_log import WAL_AUTOCHECKPOINT_PAGES, RunLog
from memory import MemoryStore

RUN_A = "Zürich-Nordhafen-Logistik-Team-07-Nachtschicht"
RUN_B = "Göteborg-Hamnen-Lagerstyrning-Team-12-Kvällspass"


def batch(run: str, round_: int, rewards: list[float]) -> list[Episode]:
    return [
        Episode(
            f"{run}:{round_}:Ladebucht-Süd-{i:02d}",
            f"Ladebucht-Süd-{i:02d}",
            f"Welcher Zugangscode gilt für Ladebucht Süd {i}?",
            (),
            "4711",
            reward,
            "richtig" if reward >= 1.0 else "falsch",
            round_,
        )
        for i, reward in enumerate(rewards)
    ]


def test_marking_learned_scores_and_solved_share_stay_per_run(tmp_path: Path) -> None:
    store = MemoryStore(f"sqlite:///{tmp_path / 'lager.db'}", embedder=HashEmbedder())
    a, b = RunLog(store.engine, RUN_A), RunLog(store.engine, RUN_B)
    first = batch(RUN_A, 1, [1.0, 0.0])
    second = [
        Episode(f"{RUN_A}:1:Tor-Nord", "Tor-Nord", "Code für Tor Nord?", (), "", 0.0, "", 1, "Zeitüberschreitung")
    ]
    a.record_episodes(first)
    a.record_episodes(second, learned=[e.id for e in first])  # the previous batch is marked in the same commit
    b.record_episodes(batch(RUN_B, 1, [1.0, 1.0, 1.0]))
    assert a.unlearned(1) == [second[0].id]
    a.mark_learned([second[0].id])
    assert a.unlearned(1) == [] and len(b.unlearned(1)) == 3
    scores = sorted(a.round_scores(1), key=repr)
    assert scores == [(0.0, "Zeitüberschreitung", 0, 0.0), (0.0, None, 0, 0.0), (1.0, None, 0, 0.0)]
    a.record_episodes(batch(RUN_A, 2, [0.0, 1.0]))
    assert a.solved_share(1) == 1 / 3 and a.solved_share(2) == 2 / 3  # distinct tasks, up to the round
    assert b.solved_share(1) == 1.0
    store.close()


def test_run_log_commits_leave_the_checkpoint_to_the_memory_store(tmp_path: Path) -> None:
    # At SQLite's default of 1,000 pages, the run log's small commits would checkpoint (and fsync) the
    # memory store's writes to the shared file, every batch once the log has grown.
    store = MemoryStore(f"sqlite:///{tmp_path / 'lager.db'}", embedder=HashEmbedder())
    log = RunLog(store.engine, RUN_A)
    log.record_episodes(batch(RUN_A, 1, [1.0]))
    with store.engine.connect() as conn:  # the pool hands back the connection the run log wrote on
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == WAL_AUTOCHECKPOINT_PAGES
    store.close()
