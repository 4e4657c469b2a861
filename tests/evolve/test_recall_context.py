"""The loop recalls for each episode's task: every logged recall names its task, and a spec's
``[memory] context_q`` reaches the store's recall settings."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from connectors import HashEmbedder, ScriptedChat
from connectors.chat import ChatClient
from evolve import Agent, Evolver, MemoryView, Task, Team, paraphrase_schedule
from evolve.build import memory_config
from evolve.spec import load_spec
from memory import MemoryConfig, MemoryStore, RetrievalConfig
from memory.storage.schema import recalls
from tests.support.copying_model import copying_reply

NAMES = ["Quartz", "Quartzite", "Ash", "Ashford"]
TASKS = [
    Task(
        id=f"badge {name} — visitor gate Ünïcode task id",
        prompt=f"Which code opens the {name} visitor gate?",
        answer=str(4000 + i),
        meta={"paraphrases": [f"{name} visitor gate: which code?"]},
    )
    for i, name in enumerate(NAMES)
]


def test_every_recall_of_the_loop_names_the_task_it_was_for(tmp_path: Path) -> None:
    config = MemoryConfig(retrieval=RetrievalConfig(k1=10, k2=1, delta=0.0, context_q=True))
    with MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashEmbedder(), config=config) as store:
        agent = Agent("solver", ChatClient(ScriptedChat(copying_reply)), memory=MemoryView(store))
        evolver = Evolver(
            Team([agent]), TASKS, memory=store, run="ctx", schedule=paraphrase_schedule(1), progress=False
        )
        metrics = evolver.run(rounds=3)
        with store.engine.connect() as conn:
            logged = conn.execute(select(recalls.c.query, recalls.c.context)).all()
    assert len(logged) == 12 and metrics[-1].memory_size == 12
    by_task = {t.id: {t.prompt, *t.meta["paraphrases"]} for t in TASKS}
    assert all(context in by_task and query in by_task[context] for query, context in logged)


def test_q_in_context_is_the_spec_default_and_the_spec_turns_it_off(tmp_path: Path, repo_root: Path) -> None:
    text = (repo_root / "data" / "lookalikes.toml").read_text(encoding="utf-8")
    assert memory_config(load_spec_text(tmp_path, text)).retrieval.context_q is True
    off = text.replace("alpha = 0.3\n", "alpha = 0.3\ncontext_q = false\n")
    assert memory_config(load_spec_text(tmp_path, off)).retrieval.context_q is False


def load_spec_text(folder: Path, text: str):  # type: ignore[no-untyped-def]
    (folder / "lookalikes.jsonl").write_text("", encoding="utf-8")
    path = folder / "spec.toml"
    path.write_text(text, encoding="utf-8")
    return load_spec(path)
