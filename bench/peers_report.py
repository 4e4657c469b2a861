"""The peers' results as pages: Evolve's advantage over each system, summary keys and the markdown."""

from __future__ import annotations

from typing import Any

from bench.memory_speed_report import size_tag
from bench.peers_systems import CLASSES, EVOLVE_MODES, UPDATE_ITEMS

LOWER_IS_BETTER = ("p50_ms", "p95_ms", "reopen_s", "bytes_per_item", "rss_mb")
HIGHER_IS_BETTER = ("recall_at_10", "insert_items_per_s", "update_calls_per_s")
SUMMARY_METRICS = ("p50_ms", "p95_ms", "recall_at_10", "reopen_s", "rss_mb")


def advantages(systems: dict[str, dict[str, Any]], reference: str) -> dict[str, dict[str, float | None]]:
    """For every other system, Evolve's (``reference``'s) advantage per metric: how many times better
    the reference is (> 1: Evolve ahead; for times, bytes and RSS the other's over Evolve's, for rates and
    recall Evolve's over the other's). None where either side has no figure."""
    ref = systems.get(reference, {})
    out: dict[str, dict[str, float | None]] = {}
    for name, r in systems.items():
        if name == reference:
            continue
        row: dict[str, float | None] = {}
        for metric in LOWER_IS_BETTER + HIGHER_IS_BETTER:
            mine, theirs = ref.get(metric), r.get(metric)
            if not mine or not theirs:
                row[metric] = None
            else:
                row[metric] = theirs / mine if metric in LOWER_IS_BETTER else mine / theirs
        out[name] = row
    return out


def key(name: str) -> str:
    return name.replace("-", "_")


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """Flat ``peers_*`` keys for summary.json: each system's main figures, Evolve's p50 advantage over
    each, and the smallest p50 advantage over a system that is not Evolve (with that system's name)."""
    flat: dict[str, Any] = {}
    for n, size in results["sizes"].items():
        tag = size_tag(int(n))
        for name, r in size["systems"].items():
            for metric in SUMMARY_METRICS:
                if r.get(metric) is not None:
                    flat[f"peers_{key(name)}_{metric}_{tag}"] = round(r[metric], 4)
        others = {
            name: row["p50_ms"]
            for name, row in size["advantage"].items()
            if row["p50_ms"] is not None and name not in EVOLVE_MODES
        }
        for name, adv in others.items():
            flat[f"peers_{key(name)}_p50_advantage_{tag}"] = round(adv, 3)
        usearch = size["advantage"].get("usearch", {}).get("p50_ms")
        if usearch:  # Evolve's whole recall against usearch's raw search: at most 1 is the aim (issue 43)
            flat[f"peers_evolve_vs_usearch_p50_ratio_{tag}"] = round(1 / usearch, 3)
        if others:
            closest = min(others, key=lambda name: others[name])
            flat[f"peers_p50_min_advantage_{tag}"] = round(others[closest], 3)
            flat[f"peers_p50_closest_{tag}"] = closest
    return flat


def fmt(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def size_tables(n: str, size: dict[str, Any]) -> list[str]:
    reference = size["reference"]
    lines = [
        f"## {int(n):,} items",
        "",
        f"{size['queries']:,} queries, {size['updates']} update calls per system; each system measured in a step "
        "of its own (`--resume` goes on from the last one written), when and at what load average below.",
        "",
        "| system | insert items/s | p50 ms | p95 ms | recall@10 | reopen + first query s | update calls/s "
        "| bytes/item | serve RSS MB | build RSS MB | measured (load average) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    errors = []
    for name, r in size["systems"].items():
        if "error" in r:
            errors.append(f"- **{name}**: {r['error']}")
            if "insert_items_per_s" not in r:  # built: its build's figures are a row, the rest a dash
                continue
        lines.append(
            f"| {name} | {fmt(r.get('insert_items_per_s'), ',.0f')} | {fmt(r.get('p50_ms'), '.2f')} "
            f"| {fmt(r.get('p95_ms'), '.2f')} | {fmt(r.get('recall_at_10'), '.3f')} | {fmt(r.get('reopen_s'), '.3f')} "
            f"| {fmt(r.get('update_calls_per_s'), ',.0f')} | {fmt(r.get('bytes_per_item'), ',.0f')} "
            f"| {fmt(r.get('rss_mb'), ',.0f')} | {fmt(r.get('build_rss_mb'), ',.0f')} "
            f"| {r.get('measured_at', '—')} ({r.get('load_average', size.get('load_average_at_start'))}) |"
        )
    lines += ["", f"Evolve's advantage (`{reference}`; > 1: Evolve ahead by that factor, < 1: behind):", ""]
    lines += [
        "| system | p50 | p95 | recall@10 | reopen | insert | updates | bytes/item | serve RSS |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    order = ("p50_ms", "p95_ms", "recall_at_10", "reopen_s", "insert_items_per_s", "update_calls_per_s",
             "bytes_per_item", "rss_mb")  # fmt: skip
    for name, row in size["advantage"].items():
        lines.append(f"| {name} | " + " | ".join(fmt(row[m], ".2f") for m in order) + " |")
    for name, r in size["systems"].items():
        if r.get("p50_warm_ms") is not None:
            lines.append(
                f"\n`{name}`, the same queries again, each logged and not (`record=False`), alternating: p50 "
                f"{r['p50_warm_ms']:.2f} and {r['p50_no_log_ms']:.2f} ms, p95 {r['p95_warm_ms']:.2f} and "
                f"{r['p95_no_log_ms']:.2f} ms (the recall log's cost is the difference; both faster than the first "
                "pass, whose caches were cold)."
            )
        elif r.get("p50_no_log_ms") is not None:  # measured before the alternating pass
            lines.append(
                f"\n`{name}` without the recall log (`record=False`), the same queries in a second pass: p50 "
                f"{r['p50_no_log_ms']:.2f} ms, p95 {r['p95_no_log_ms']:.2f} ms; that pass found the caches warm, so "
                "the difference from the first is not the log's cost alone."
            )
    timed = {r.get("queries") for r in size["systems"].values() if "error" not in r}
    if len(timed) > 1:
        lines.append(f"\nQueries timed differ by system ({sorted(q for q in timed if q)}): see `--budget-s`.")
    if errors:
        lines += ["", "Not measured:", "", *errors]
    return lines + [""]


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Vector stores side by side",
        "",
        f"`python -m bench.peers` on {m['cpu_count']} cores ({m['cpu']}). Every system gets the same clustered "
        "384-d unit vectors and the same queries (noisy copies of stored vectors) per size; recall@10 is against the "
        "exact top-10 computed once with NumPy. Each system runs in two fresh processes: `build` (insert in "
        "chunks of 10,000, finish the index, close; items/s counts all three; bytes on disk after close) and "
        "`serve` (reopen and first query, imports excluded; 20 warm-up queries; every query timed one at a "
        f"time; then score updates, one call per result moving its top {UPDATE_ITEMS} items; "
        "peak RSS of that process). Evolve's figures are its full recall: phase A on the index, phase B on "
        "similarity and Q, the recall logged; its update is one `reinforce` call (Q and visits, in SQL).",
        "",
    ]
    for n, size in results["sizes"].items():
        lines += size_tables(n, size)
    lines += ["## How each system is run", ""]
    names = list(dict.fromkeys(name for size in results["sizes"].values() for name in size["systems"]))
    for cls in dict.fromkeys(CLASSES[name] for name in names):
        mine = [name for name in names if CLASSES[name] is cls]
        versions = {
            r["version"]
            for s in results["sizes"].values()
            for n, r in s["systems"].items()
            if n in mine and r.get("version")
        }
        tag = f" ({', '.join(sorted(versions))})" if versions else ""
        lines.append(f"- **{', '.join(mine)}**{tag}: " + " ".join((cls.__doc__ or "").split()))
    return "\n".join(lines) + "\n"
