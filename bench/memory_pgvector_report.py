"""The page and the summary keys of ``bench.memory_pgvector``'s results (``bench/results/memory_pgvector.{md,json}``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.memory_speed_report import size_tag

BUILD_MEMORY = "4GB"  # maintenance_work_mem while --index-after-load builds the graph: a million 384-d rows fit


def add_estimate_s(batch_rates: Sequence[float], batch: int, target: int) -> float | None:
    """Seconds a bulk load to ``target`` items would take if each item's insert cost kept growing as
    it did here, ``a + b·ln(items in the graph)`` (an HNSW insert visits about log n layers and
    neighbours) fitted to the batches. A lower bound: it ignores the graph outgrowing memory."""
    if len(batch_rates) < 3:
        return None
    mid = (np.arange(len(batch_rates)) + 0.5) * batch
    b, a = np.polyfit(np.log(mid), 1.0 / np.asarray(batch_rates, dtype=float), 1)
    ends = (np.arange(target // batch) + 0.5) * batch
    return float(np.sum(batch * (a + b * np.log(ends))))


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """``pgvector_*`` keys for summary.json, per size (``_100k``, ``_1m``)."""
    flat: dict[str, Any] = {}
    for size, r in results["sizes"].items():
        tag = size_tag(int(size))
        peak = (r["server_memory"] or {}).get("peak") or {}
        flat.update({
            f"pgvector_add_items_per_s_{tag}": round(r["add"]["items_per_s"]),
            f"pgvector_recall_at_10_{tag}": round(r["recall_at_10"], 4),
            f"pgvector_ef_search_{tag}": (r.get("index") or {}).get("ef_search", 40),
            f"pgvector_retrieve_p50_ms_{tag}": round(r["retrieve"]["p50_ms"], 3),
            f"pgvector_retrieve_p95_ms_{tag}": round(r["retrieve"]["p95_ms"], 3),
            f"pgvector_index_search_p50_ms_{tag}": round(r["index_search"]["p50_ms"], 3),
            f"pgvector_retrieval_ratio_vs_index_{tag}": round(r["ratio_vs_index"], 2),
            f"pgvector_reinforce_call_p50_ms_{tag}": round(r["reinforce"]["p50_ms"], 3),
            f"pgvector_write_call_p50_ms_{tag}": round(r["write"]["p50_ms"], 3),
            f"pgvector_write_call_p95_ms_{tag}": round(r["write"]["p95_ms"], 3),
            f"pgvector_grouped_add_items_per_s_{tag}": round(r["grouped_add"]["items_per_s"]),
            f"pgvector_reopen_s_{tag}": round(r["reopen"]["reopen_s"], 3),
            f"pgvector_client_rss_mb_{tag}": round(r["reopen"]["peak_rss_mb"]),
            f"pgvector_bytes_per_item_{tag}": round(loaded(r)["database"] / r["items"]),
        })  # fmt: skip
        if peak:
            flat[f"pgvector_server_rss_mb_{tag}"] = round(peak["rss_mb"])
            flat[f"pgvector_server_pss_mb_{tag}"] = round(peak["pss_mb"])
    return flat


def markdown(results: dict[str, Any]) -> str:
    s, m = results["server"], results["machine"]
    sizes = results["sizes"]
    lines = [
        "# The memory store on PostgreSQL + pgvector",
        "",
        "`python -m bench.memory_pgvector` (see its docstring). The default `MemoryConfig()` on PostgreSQL is "
        '`index="pgvector"`: phase A is one SQL statement walking the HNSW index in the database, then the mirror '
        "re-scores the candidates exactly and phase B reads Q from it. 384-d clustered unit vectors, queries are "
        "noisy copies of stored ones served by a lookup embedder (no model runs).",
        "",
        f"Machine: {m['cpu_count']} cores ({m['cpu']}), shared with other jobs. PostgreSQL {s['version']}, pgvector "
        f"{s['pgvector']}, shared_buffers {s['shared_buffers']}, maintenance_work_mem {s['maintenance_work_mem']}, "
        f"fsync {s['fsync']}, synchronous_commit {s['synchronous_commit']}"
        + (" (the throwaway test server: commits do not wait for the disk)." if s["fsync"] == "off" else "."),
        "",
        "| measure | " + " | ".join(f"{int(n):,} items" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for label, get in ROWS:
        lines.append(f"| {label} | " + " | ".join(get(r) for r in sizes.values()) + " |")
    lines += comparison(sizes)
    lines += notes(sizes)
    return "\n".join(lines) + "\n"


def loaded(r: dict[str, Any]) -> dict[str, Any]:
    """The database's bytes once loaded and indexed: after the load, or after the index built after it."""
    return r.get("bytes_after_index") or r["bytes_after_add"]  # type: ignore[no-any-return]


def depth(r: dict[str, Any]) -> str:
    """The tuned ef_search and what the tuning measured; runs from before the tuning searched at 40."""
    index = r.get("index") or {}
    if index.get("measured_recall_at_10") is None:
        return f"{index.get('ef_search', 40)} (not tuned)"
    return f"{index['ef_search']} ({index['measured_recall_at_10']:.3f}, {r['tune_s']:,.0f} s)"


def _mb(x: float | None) -> str:
    return "not readable" if x is None else f"{x:,.0f} MB"


def _peak(r: dict[str, Any], key: str) -> str:
    return _mb(((r.get("server_memory") or {}).get("peak") or {}).get(key))


ROWS: list[tuple[str, Any]] = [
    ("bulk add (`add_many`, batches of 10,000; HNSW kept up row by row unless built after)", lambda r: f"{r['add']['items_per_s']:,.0f} items/s"),
    ("HNSW index built after the load (`--index-after-load`)", lambda r: f"{r['index_build_s']:,.0f} s" if r.get("index_after_load") else "—"),
    ("ef_search: tuned (recall@10 it measured, seconds the tuning took)", lambda r: depth(r)),
    ("recall@10 of the whole recall vs exact search", lambda r: f"{r['recall_at_10']:.4f}"),
    ("recall (`retrieve`, logged) p50 / p95", lambda r: f"{r['retrieve']['p50_ms']:.2f} / {r['retrieve']['p95_ms']:.2f} ms"),
    ("its index search in the database p50 / p95", lambda r: f"{r['index_search']['p50_ms']:.2f} / {r['index_search']['p95_ms']:.2f} ms"),
    ("recall p50 / index search p50", lambda r: f"{r['ratio_vs_index']:.2f}"),
    ("one `reinforce` call p50", lambda r: f"{r['reinforce']['p50_ms']:.2f} ms"),
    ("one `write` call (grouping on) p50 / p95", lambda r: f"{r['write']['p50_ms']:.2f} / {r['write']['p95_ms']:.2f} ms"),
    ("grouped `add_many` (1,000 new items)", lambda r: f"{r['grouped_add']['items_per_s']:,.0f} items/s"),
    ("reopen + first answer, fresh process (imports excluded)", lambda r: f"{r['reopen']['reopen_s']:.2f} s"),
    ("client peak RSS (the reopening process)", lambda r: _mb(r["reopen"]["peak_rss_mb"])),
    ("server peak RSS summed over its processes", lambda r: _peak(r, "rss_mb")),
    ("server peak PSS (shared pages counted once)", lambda r: _peak(r, "pss_mb")),
    ("database bytes per item after the load (and the index built after it)", lambda r: f"{loaded(r)['database'] / r['items']:,.0f}"),
    ("of which the HNSW index", lambda r: f"{loaded(r)['hnsw_index'] / r['items']:,.0f}"),
    ("database bytes per item at the end (with the recall log)", lambda r: f"{r['bytes_at_end']['database'] / r['items']:,.0f}"),
    ("load average (1 min) at start / end", lambda r: f"{r['load_average']['start'][0]:.2f} / {r['load_average']['end'][0]:.2f}"),
]  # fmt: skip


def comparison(sizes: dict[str, Any]) -> list[str]:
    """PostgreSQL next to the in-process index (SQLite, ``index="auto"``) on the same vectors, same run."""
    both = {n: r for n, r in sizes.items() if "sqlite" in r}
    if not both:
        return []
    lines = [
        "",
        '## Next to the in-process index (SQLite, `index="auto"`), same vectors and queries, same run',
        "",
        "| size | measure | PostgreSQL + pgvector | SQLite + in-process index | PostgreSQL / SQLite |",
        "|---:|---|---:|---:|---:|",
    ]
    pairs = [
        ("recall p50 (ms)", lambda r: r["retrieve"]["p50_ms"], ".2f"),
        ("recall p95 (ms)", lambda r: r["retrieve"]["p95_ms"], ".2f"),
        ("recall@10", lambda r: r["recall_at_10"], ".4f"),
        ("one `reinforce` p50 (ms)", lambda r: r["reinforce"]["p50_ms"], ".2f"),
        ("one `write` p50 (ms)", lambda r: r["write"]["p50_ms"], ".2f"),
        ("grouped `add_many` (items/s)", lambda r: r["grouped_add"]["items_per_s"], ",.0f"),
        ("reopen + first answer (s)", lambda r: r["reopen"]["reopen_s"], ".2f"),
        ("client peak RSS (MB)", lambda r: r["reopen"]["peak_rss_mb"], ",.0f"),
    ]
    for n, r in both.items():
        for label, get, spec in pairs:
            pg, lite = float(get(r)), float(get(r["sqlite"]))
            ratio = f"{pg / lite:.2f}" if lite else "—"
            lines.append(f"| {int(n):,} | {label} | {pg:{spec}} | {lite:{spec}} | {ratio} |")
    return lines


def notes(sizes: dict[str, Any]) -> list[str]:
    lines = ["", "## Notes", ""]
    for n, r in sizes.items():
        rates = r["add"]["batch_items_per_s"]
        reopen = (
            f"Reopen: index `{r['reopen']['index']}`, mirror `{r['reopen']['mirror']}` (the process still reads "
            "every key vector, Q and visit count from SQL into its mirror on open)."
        )
        if r.get("index_after_load"):
            lines.append(
                f"- {int(n):,} items: loaded with no HNSW index in the database (`--index-after-load`): "
                f"{rates[0]:,} items/s for the first batch, {rates[-1]:,} for the last; then the default store's open "
                f"built the index over them in {r['index_build_s']:,.0f} s (maintenance_work_mem {BUILD_MEMORY} and two "
                f"parallel workers for that database; {r['bytes_after_index']['hnsw_index'] / r['items']:,.0f} "
                f"bytes an item). {reopen}"
            )
            continue
        lines.append(
            f"- {int(n):,} items: the HNSW index existed before the first row (`{r['hnsw_before_add']}`), so "
            f"each insert went into the graph: {rates[0]:,} items/s for the first batch, {rates[-1]:,} for the last. "
            + reopen
        )
        est = add_estimate_s(rates, r["add"]["batch"], 1_000_000) if int(n) < 1_000_000 else None
        if est is not None:
            lines.append(
                f"- Extrapolated from these batches (insert cost a + b·ln n), a bulk load to 1,000,000 items would "
                f"take at least {est / 60:,.0f} minutes on this machine; more once the graph outgrows shared_buffers "
                "and the page cache."
            )
    lines.append(
        "- The recall's ef_search is the namespace's tuned depth, at least 2·k1 + 16, with pgvector's iterative scan "
        "(strict order), so the namespace filter cannot starve phase A. The depth is measured once the namespace "
        "holds 20,000 items and again when it has doubled (`memory.mirror.pgvector`); runs from before the tuning "
        "searched at 40. recall@10 is measured against an exact scan of the same vectors."
    )
    return lines
