"""The memory-speed results as pages: flat summary keys, the targets table, markdown and the latency plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.memory_speed_measure import ADD_BATCH, DIM, GROUPED_BATCH


def size_tag(n: int) -> str:
    """``10k``, ``100k``, ``1m``: the suffix of a size's summary keys."""
    return f"{n // 1_000_000}m" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k"


TARGETS = (
    # (summary key, comparison, goal, what it means)
    ("retrieval_ratio_vs_faiss_100k", "<=", 1.3, "two-phase retrieve p50 / raw FAISS p50 at 100k"),
    ("retrieval_ratio_vs_faiss_1m", "<=", 1.3, "two-phase retrieve p50 / raw FAISS p50 at 1M"),
    ("retrieval_speedup_vs_brute_force_100k", ">=", 50, "brute-force Python scan p50 / retrieve p50 at 100k"),
    ("ivf_retrieval_speedup_vs_brute_force_100k", ">=", 50, "the same with an `ivf` store at 100k"),
    ("add_items_per_s", ">=", 20_000, "bulk add_many with precomputed embeddings (largest size)"),
    ("reopen_s_100k", "<=", 0.2, "reopen + first answer in a fresh process, adaptive index, 100k"),
    ("reopen_s_1m", "<=", 2, "the same at 1M"),
    ("grouped_add_items_per_s_1m", ">=", 2000, "add_many with intent grouping, adaptive index, 1M"),
    ("write_call_p50_ms_1m", "<=", 1, "one write call (grouping on), adaptive index, 1M"),
    ("ann_recall_at_10_1m", ">=", 0.97, "recall@10 of the whole recall vs exact search, adaptive index, 1M"),
    ("ann_retrieve_p50_ms_1m", "<=", 5, "recall p50, adaptive index, 1M"),
    ("ann_retrieval_ratio_vs_index_100k", "<=", 1.5, "recall p50 / its own index's search p50, 100k"),
    ("reinforce_call_p50_ms", "<=", 0.5, "one reinforce call p50 (adaptive index, 100k)"),
    ("rss_mb_1m", "<=", 2000, "peak resident memory of a process reopening the 1M store and recalling"),
    ("reinforce_updates_per_s", ">=", 20_000, "reinforce_many Q updates per second on SQLite (largest size)"),
    ("bytes_per_item_100k", "<=", 3000, "database + index + mirror files per stored item, flat store, 100k"),
)


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """Flat numbers for summary.json, keyed by size (``_10k``, ``_100k``, ``_1m``)."""
    flat: dict[str, Any] = {}
    for n, r in results["sizes"].items():
        tag = size_tag(int(n))
        flat[f"retrieval_p50_ms_{tag}"] = round(r["retrieve"]["p50_ms"], 3)
        flat[f"retrieval_p95_ms_{tag}"] = round(r["retrieve"]["p95_ms"], 3)
        flat[f"retrieval_qps_{tag}"] = round(r["retrieve"]["qps"], 1)
        flat[f"faiss_p50_ms_{tag}"] = round(r["faiss_search"]["p50_ms"], 3)
        flat[f"retrieval_ratio_vs_faiss_{tag}"] = round(r["ratio_vs_faiss"], 2)
        flat[f"brute_force_p50_ms_{tag}"] = round(r["brute_force"]["p50_ms"], 1)
        flat[f"retrieval_speedup_vs_brute_force_{tag}"] = round(r["speedup_vs_brute_force"], 1)
        flat[f"flat_grouped_add_items_per_s_{tag}"] = round(r["grouped_add"]["items_per_s"])
        flat[f"flat_reopen_s_{tag}"] = round(r["reopen_s"], 3)
        flat[f"bytes_per_item_{tag}"] = round(sum(r["bytes_per_item"].values()))  # database, index, mirror
        if "ivf_store" in r:
            flat[f"ivf_retrieval_p50_ms_{tag}"] = round(r["ivf_store"]["p50_ms"], 3)
            flat[f"ivf_retrieval_speedup_vs_brute_force_{tag}"] = round(r["ivf_store"]["speedup_vs_brute_force"], 1)
            flat[f"ivf_grouped_add_items_per_s_{tag}"] = round(r["ivf_store"]["grouped_add_items_per_s"])
        if "adaptive_store" in r:
            flat.update(adaptive_keys(r["adaptive_store"], tag))
        for kind, k in r["index_kinds"].items():
            flat[f"index_{kind}_recall_at_10_{tag}"] = round(k["recall_at_10"], 4)
            flat[f"index_{kind}_search_p50_ms_{tag}"] = round(k["p50_ms"], 3)
    largest = results["sizes"][max(results["sizes"], key=int)]
    flat["add_items_per_s"] = round(largest["add"]["items_per_s"])
    flat["reinforce_updates_per_s"] = round(largest["reinforce"]["batched_updates_per_s"])
    flat["reinforce_single_updates_per_s"] = round(largest["reinforce"]["single_updates_per_s"])
    flat["phase_b_us"] = round(largest["phase_b_us"], 1)
    return flat


def adaptive_keys(a: dict[str, Any], tag: str) -> dict[str, Any]:
    """The adaptive index's summary keys at one size."""
    keys = {
        f"ann_recall_at_10_{tag}": round(a["recall_at_10"], 4),
        f"ann_retrieve_p50_ms_{tag}": round(a["retrieve"]["p50_ms"], 3),
        f"ann_retrieve_p95_ms_{tag}": round(a["retrieve"]["p95_ms"], 3),
        f"ann_index_search_p50_ms_{tag}": round(a["index_search"]["p50_ms"], 3),
        f"ann_retrieval_ratio_vs_index_{tag}": round(a["ratio_vs_index"], 2),
        f"write_call_p50_ms_{tag}": round(a["write"]["p50_ms"], 3),
        f"grouped_add_items_per_s_{tag}": round(a["grouped_add"]["items_per_s"]),
        f"reopen_s_{tag}": round(a["reopen"]["reopen_s"], 3),
        f"rss_mb_{tag}": round(a["reopen"]["peak_rss_mb"]),
        f"adaptive_settle_s_{tag}": round(a["settle_s"], 1),
        f"adaptive_ef_search_{tag}": a["index"].get("ef_search"),
    }
    if "copies" in a:  # a namespace of copies: recalls equal to the exact index's (share)
        keys["adaptive_copies_same_recalls"] = round(a["copies"]["same_recalls"], 3)
    if a["reopen"].get("rss_now_mb"):  # the process's own memory, beside the mapped files' page cache
        keys[f"rss_anon_mb_{tag}"] = round(a["reopen"]["rss_now_mb"]["anon"])
    if tag == "100k":
        keys["reinforce_call_p50_ms"] = round(a["reinforce"]["p50_ms"], 3)
    return keys


def target_rows(flat: dict[str, Any]) -> list[str]:
    """The markdown rows of the targets table: goal, measured value, reached or how far off."""
    rows = []
    for key, op, goal, what in TARGETS:
        if key not in flat:
            rows.append(f"| {what} | {op} {goal:,} | not measured in this run | — |")
            continue
        value = flat[key]
        ok = value <= goal if op == "<=" else value >= goal
        gap = "reached" if ok else f"missed by {abs(value - goal) / goal:.0%}"
        rows.append(f"| {what} | {op} {goal:,} | {value:,} | {gap} |")
    return rows


def markdown(results: dict[str, Any]) -> str:
    """The whole page: machine and setup, targets, then one table per kind of figure and the notes."""
    m = results["machine"]
    lines = [
        "# Memory store speed",
        "",
        f"Machine: {m['cpu_count']} CPUs ({m['cpu']}), Python {m['python']}, numpy {m['numpy']}, "
        f"faiss {m['faiss']}, SQLAlchemy {m['sqlalchemy']}; {m['platform']}; load average at start "
        f"{m['load_average_at_start']} (other work on the machine makes absolute numbers noisy).",
        f"Setup: profile `{results['profile']}`; {DIM}-d unit vectors clustered around n/100 topics, k1 = 10, "
        "k2 = 5, flat index, SQLite file (WAL); queries are noisy copies of stored vectors "
        f"(`python -m bench.memory_speed --profile {results['profile']}`).",
        "",
        "## Targets",
        "",
        "| target | goal | measured | status |",
        "|---|---|---|---|",
        *target_rows(headline(results)),
    ]
    lines += adaptive_table(results) + retrieval_table(results) + writes_table(results) + ivf_table(results)
    lines += kinds_table(results)
    return "\n".join(lines + notes(results))


def adaptive_table(results: dict[str, Any]) -> list[str]:
    """The adaptive index's rows (``bench.memory_speed_adaptive``), or nothing when no size measured it."""
    adaptive = {n: r["adaptive_store"] for n, r in results["sizes"].items() if "adaptive_store" in r}
    when = {n: f" ({r['measured_at'][:10]})" if r.get("measured_at") else "" for n, r in results["sizes"].items()}
    if not adaptive:
        return []
    lines = [
        "",
        '## The adaptive index (`index="adaptive"`)',
        "",
        "| items | holds (efSearch, measured recall) | switch + merge s | recall@10 | recall p50 / p95 ms "
        "| its index p50 ms | ratio | reinforce p50 ms | write p50 / p95 ms | grouped add items/s "
        "| reopen s (fresh process) | peak RSS MB (anonymous / mapped files at the end) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, a in adaptive.items():
        ix, w, ro = a["index"], a["write"], a["reopen"]
        measured = ix.get("measured_recall_at_10")
        holds = f"{ix['holds']} ({ix.get('ef_search')}, {measured:.3f})" if measured is not None else ix["holds"]
        lines.append(
            f"| {int(n):,}{when[n]} | {holds} | {a['settle_s']:.0f} | {a['recall_at_10']:.3f} "
            f"| {a['retrieve']['p50_ms']:.2f} / {a['retrieve']['p95_ms']:.2f} | {a['index_search']['p50_ms']:.3f} "
            f"| {a['ratio_vs_index']:.2f} | {a['reinforce']['p50_ms']:.2f} | {w['p50_ms']:.2f} / {w['p95_ms']:.2f} "
            f"| {a['grouped_add']['items_per_s']:,.0f} | {ro['reopen_s']:.2f} ({ro['index']}, mirror {ro['mirror']}) "
            f"| {ro['peak_rss_mb']:,.0f} ({rss_split(ro)}) |"
        )
    return lines


def rss_split(reopen: dict[str, Any]) -> str:
    parts = reopen.get("rss_now_mb")
    return f"{parts['anon']:,.0f} / {parts['file']:,.0f}" if parts else "not split"


def retrieval_table(results: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Retrieval",
        "",
        "| items | queries | retrieve p50 / p95 ms | QPS | no-log p50 ms | raw FAISS p50 ms | ratio "
        "| brute force p50 ms | × faster than brute force | retrieve_many QPS | recall@1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, r in results["sizes"].items():
        bf = r["brute_force"]
        lines.append(
            f"| {int(n):,} | {r['queries']} | {r['retrieve']['p50_ms']:.2f} / {r['retrieve']['p95_ms']:.2f} "
            f"| {r['retrieve']['qps']:.0f} | {r['retrieve_no_log']['p50_ms']:.2f} | {r['faiss_search']['p50_ms']:.2f} "
            f"| {r['ratio_vs_faiss']:.2f} | {bf['p50_ms']:,.0f} ({bf['queries']} queries) "
            f"| {r['speedup_vs_brute_force']:,.0f} | {r['retrieve_many_qps']:.0f} | {r['recall_at_1']:.3f} |"
        )
    return lines


def writes_table(results: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Writes, reopen and size",
        "",
        "| items | bulk add items/s | grouped add items/s | reinforce updates/s (batched / single) | reopen s "
        "| bytes/item (db + index + mirror) |",
        "|---|---|---|---|---|---|",
    ]
    for n, r in results["sizes"].items():
        rf, b = r["reinforce"], r["bytes_per_item"]
        lines.append(
            f"| {int(n):,} | {r['add']['items_per_s']:,.0f} | {r['grouped_add']['items_per_s']:,.0f} "
            f"| {rf['batched_updates_per_s']:,.0f} / {rf['single_updates_per_s']:,.0f} | {r['reopen_s']:.2f} "
            f"({r['reopen_index']}) | {b['database']:,.0f} + {b['index']:,.0f} + {b.get('mirror', 0):,.0f} |"
        )
    return lines


def ivf_table(results: dict[str, Any]) -> list[str]:
    """The ``ivf`` store's rows, or nothing when no size measured one."""
    ivf = {n: r["ivf_store"] for n, r in results["sizes"].items() if "ivf_store" in r}
    if not ivf:
        return []
    lines = [
        "",
        '## The same items in an `index="ivf"` store',
        "",
        "| items | lists | retrieve p50 / p95 ms | raw IVF search p50 ms | ratio | × faster than brute force "
        "| recall@1 | grouped add items/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, v in ivf.items():
        lines.append(
            f"| {int(n):,} | {v['lists']} | {v['p50_ms']:.2f} / {v['p95_ms']:.2f} | {v['index_search_p50_ms']:.3f} "
            f"| {v['ratio_vs_index']:.2f} | {v['speedup_vs_brute_force']:,.0f} | {v['recall_at_1']:.3f} "
            f"| {v['grouped_add_items_per_s']:,.0f} |"
        )
    return lines


def kinds_table(results: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Index kinds (recall@10 against exact search, one query at a time)",
        "",
        "| items | kind | build s | search p50 ms | recall@10 |",
        "|---|---|---|---|---|",
    ]
    for n, r in results["sizes"].items():
        for kind, k in r["index_kinds"].items():
            extra = f" ({k['lists']} lists)" if "lists" in k else ""
            lines.append(
                f"| {int(n):,} | {kind}{extra} | {k['build_s']:.1f} | {k['p50_ms']:.3f} | {k['recall_at_10']:.3f} |"
            )
    return lines


def notes(results: dict[str, Any]) -> list[str]:
    """What each figure measures."""
    return [
        "",
        "- *retrieve* is the whole call: embed lookup, generation check, index search, exact phase A, phase B, "
        "reading the chosen rows and logging the recall (one SQLite write). *no-log* skips the log.",
        "- *raw FAISS* is `index.search(q, k1)` on the store's own index, in the same process, single-threaded as the "
        "store runs single queries.",
        "- *brute force* is the reference recall: a Python loop over every memory computing its cosine, the k1 best "
        "above δ, then the same phase B; `same_choice` in the JSON says how often it chose the store's items.",
        f"- phase B alone (z-scores and ranking of a 10-item pool): {results['phase_b_us']:.1f} µs.",
        f"- *bulk add* is `add_many(..., group=False)` in batches of {ADD_BATCH:,} with precomputed embeddings; "
        f"*grouped add* is {GROUPED_BATCH:,} new items with intent grouping on, which with a flat index compares each "
        "new intent with every key (an `hnsw`/`ivf` store groups through its index instead).",
        "- *reopen* is opening the store and answering one query: the namespace's rows are read from SQL and the saved "
        "index file is loaded.",
        '- *The adaptive index* is `index="adaptive"`: exact below 20,000 items, then an HNSW graph (M = 16, '
        "efConstruction = 80) built in the background, its efSearch tuned on sampled queries for recall@10 >= 0.99. "
        "*switch + merge* is how long `wait_for_index` waited after the bulk load; *recall@10* is the whole recall "
        "(k1 = k2 = 10, λ = 0) against an exact search of every item; *write* is one `write` call of a new attempt; "
        "*reopen* runs in a new process and counts from opening the store to its first answer (imports excluded); "
        "*peak RSS* is that process's after the timed recalls.",
        "- HNSW kind: M = 32, efConstruction = 80, efSearch = 64; IVF: about √n lists, 16 of them searched per query (a sixteenth beyond 256 lists).",
        "",
    ]


def plot(results: dict[str, Any], path: Path) -> None:
    """Latency p50 against store size: the store's retrieve, raw FAISS and the brute-force scan."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(n) for n in results["sizes"]]
    rows = list(results["sizes"].values())
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, get in (
        ("two-phase retrieve (store)", lambda r: r["retrieve"]["p50_ms"]),
        ("raw FAISS search", lambda r: r["faiss_search"]["p50_ms"]),
        ("brute-force Python scan", lambda r: r["brute_force"]["p50_ms"]),
    ):
        ax.plot(sizes, [get(r) for r in rows], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("items in the namespace")
    ax.set_ylabel("p50 latency per query (ms)")
    ax.set_title(f"Memory recall latency ({results['machine']['cpu_count']} CPUs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
