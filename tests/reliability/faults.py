"""Faults from models: the loop over a model server that rate-limits, crashes, stalls and sends junk.

Three scenarios over the fault server of ``tests/support/fake_openai.py`` (real HTTP on 127.0.0.1, the
real openai SDK), asserted on by ``tests/evolve/test_model_faults.py`` and
``tests/optimizers/test_parse_faults.py`` and reported by ``bench/reliability_faults.py``:

1. ``fault_classes``: each fault once, then a good answer, through ``load_chat`` with one retry;
2. ``evolver_under_faults``: two ``Evolver`` rounds while a seeded ``FaultMix`` injects every fault;
3. ``critic_gives_junk``: a prompt-evolution round whose critic answers unparseable text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors import ConnectorError, HashEmbedder, Message, load_chat
from evolve import Agent, Episode, Evolver, MemoryView, Task, Team
from evolve.executors import InProcess, Rollout
from evolve.prompts.evolution import PromptEvolution, split_tasks
from evolve.prompts.graph import PromptGraph
from memory import MemoryStore, RetrievalConfig
from optimizers import TextualGradientOptimizer
from tests.support.copying_model import copying_reply
from tests.support.fake_openai import FAULT_KINDS, FakeOpenAIServer, FaultMix, Reply, chat_body, faults

TIMEOUT = 0.3  # the client's timeout; the "slow" fault answers after TIMEOUT + 0.2
RETRIES = 1
CAP = 1 << 20  # max_response_bytes; the "enormous" fault sends twice that
REPLIES = faults(retry_after=0.05, slow=TIMEOUT + 0.2, enormous=2 * CAP)
RATE = 0.05  # per fault kind: 8 kinds x 5%, so about 40% of the requests fault
JUNK = "Sure! Here are my thoughts {{ on the prompt, without any tags"


def copying(request: dict[str, Any]) -> Reply:
    """The healthy model: copies the code a recalled experience reveals (else answers 0000)."""
    messages = [Message(m["role"], m["content"]) for m in request["messages"]]
    return Reply(200, chat_body(copying_reply(messages)))


def tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i:02d}", prompt=f"Which code opens gate number {i}?", answer=str(1000 + i)) for i in range(n)]


def chat(server: FakeOpenAIServer, model: str = "test-model") -> Any:
    return load_chat(f"openai/{model}", base_url=server.url, retries=RETRIES, timeout=TIMEOUT, max_response_bytes=CAP)


@dataclass
class Recording(InProcess):
    """The in-process executor that also keeps every episode it ran."""

    episodes: list[Episode] = field(default_factory=list)

    def run(self, rollout: Rollout, tasks: Any) -> list[Episode]:
        done = super().run(rollout, tasks)
        self.episodes.extend(done)
        return done


def fault_classes() -> dict[str, dict[str, Any]]:
    """Per fault kind: what one ``complete`` returned or raised, and how many requests it took."""
    out: dict[str, dict[str, Any]] = {}
    for kind in FAULT_KINDS:
        with FakeOpenAIServer() as server:
            server.script(REPLIES[kind], Reply(200, chat_body("1234")))
            try:
                text = chat(server).complete("hi", max_tokens=8).text
                outcome = f"answered {text!r}"
            except ConnectorError as e:
                outcome = f"{type(e).__name__} (retryable={e.retryable})"
        out[kind] = {"outcome": outcome, "requests": len(server.requests)}
    return out


@dataclass
class FaultRound:
    """What ``evolver_under_faults`` saw."""

    episodes: list[Episode]
    success_rates: list[float]
    requests: int
    kinds: Counter[str]
    escaped: str | None
    memories: int
    calls_bound: int  # (retries + 1) x the model calls the episodes made


def evolver_under_faults(
    folder: Path, *, seed: int = 0, n_tasks: int = 12, rounds: int = 2, rate: float = RATE
) -> FaultRound:
    """``rounds`` Evolver rounds over ``n_tasks`` while ``FaultMix(seed)`` injects each fault at ``rate``."""
    mix = FaultMix(copying, dict.fromkeys(FAULT_KINDS, rate), seed=seed, replies=REPLIES)
    server = FakeOpenAIServer(responder=mix)
    server.start()
    store = MemoryStore(f"sqlite:///{folder / f'faults-{seed}.db'}", embedder=HashEmbedder())
    view = MemoryView(store, config=RetrievalConfig(k1=5, k2=1, delta=0.95))
    agent = Agent("solver", chat(server), memory=view, params={"max_tokens": 8})
    executor = Recording()
    escaped, rates = None, []
    try:
        team = Team([agent], workers=4)
        evolver = Evolver(team, tasks(n_tasks), memory=store, run="faults", executor=executor, progress=False)
        rates = [m.success_rate for m in evolver.run(rounds=rounds)]
    except Exception as e:  # the guarantee under test: nothing escapes; recorded, not raised
        escaped = f"{type(e).__name__}: {e}"
    finally:
        server.stop()
    memories = len(store.items())
    store.close()
    calls = len(executor.episodes)  # one agent, one turn: one model call per episode
    return FaultRound(
        executor.episodes, rates, len(server.requests), Counter(server.kinds), escaped, memories, (RETRIES + 1) * calls
    )


@dataclass
class CriticRound:
    """What ``critic_gives_junk`` saw."""

    head_before: dict[str, str]
    head_after: dict[str, str]
    versions: int
    note: str
    critic_requests: int


def critic_gives_junk(folder: Path, *, n_tasks: int = 8) -> CriticRound:
    """One Evolver round with prompt evolution whose critic answers only unparseable text."""

    def route(request: dict[str, Any]) -> Reply:
        return Reply(200, chat_body(JUNK)) if request["model"] == "critic-model" else copying(request)

    server = FakeOpenAIServer(responder=route)
    server.start()
    try:
        store = MemoryStore(f"sqlite:///{folder / 'critic.db'}", embedder=HashEmbedder())
        team = Team([Agent("solver", chat(server), system="Answer with the code.", memory=MemoryView(store))])
        graph = PromptGraph(store.engine, "junk")
        train, val = split_tasks(tasks(n_tasks), seed=1)
        optimizer = TextualGradientOptimizer(critic=chat(server, "critic-model"), minibatch_size=3)
        prompts = PromptEvolution(graph, optimizer, train_ids=train, val_ids=val)
        evolver = Evolver(team, tasks(n_tasks), memory=store, run="junk", prompts=prompts, progress=False)
        before = dict(prompts.start(team).prompts())
        metrics = evolver.run(rounds=1)[0]
        result = CriticRound(before, dict(graph.head().nodes), len(graph.log()), metrics.prompt_note or "", 0)
        result.critic_requests = sum(1 for r in server.requests if r["json"]["model"] == "critic-model")
        store.close()
        return result
    finally:
        server.stop()
