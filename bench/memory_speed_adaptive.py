"""The adaptive index (``index="adaptive"``) at one store size: exact while small, an HNSW graph past 20,000 items.

Run ``python -m bench.memory_speed_adaptive [--sizes 100000 1000000]`` for it alone (the same vectors and
queries as ``bench.memory_speed``; results in ``bench/results/memory_adaptive.{json,md}``, keys merged into
``summary.json``). ``adaptive_store`` loads the items in bulk, waits for the background switch to the HNSW graph (and
reports how long it took), then measures: recall@10 of the whole recall against an exact search, the
recall's p50/p95 next to its own index's raw search, one ``reinforce`` call, one normal ``write`` call
(intent grouping on), a grouped ``add_many``, and reopening it in a fresh process: time to the first
answer and the process's peak resident memory. ``bench.memory_speed`` calls it for the sizes its
profile names (``Profile.adaptive_store``). Run alone, a size measured before and not now stays in the results
as it was (each size says when it was measured), so 100k and 1M can be run apart.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import machine, merge_summary
from bench.memory_speed_measure import (
    DIM,
    PROFILES,
    LookupEmbedder,
    add_throughput,
    clustered,
    grouped_add,
    timed,
    unit,
    workload,
)
from bench.memory_speed_report import adaptive_keys, adaptive_table, size_tag
from connectors.errors import ConfigError
from memory.config import MemoryConfig, RetrievalConfig
from memory.recall.planning import search_width as width
from memory.storage.records import Recall
from memory.store import MemoryStore

NEAREST = RetrievalConfig(k1=10, k2=10, delta=-1.0, lam=0.0)  # the ten most similar, whatever their Q
SETTLE_TIMEOUT_S = 3600
WRITE_CALLS = 300
ROOT = Path(__file__).resolve().parents[1]


def adaptive_store(vecs: np.ndarray, queries: np.ndarray, db: Path, *, seed: int) -> dict[str, Any]:
    """Every measurement of the default index on ``vecs`` (the store lives at ``db``)."""
    n = len(vecs)
    embedder = LookupEmbedder(DIM)
    texts = [f"query {i}" for i in range(len(queries))]
    embedder.vectors.update(zip(texts, queries, strict=True))
    cfg = MemoryConfig(index="adaptive", retrieval=RetrievalConfig(k1=10, k2=5))
    out: dict[str, Any] = {"items": n}
    store = MemoryStore(f"sqlite:///{db}", embedder=embedder, config=cfg, seed=seed)
    try:
        out["add"] = add_throughput(store, vecs, n)
        start = time.perf_counter()
        out["settled"] = store.wait_for_index(SETTLE_TIMEOUT_S)
        out["settle_s"] = time.perf_counter() - start
        out["index"] = store.index_details()
        out["recall_at_10"] = recall_at_10(store, texts, vecs, queries)
        out.update(serving(store, embedder, queries, items=n, seed=seed, label="adaptive"))
        store.wait_for_index(SETTLE_TIMEOUT_S)
    finally:
        start = time.perf_counter()
        store.close()
        out["close_s"] = time.perf_counter() - start
    np.save(db.with_suffix(".queries.npy"), queries)
    out["reopen"] = reopen_in_fresh_process(db, len(texts))
    out["copies"] = copies_agree(db.parent)
    return out


def copies_agree(folder: Path, items: int = 25_000) -> dict[str, Any]:
    """A namespace made of copies: one kind of question asked again and again without grouping (hashed
    words, so equal texts give equal vectors: 25,000 items over a few hundred distinct vectors). The
    share of 200 recalls that return exactly what the exact index returns (the graph of every copy it
    replaced returned a tenth of the neighbours)."""
    from connectors.embedders import HashEmbedder

    places = ["Zürich Nordhafen", "Basel Rheinhafen", "Genf Cornavin", "Bern Wankdorf", "Lugano Vedeggio"]
    texts = [f"Wie buche ich die Lieferung {i % 40} nach {places[i % 5]} Halle {i % 7}" for i in range(items)]
    questions = [f"Lieferung {j % 40} buchen {places[j % 5]} Halle {j % 7} bitte" for j in range(200)]
    recalls: dict[str, list[list[str]]] = {}
    for kind in ("flat", "adaptive"):
        cfg = MemoryConfig(index=kind, retrieval=NEAREST)
        with MemoryStore(f"sqlite:///{folder / f'copies-{kind}.db'}", embedder=HashEmbedder(64), config=cfg) as s:
            s.add_many([(t, f"Antwort {i}") for i, t in enumerate(texts)], group=False)
            s.wait_for_index(SETTLE_TIMEOUT_S)
            distinct = s.index_details().get("distinct_vectors")
            recalls[kind] = [[m.experience for m in s.retrieve(q, record=False).items] for q in questions]
    same = np.mean([a == b for a, b in zip(recalls["flat"], recalls["adaptive"], strict=True)])
    return {"items": items, "distinct_vectors": distinct, "same_recalls": float(same)}


def serving(
    store: MemoryStore, embedder: LookupEmbedder, queries: np.ndarray, *, items: int, seed: int, label: str
) -> dict[str, Any]:
    """What a store costs in use, whatever its database and index: one recall (the whole call, and its
    index's own search), one ``reinforce``, one ``write`` and a grouped ``add_many``. The queries are
    ``"query {i}"`` in ``embedder``."""
    texts = [f"query {i}" for i in range(len(queries))]
    for text in texts[:20]:  # warm-up
        store.retrieve(text, record=False)
    logged: list[Recall] = []
    width = search_width(store.config)
    rec = timed(lambda i: logged.append(store.retrieve(texts[i])), len(texts), f"retrieve {label}")
    index = store._mirrors.loaded("default").index  # type: ignore[union-attr]
    raw = timed(lambda i: index.search(queries[i : i + 1], width), len(texts), f"{label} index search")
    calls = min(300, len(logged))
    reinforce = timed(lambda i: store.reinforce(logged[i], 1.0, feedback_id=f"{label}-{i}"), calls, "reinforce")
    return {
        "retrieve": rec.summary(),
        "index_search": raw.summary(),
        "ratio_vs_index": rec.summary()["p50_ms"] / raw.summary()["p50_ms"],
        "reinforce": reinforce.summary(),
        "write": write_calls(store, embedder, np.random.default_rng(seed + 2)),
        "grouped_add": grouped_add(store, np.random.default_rng(seed + 1), items),
    }


def search_width(cfg: MemoryConfig) -> int:
    """As deep as a recall asks its index (``memory.recall.planning.search_width``)."""
    return width(cfg.retrieval.k1, 10**9)


def recall_at_10(store: MemoryStore, texts: list[str], vecs: np.ndarray, queries: np.ndarray) -> float:
    """Share of each query's exact ten nearest stored items that the store's recall (``NEAREST``) returns."""
    hits = []
    for lo in range(0, len(queries), 50):
        sims = queries[lo : lo + 50] @ vecs.T
        truth = np.argpartition(-sims, 10, axis=1)[:, :10]
        for j, row in enumerate(truth):
            got = {m.intent for m in store.retrieve(texts[lo + j], config=NEAREST, record=False).items}
            hits.append(len(got & {f"intent {i}" for i in row.tolist()}) / 10)
    return float(np.mean(hits))


def write_calls(store: MemoryStore, embedder: LookupEmbedder, rng: np.random.Generator) -> dict[str, float]:
    """``WRITE_CALLS`` single ``write`` calls of new attempts (grouping on: each compared with the keys)."""
    vecs = clustered(WRITE_CALLS, rng)
    intents = [f"written task {i}" for i in range(WRITE_CALLS)]
    embedder.vectors.update(zip(intents, unit(vecs), strict=True))
    return timed(
        lambda i: store.write(intents[i], trajectory="Answer given: 42", feedback="Correct.", success=True),
        WRITE_CALLS,
        "write",
    ).summary()


REOPEN = """
import json, sys, time
import numpy as np
sys.path.insert(0, {root!r})
start = time.perf_counter()
from bench.memory_speed_measure import DIM, LookupEmbedder
from connectors.errors import ConfigError
from memory.config import MemoryConfig, RetrievalConfig
from memory.store import MemoryStore
imported = time.perf_counter() - start
queries = np.load({queries!r})
embedder = LookupEmbedder(DIM)
embedder.vectors.update((f"query {{i}}", q) for i, q in enumerate(queries))
start = time.perf_counter()
store = MemoryStore({url!r}, embedder=embedder, config=MemoryConfig(index={index!r}, retrieval=RetrievalConfig(k1=10, k2=5)))
store.retrieve("query 0", record=False)
first = time.perf_counter() - start
for i in range({calls}):
    store.retrieve(f"query {{i}}", record=False)
from bench.common import peak_rss_mb, rss_parts_mb
print(json.dumps({{"reopen_s": first, "import_s": imported, "peak_rss_mb": peak_rss_mb(), "rss_now_mb": rss_parts_mb(),
                  "index": store.index_status(), "mirror": store.mirror_status()}}))
store.close()
"""


def reopen_in_fresh_process(db: Path, calls: int) -> dict[str, Any]:
    """Open the closed store in a new Python process: seconds to the first answer (imports not counted),
    then ``calls`` recalls, and the process's peak resident memory."""
    script = REOPEN.format(
        root=str(ROOT),
        queries=str(db.with_suffix(".queries.npy")),
        url=f"sqlite:///{db}",
        calls=calls,
        index="adaptive",
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="The default (adaptive) index alone, at each size.")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1000:
        raise ConfigError(f"sizes must be >= 1000, got {args.sizes}")
    results: dict[str, Any] = {"machine": machine(), "sizes": earlier_sizes(args.out / "memory_adaptive.json")}
    for n in args.sizes:
        _, vecs, _, queries = workload(n, PROFILES["quick"].queries_for(n), args.seed)
        measured_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with tempfile.TemporaryDirectory(prefix=f"evolve-adaptive-{n}-") as work:
            results["sizes"][str(n)] = {
                "adaptive_store": adaptive_store(vecs, queries, Path(work) / "adaptive.db", seed=args.seed),
                "measured_at": measured_at,
            }
    results["sizes"] = dict(sorted(results["sizes"].items(), key=lambda kv: int(kv[0])))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_adaptive.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    page = ["# The default index (adaptive) alone", "", f"Machine: {results['machine']}"] + adaptive_table(results)
    (args.out / "memory_adaptive.md").write_text("\n".join(page) + "\n", encoding="utf-8")
    keys: dict[str, Any] = {}
    for n in args.sizes:  # the sizes measured now: those kept from before keep their keys as they are
        keys.update(adaptive_keys(results["sizes"][str(n)]["adaptive_store"], size_tag(n)))
    merge_summary(args.out / "summary.json", keys)
    print(json.dumps(keys, indent=1))
    return results


def earlier_sizes(path: Path) -> dict[str, Any]:
    """The sizes an earlier run wrote to ``path``, so that 100k and 1M can be measured apart (each says when, in
    ``measured_at``; one from before that field was kept has none); a size measured now replaces its entry."""
    if not path.exists():
        return {}
    try:
        sizes: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["sizes"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}
    return sizes


if __name__ == "__main__":
    main()
