"""The markdown page of ``bench.loop_overhead``: the figures next to their target, where the time goes,
and the hottest functions."""

from __future__ import annotations

from typing import Any

PHASES = {
    "recall": "memory recall (`retrieve_many`: embed, index search, phase A/B, recall log)",
    "generate": "the model call through `ChatClient` (zero latency here: wrapper, accounting, thread pool)",
    "act_other": "the rest of `Team.act` (prompt rendering, steps)",
    "env": "environment reset and step (checking the answer)",
    "batch_other": "the rest of `run_batch` (building episodes)",
    "run_log": "run log: recording the batch's episodes and marking them learned",
    "reinforce": "`reinforce_many` (one Q update per batch)",
    "write": "writing the batch's experiences to memory",
    "metrics": "round metrics and the round's row",
    "round_other": "the rest of the round (schedule, resume checks)",
}


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["profile"]
    loop, bare = results["loop"], results["loop_no_memory"]
    target = results["target_ms_per_episode"]
    verdict = "meets" if loop["ms_per_episode"] <= target else "misses"
    lines = [
        "# The loop's own overhead",
        "",
        f"Machine: {m['cpu_count']} CPUs ({m['cpu']}), Python {m['python']}, numpy {m['numpy']}, faiss {m['faiss']}, "
        f"SQLAlchemy {m['sqlalchemy']}; {m['platform']}; load average at start {m['load_average_at_start']}.",
        f"Profile `{results.get('profile_name', '?')}`: {p['tasks']} generated facility-code tasks (paraphrased each "
        f"round), {p['rounds']} rounds, batches of {p['batch_size']}; `ScriptedChat` (zero latency, copies the last "
        "recalled code), `HashEmbedder`, SQLite file store with its FAISS index, `learn=True`. "
        "Run `python -m bench.loop_overhead`.",
        "",
        "| loop | ms per episode (wall) | CPU ms per episode | episodes/s | target |",
        "|---|---|---|---|---|",
        f"| with memory (recall, reinforce, write) | **{loop['ms_per_episode']:.3f}** | {loop['cpu_ms_per_episode']:.3f} "
        f"| {loop['episodes_per_s']:,.0f} | <= {target:g} ms ({verdict} it) |",
        f"| without memory | {bare['ms_per_episode']:.3f} | {bare['cpu_ms_per_episode']:.3f} "
        f"| {bare['episodes_per_s']:,.0f} | |",
        "",
        "CPU time is the process's own (all its threads); when other work shares the cores, wall time grows "
        "and CPU time much less.",
        "",
        f"Per round (ms per episode, with memory): {_join(loop['rounds_ms_per_episode'])}; memory size after each "
        f"round: {', '.join(str(s) for s in loop['memory_size'])}; success rate: {_join(loop['success_rate'], 2)}.",
        "",
        "## Where the time goes (ms per episode)",
        "",
        "| phase | with memory | without memory | what it is |",
        "|---|---|---|---|",
    ]
    for key, what in PHASES.items():
        lines.append(
            f"| {key} | {loop['phases_ms_per_episode'][key]:.3f} | {bare['phases_ms_per_episode'][key]:.3f} | {what} |"
        )
    lines += ["", *_generation(results.get("generation")), *_profile(results["cprofile"])]
    return "\n".join(lines) + "\n"


def _generation(gen: dict[str, Any] | None) -> list[str]:
    if not gen:
        return []
    s, b = gen["single"], gen["batched"]
    return [
        "## Local generation: batched across episodes vs one at a time",
        "",
        f"{gen['model']} on {gen['torch_threads']} torch threads, {gen['prompts']} episode prompts (the loop's own "
        f"messages), up to {gen['max_new_tokens']} new tokens, greedy; model load {gen['load_s']:.1f} s; 1-minute load "
        f"average {gen['load_average']['before']} before and {gen['load_average']['after']} after (above the core "
        "count, other work slows generation down).",
        "",
        "| mode | seconds | tokens | tokens/s | episodes/s |",
        "|---|---|---|---|---|",
        f"| one at a time | {s['seconds']:.2f} | {s['tokens']} | {s['tokens_per_s']:.1f} | {s['episodes_per_s']:.2f} |",
        f"| one batch | {b['seconds']:.2f} | {b['tokens']} | {b['tokens_per_s']:.1f} | {b['episodes_per_s']:.2f} |",
        "",
        f"Batching speed-up: **{gen['speedup']:.2f}x** tokens/s. {gen['same_text']} of {gen['prompts']} answers are "
        "identical in both modes (left padding can shift float rounding, so a greedy answer may differ slightly).",
        "",
    ]


def _profile(prof: dict[str, Any], n: int = 15) -> list[str]:
    lines = [
        "## Hottest functions (cProfile, own time, loop with memory)",
        "",
        "| function | calls | own s | cum s |",
        "|---|---|---|---|",
    ]
    for row in prof["by_tottime"][:n]:
        lines.append(f"| `{row['function']}` | {row['calls']} | {row['tottime_s']:.3f} | {row['cumtime_s']:.3f} |")
    return lines + [""]


def _join(values: list[float], digits: int = 3) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)
