"""Does our BFCL AST checker (``evolve.envs.bfcl.ast_check``) give the official checker's verdicts?

Run ``python -m bench.bfcl_checker_agreement [--official-venv PATH] [--no-exhaustive]``.

1. Recorded answers (``bench.bfcl_checker_answers``, fixed seed): for sampled rows of simple_python,
   multiple, parallel, parallel_multiple and live_simple, a right, a wrong and a corner-case answer
   each, written with the row's functions and ground truth to ``bench/results/bfcl_checker_answers.jsonl``.
2. A throwaway venv under a temporary folder gets the official ``bfcl-eval`` with its dependencies
   (``-c constraints.txt`` keeps torch the CPU build; ``soundfile``, which its qwen-agent imports but does
   not declare, is added). Should that fail, ``--no-deps`` plus the packages its model table imports.
3. ``bench/bfcl_official_runner.py``, run by that venv's python, puts every answer through BFCL's
   ``ast_checker``; ours checks the same answers here. Both also decode each answer's call text.
4. Exhaustive pass (unless ``--no-exhaustive``): every variation on every row of the five categories,
   three seeds, checked by both; only the counts are kept.

Results: ``bench/results/bfcl_checker_agreement.{json,md}`` (per-answer official verdicts for step 1).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bench.bfcl_checker_answers import CATEGORIES, CORNERS, RIGHT, WRONG, make_answers
from bench.common import machine
from evolve.envs.bfcl.ast_check import calls_text, check_calls, decode_answer, reference_calls
from evolve.envs.bfcl.data import read_rows

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
RUNNER = Path(__file__).parent / "bfcl_official_runner.py"
BFCL = "bfcl-eval==2026.3.23"
UNDECLARED = ["soundfile"]  # qwen_agent.utils imports it at module level without requiring it
NO_DEPS_IMPORTS = [  # what bfcl_eval.constants.model_config and the checker import, for the --no-deps fallback
    "openai", "anthropic", "mistralai==1.7.0", "cohere==5.18.0", "google-genai", "qwen-agent", "writer-sdk",
    "boto3", "tenacity", "overrides", "python-dotenv", "requests", "tqdm", "pydantic", "numpy", "pandas",
    "tree_sitter==0.21.3", "tree-sitter-java==0.21.0", "tree-sitter-javascript==0.21.4", "huggingface_hub",
    "typer", "tabulate", "filelock", "soundfile",
]  # fmt: skip


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def _imports(python: Path) -> bool:
    probe = "from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker"
    return subprocess.run([str(python), "-c", probe], capture_output=True, text=True).returncode == 0


def official_venv(folder: Path) -> tuple[Path, str]:
    """A venv in ``folder`` whose python imports the official checker, and how bfcl-eval went in."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    full = _pip(python, BFCL, *UNDECLARED)
    if full.returncode == 0 and _imports(python):
        return python, f"{BFCL} with its dependencies (pip -c constraints.txt) plus {', '.join(UNDECLARED)}"
    print(f"full install failed or does not import; trying --no-deps:\n{full.stderr[-2000:]}", flush=True)
    _pip(python, "--no-deps", BFCL)
    slim = _pip(python, *NO_DEPS_IMPORTS)
    if slim.returncode == 0 and _imports(python):
        return python, f"{BFCL} --no-deps plus the packages its model table imports: {', '.join(NO_DEPS_IMPORTS)}"
    raise SystemExit(
        "COULD NOT INSTALL the official bfcl-eval checker (full and --no-deps installs both failed); no "
        f"agreement was measured.\n{slim.stderr[-2000:]}"
    )


def _with_text(answers: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for answer in answers:
        yield {**answer, "model_text": calls_text(answer["model_output"]) if answer["model_output"] else "[]"}


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = list(rows)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return rows


def run_official(python: Path, answers: Path, out: Path) -> dict[str, Any]:
    subprocess.run([str(python), str(RUNNER), str(answers), str(out)], check=True)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def compare(answers: list[dict[str, Any]], official: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per answer: the official verdict, ours, and whether each decoder read the call text back."""
    by_id = {v["id"]: v for v in official["verdicts"]}
    out = []
    for a in answers:
        theirs = by_id[a["id"]]
        ours = check_calls(a["functions"], a["ground_truth"], a["model_output"], a["category"])
        decoded = decode_answer(a["model_text"])
        out.append({
            "id": a["id"], "category": a["category"], "kind": a["kind"], "intended_valid": a["intended_valid"],
            "official_valid": theirs["valid"], "official_error_type": theirs["error_type"],
            "official_error": " ".join(map(str, theirs["error"]))[:300], "ours_valid": ours.valid,
            "ours_error": ours.error, "agree": ours.valid == theirs["valid"],
            "bfcl_decodes_text": theirs.get("bfcl_decodes_text"),
            "ours_decodes_text": json.loads(json.dumps(decoded)) == a["model_output"],
        })  # fmt: skip
    return out


def counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "answers": len(rows),
        "official_valid": sum(r["official_valid"] for r in rows),
        "official_invalid": sum(not r["official_valid"] for r in rows),
        "official_raised": sum(r["official_error_type"] == "checker_raised" for r in rows),
        "agree": sum(r["agree"] for r in rows),
        "bfcl_decodes_text": sum(bool(r["bfcl_decodes_text"]) for r in rows),
        "ours_decodes_text": sum(r["ours_decodes_text"] for r in rows),
    }


def grouped(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r[key])].append(r)
    return {k: counts(v) for k, v in sorted(groups.items())}


def exhaustive_answers(seeds: int = 3) -> Iterator[dict[str, Any]]:
    """Every applicable variation on every row of the five categories, once per seed."""
    variations = {**RIGHT, **WRONG, **CORNERS}
    for seed in range(seeds):
        rng = random.Random(seed)
        for category in CATEGORIES:
            for row in read_rows(category):
                row = {**row, "category": category}
                calls = reference_calls(row["function"], row["ground_truth"])
                for kind, vary in variations.items():
                    output = vary(row, calls, rng)
                    if output is not None:
                        yield {
                            "id": f"{row['id']}:{kind}:{seed}", "category": category, "kind": kind,
                            "intended_valid": None, "model_output": output, "functions": row["function"],
                            "ground_truth": row["ground_truth"],
                        }  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    total = result["totals"]
    lines = [
        "# BFCL AST checker: ours against the official one",
        "",
        f"Official checker: `{result['bfcl_eval_version']}` (`ast_checker`, Python, model `{result['model_name']}`),"
        f" installed as {result['install']}. Seed {result['seed']}, {result['rows_per_category']} rows per category.",
        "",
        f"**{total['agree']} of {total['answers']} recorded answers agree** ({total['official_valid']} right and"
        f" {total['official_invalid']} wrong by the official checker; it raised on {total['official_raised']}).",
        f"Call text read back to the recorded calls: BFCL's decoder {total['bfcl_decodes_text']}, ours {total['ours_decodes_text']}.",
        "",
        "| category | answers | official right | official wrong | agree |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, c in result["by_category"].items():
        lines.append(f"| {name} | {c['answers']} | {c['official_valid']} | {c['official_invalid']} | {c['agree']} |")
    lines += ["", "| variation | answers | official right | official wrong | agree |", "|---|---:|---:|---:|---:|"]
    for name, c in result["by_kind"].items():
        lines.append(f"| {name} | {c['answers']} | {c['official_valid']} | {c['official_invalid']} | {c['agree']} |")
    ex = result.get("exhaustive")
    if ex:
        lines += ["", f"Exhaustive pass (every variation on every row, 3 seeds): **{ex['agree']} of {ex['answers']} agree**"
                  f" ({ex['official_valid']} right, {ex['official_invalid']} wrong by the official checker)."]  # fmt: skip
        if ex["unanswerable_rows"]:
            lines += ["", "Rows no call can pass (their possible answer lists no allowed value for an argument, `[]`): "
                      + ", ".join(ex["unanswerable_rows"]) + ". `BfclEnv` says so in its feedback."]  # fmt: skip
    if result["disagreements"]:
        lines += ["", "Disagreements: " + ", ".join(result["disagreements"])]
    lines += [
        "",
        f"Machine: {result['machine'].get('cpu', '?')}; {result['seconds']:.0f} s in all, the install included.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official-venv", type=Path, help="reuse a venv that already imports bfcl_eval's checker")
    parser.add_argument("--rows-per-category", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-exhaustive", action="store_true", help="skip the pass over every variation and row")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    RESULTS.mkdir(exist_ok=True)
    answers = write_jsonl(
        RESULTS / "bfcl_checker_answers.jsonl",
        _with_text(make_answers(rows_per_category=args.rows_per_category, seed=args.seed)),
    )
    print(f"{len(answers)} recorded answers", flush=True)
    with tempfile.TemporaryDirectory(prefix="bfcl-official-") as tmp:
        if args.official_venv:
            python, install = args.official_venv / "bin" / "python", f"an existing venv ({args.official_venv})"
        else:
            python, install = official_venv(Path(tmp) / "venv")
        official = run_official(python, RESULTS / "bfcl_checker_answers.jsonl", Path(tmp) / "verdicts.json")
        rows = compare(answers, official)
        exhaustive = None
        if not args.no_exhaustive:
            every = write_jsonl(Path(tmp) / "every.jsonl", _with_text(exhaustive_answers()))
            checked = compare(every, run_official(python, Path(tmp) / "every.jsonl", Path(tmp) / "every.json"))
            exhaustive = counts(checked)
            exhaustive["disagreements"] = [r["id"] for r in checked if not r["agree"]][:50]
            exhaustive["unanswerable_rows"] = sorted(
                {r["id"].split(":")[0] for r in checked if r["kind"] == "reference" and not r["official_valid"]}
            )
    result = {
        "bfcl_eval_version": f"bfcl-eval {official['bfcl_eval_version']}", "model_name": official["model_name"],
        "install": install, "seed": args.seed, "rows_per_category": args.rows_per_category,
        "totals": counts(rows), "by_category": grouped(rows, "category"), "by_kind": grouped(rows, "kind"),
        "by_official_error_type": dict(Counter(r["official_error_type"] for r in rows)),
        "exhaustive": exhaustive, "disagreements": [r["id"] for r in rows if not r["agree"]],
        "machine": machine(), "seconds": time.perf_counter() - started, "verdicts": rows,
    }  # fmt: skip
    (RESULTS / "bfcl_checker_agreement.json").write_text(
        json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (RESULTS / "bfcl_checker_agreement.md").write_text(markdown(result), encoding="utf-8")
    print(markdown(result))


if __name__ == "__main__":
    main()
