"""With the real MiniLM embedder, a paraphrase recalls the memory written for the original task."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.config import MemoryConfig, RetrievalConfig
from memory.store import MemoryStore

MEMORIES = [
    ("How do I reverse a linked list in place?", "Walk the list keeping prev/current pointers and flip each next."),
    ("Convert a temperature from Celsius to Fahrenheit", "F = C * 9/5 + 32"),
    ("Find the shortest path between two cities on a road map", "Run Dijkstra from the start city."),
    ("Remove duplicate rows from a spreadsheet", "Sort by the key columns, then drop adjacent duplicates."),
    ("Book a table for four at a restaurant tonight", "Call before 5pm; mention the party size first."),
]


@pytest.mark.slow
def test_a_paraphrase_recalls_the_right_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    from connectors.embedders import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    config = MemoryConfig(retrieval=RetrievalConfig(k1=5, k2=1, delta=0.3))
    with MemoryStore(f"sqlite:///{tmp_path}/minilm.db", embedder=embedder, config=config) as store:
        ids = {intent: store.add(intent, experience).id for intent, experience in MEMORIES}
        paraphrases = {
            "What's the way to flip a singly linked list without extra memory?": MEMORIES[0][0],
            "turn degrees C into degrees F": MEMORIES[1][0],
            "quickest route from one town to another": MEMORIES[2][0],
            "reserve a dinner spot for 4 people this evening": MEMORIES[4][0],
        }
        for query, intent in paraphrases.items():
            recall = store.retrieve(query)
            assert recall.ids == (ids[intent],), (query, [i.intent for i in recall.items])
        assert not store.retrieve("the orbital period of Jupiter's moons")  # nothing similar enough
