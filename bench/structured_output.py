"""Structured output on SmolLM2-135M: generated under a grammar (valid by construction) against prompted and
parsed (today's retries), and the two grammar libraries that could do it, measured in one run.

1. **Libraries.** llguidance (what ``connectors.constrained`` ships) and xgrammar, each as the logits processor
   of the same ``LocalChat`` on the JSON-schema requests, and unconstrained generation of the same prompts (the
   same instruction a served request gets) as the baseline: the tokenizer's one-time setup, grammar compile
   time (median over the schemas), mask time per token on SmolLM2's 49,152-token vocabulary, seconds per answer
   and the share of answers that parse and fit their schema.
2. **Served.** ``Deployment.answer`` — what ``evolve serve`` runs for a chat completion — on a one-agent SmolLM2
   spec, for JSON of a schema, any JSON object, and calls under ``tool_choice`` required and named
   (``bench.structured_requests``): the share valid on the first try (the model asked once), the share valid
   after the validate-and-retry loop, and seconds per answer; under the grammar and prompted only.
3. **BFCL.** When ``python -m bench.bfcl_learning --calls constrained`` and ``--calls prompted`` have both
   written their reports (same seeds), their accuracies and the paired difference, seed by seed.

Run: python -m bench.structured_output [--requests 50] [--max-tokens 128] [--threads N] [--parts libraries served]
     [--bfcl FOLDER]
Writes bench/results/structured_output.{json,md} and the ``structured_*`` keys of bench/results/summary.json
(``structured_valid_share_smollm2`` and ``structured_answer_s_p50``, the served figures under the grammar, with
their ``_prompted`` baselines).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from bench.common import machine, merge_summary
from bench.structured_libraries import LIBRARIES, library_setup, library_table
from bench.structured_requests import StructuredRequest, structured_requests
from evolve.intervals import paired_interval, seed_interval

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SPEC = """
[run]
name = "structured"
database = "sqlite:///{db}"

[model]
chat = "local/smollm2"
options = {{ threads = {threads}, constrained = {constrained} }}
max_tokens = {max_tokens}

[embedder]
name = "hash"

[environment]
tasks = "unused.jsonl"

[[agents]]
name = "assistant"
system = "You are a helpful assistant."
"""


def served(
    requests: Sequence[StructuredRequest], *, constrained: bool, max_tokens: int, threads: int
) -> dict[str, Any]:
    """Every request through ``Deployment.answer`` on SmolLM2, one at a time: per kind and in all, the share
    valid on the first try and after retries, and seconds per answer (p50, p90)."""
    from evolve.serve.deployment import Deployment
    from evolve.spec import load_spec

    with tempfile.TemporaryDirectory(prefix="evolve-bench-structured-") as tmp:
        spec = Path(tmp) / "spec.toml"
        spec.write_text(SPEC.format(db=Path(tmp) / "serve.db", threads=threads, max_tokens=max_tokens,
                                    constrained=str(constrained).lower()))  # fmt: skip
        deployment = Deployment(load_spec(spec))
        try:
            serve_one(deployment, requests[0])  # loads the model (and the grammar's tokenizer view)
            mode = "constrained" if constrained else "prompted"
            rows = [serve_one(deployment, r) for r in tqdm(requests, desc=f"served, {mode}", unit="request")]
        finally:
            deployment.close()
    kinds = sorted({r["kind"] for r in rows})
    return {"all": figures(rows), "kinds": {k: figures([r for r in rows if r["kind"] == k]) for k in kinds},
            "rows": rows}  # fmt: skip


def serve_one(deployment: Any, request: StructuredRequest) -> dict[str, Any]:
    """One answer: its kind, seconds, how many times the model was asked, whether it came back valid, its text."""
    from evolve.serve.answer_checks import FailedAnswer

    before, started = deployment.chat.calls, time.perf_counter()
    try:
        answer = deployment.answer(
            list(request.messages), tenant="bench", params={**request.params, "seed": 0},
            tools=list(request.tools) or None, response_format=request.response_format,
        )  # fmt: skip
        text, valid = answer.text, fits(request, answer.text, answer.tool_calls)
    except FailedAnswer as failed:
        text, valid = failed.raw, False
    asked = deployment.chat.calls - before
    seconds = time.perf_counter() - started
    return {"kind": request.kind, "seconds": round(seconds, 3), "asked": asked, "valid": valid,
            "first_try": valid and asked == 1, "text": text[:300]}  # fmt: skip


def fits(request: StructuredRequest, text: str, calls: Sequence[Any]) -> bool:
    """Whether a served answer is what was asked for, checked here again: JSON of the schema (or an object), or
    calls to the request's tools whose arguments fit their schemas."""
    from connectors.tools import argument_problem
    from evolve.serve import formats

    if request.tools:
        known = {t.name: t for t in request.tools}
        return bool(calls) and all(c.name in known and argument_problem(known[c.name], c.arguments) is None
                                   for c in calls)  # fmt: skip
    fmt = formats.response_format(request.response_format)
    return fmt is not None and formats.read_json(text, fmt)[1] == ""


def figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    seconds = [r["seconds"] for r in rows]
    return {
        "requests": len(rows),
        "valid_first_try": round(sum(r["first_try"] for r in rows) / len(rows), 4),
        "valid_after_retries": round(sum(r["valid"] for r in rows) / len(rows), 4),
        "asked_mean": round(statistics.mean(r["asked"] for r in rows), 2),
        "seconds_p50": round(statistics.median(seconds), 3),
        "seconds_p90": round(sorted(seconds)[int(0.9 * (len(seconds) - 1))], 3),
    }


def bfcl_comparison(out: Path) -> dict[str, Any]:
    """The two ``bench.bfcl_learning --calls`` reports at ``out``, when both exist: per category and condition,
    transfer and last-epoch accuracy under each mode and constrained − prompted seed by seed."""
    reports = {m: out / f"bfcl_learning_calls_{m}.json" for m in ("constrained", "prompted")}
    if not all(p.exists() for p in reports.values()):
        return {}
    grammar, prompted = (json.loads(p.read_text(encoding="utf-8")) for p in reports.values())
    if grammar["settings"]["seeds"] != prompted["settings"]["seeds"]:
        return {"note": "the two reports ran other seeds: no paired comparison"}
    cells: dict[str, Any] = {}
    for category, block in grammar["categories"].items():
        for cond, cell in block["conditions"].items():
            other = prompted["categories"].get(category, {}).get("conditions", {}).get(cond)
            if other is None:
                continue
            for key in ("transfer", "last"):
                a, b = cell[f"{key}_per_seed"], other[f"{key}_per_seed"]
                d = paired_interval(baseline=b, treatment=a)
                cells[f"{category}_{cond}_{key}"] = {
                    "constrained": round(seed_interval(a).mean, 4), "prompted": round(seed_interval(b).mean, 4),
                    "difference": [round(d.mean, 4), round(d.low, 4), round(d.high, 4)], "seeds": len(a),
                }  # fmt: skip
    return {"settings": grammar["settings"], "cells": cells}


def summary_keys(result: dict[str, Any]) -> dict[str, float]:
    """The ``structured_*`` keys of summary.json."""
    keys: dict[str, float] = {}
    if result["served"]:
        grammar, prompted = result["served"]["constrained"]["all"], result["served"]["prompted"]["all"]
        keys |= {
            "structured_valid_share_smollm2": grammar["valid_first_try"],
            "structured_answer_s_p50": grammar["seconds_p50"],
            "structured_valid_share_smollm2_prompted": prompted["valid_first_try"],
            "structured_valid_share_smollm2_prompted_after_retries": prompted["valid_after_retries"],
            "structured_answer_s_p50_prompted": prompted["seconds_p50"],
            "structured_requests": grammar["requests"],
        }
    for name, lib in result["libraries"].get("answers", {}).items():
        keys[f"structured_lib_{name}_answer_s_p50"] = lib["seconds_p50"]
        keys[f"structured_lib_{name}_valid_share"] = lib["valid_share"]
        for field in ("ms_per_token", "compile_ms_p50", "mask_us_per_token"):
            if field in lib:
                keys[f"structured_lib_{name}_{field}"] = lib[field]
    for cell, c in result["bfcl"].get("cells", {}).items():
        keys[f"structured_bfcl_{cell}_constrained"], keys[f"structured_bfcl_{cell}_prompted"] = (
            c["constrained"], c["prompted"])  # fmt: skip
        for suffix, value in zip(("mean", "ci_low", "ci_high"), c["difference"], strict=True):
            keys[f"structured_bfcl_{cell}_constrained_minus_prompted_{suffix}"] = value
    return keys


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        "# Structured output on SmolLM2-135M", "",
        f"{s['requests']} requests, max_tokens {s['max_tokens']}, {s['threads']} threads; {result['seconds']:.0f} s.",
        "", "## Grammar libraries (the JSON-schema requests, one `LocalChat`)", "",
        *(library_table(result["libraries"]) if result["libraries"] else ["(not run)"]),
        "", "## Served (`Deployment.answer`, as `evolve serve` answers)", "",
        "| decoding | kind | requests | valid, first try | valid after retries | model asked | s p50 | s p90 |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for mode, block in result["served"].items():
        for kind, f in [("all", block["all"]), *block["kinds"].items()]:
            lines.append(f"| {mode} | {kind} | {f['requests']} | {f['valid_first_try']:.0%} | "
                         f"{f['valid_after_retries']:.0%} | {f['asked_mean']} | {f['seconds_p50']} | {f['seconds_p90']} |")  # fmt: skip
    cells = result["bfcl"].get("cells", {})
    if cells:
        lines += ["", "## BFCL (`bench.bfcl_learning --calls constrained|prompted`, same seeds)", "",
                  "| cell | constrained | prompted | constrained − prompted (95% CI) | seeds |", "|---|---|---|---|---|"]  # fmt: skip
        for name, c in cells.items():
            d = c["difference"]
            lines.append(f"| {name} | {c['constrained']} | {c['prompted']} | {d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] | "
                         f"{c['seeds']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(prog="python -m bench.structured_output", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=50, help="structured requests served (half JSON of a schema)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    p.add_argument("--parts", nargs="+", choices=("libraries", "served"), default=["libraries", "served"])
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--bfcl", type=Path, help="the folder of the two bfcl_learning --calls reports (default: --out)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    requests = structured_requests(args.requests)
    settings = {"requests": args.requests, "max_tokens": args.max_tokens, "threads": args.threads}
    schema_requests = [r for r in requests if r.kind == "json_schema"]
    sizes = {"max_tokens": args.max_tokens, "threads": args.threads}
    result: dict[str, Any] = {
        "settings": settings,
        "machine": machine(),
        "libraries": library_setup(schema_requests, args.libraries, **sizes) if "libraries" in args.parts else {},
        "served": {
            mode: served(requests, constrained=mode == "constrained", **sizes)
            for mode in ("constrained", "prompted")
            if "served" in args.parts
        },  # fmt: skip
        "bfcl": bfcl_comparison(args.bfcl or args.out),
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "structured_output.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / "structured_output.md").write_text(markdown(result), encoding="utf-8")
    merge_summary(args.out / "summary.json", summary_keys(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
