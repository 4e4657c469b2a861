"""The closed loop, measured: an app that already exists (an ``openai``-SDK agent doing BFCL function calling)
changes its base URL to ``evolve serve``, sends its checker's verdict as ``/v1/feedback``, and a scheduled
``evolve job --tenant`` runs between epochs. Success per epoch against the same app talking to the same
model directly.

Both arms talk to the model through the same OpenAI-compatible API (``evolve serve``, in this process):
*direct* serves it with memory off and no job (the model as the app had it), *evolve* with memory, the
app's ratings and a job after every epoch but the last. The app asks each of its tasks once per epoch
(the same tasks again: an app's users ask the same kinds of things), passes the row's functions as
``tools`` with ``tool_choice="required"``, turns the ``tool_calls`` it gets into BFCL's call syntax and
checks them with BFCL's AST rules (``evolve.envs.bfcl``); the rating is the verdict (1 or 0) and its
comment the checker's message (what was wrong and a correct call, as a reviewing user would write). The
job (``python -m apps.cli job SPEC --tenant T --once``, its own process, while the server keeps
serving) learns the rated answers into the tenant's memory; its own round runs on a one-task
environment, so what it learns comes from the app's ratings. Seeds draw the tasks; mean and 95%
interval over seeds, differences paired by seed (``evolve.intervals``).

Run: ``python -m bench.serve_closed_loop [--category simple_python] [--tasks 12] [--epochs 3] [--seeds 3] [--rho 0.2]``
→ bench/results/serve_closed_loop.{json,md} and the ``closed_loop_*`` keys of bench/results/summary.json; with
``--rho`` (the app's ratings wrong that often) serve_closed_loop_rho<k>.{json,md} and ``noise_closed_loop_*`` keys;
another ``--category`` than simple_python adds its name to the file (serve_closed_loop_multiple.{json,md}).
Resumable: each finished arm and seed goes to ``<stem>.partial.json`` at once, and the same command run again
after a stop picks up from there (the file goes when the run completes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.bfcl_learning import SYSTEM
from bench.common import machine, merge_summary
from connectors import ConfigError, ToolCall
from connectors.prompted_tools import call_text
from evolve.envs.bfcl.data import tool_of
from evolve.envs.bfcl.single import bfcl_tasks, grade
from evolve.envs.ratings import SAID_CORRECT, SAID_WRONG, check_probability, flipped
from evolve.envs.tasks import Task
from evolve.intervals import paired_interval, seed_interval
from tests.support.serve import serving

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RUN = "Acme support assistant — function calls"
TENANT = "Nordlicht-Logistik_Filiale-Zürich"
KEYS = {"sk-closed-loop-3f9c2a7e": TENANT}
ARMS = ("direct", "evolve")


def write_spec(folder: Path, *, memory: bool) -> Path:
    """The served team: SmolLM2 + MiniLM, BFCL's system prompt and recall settings (``bench.bfcl_learning``)."""
    (folder / "job_tasks.jsonl").write_text(
        json.dumps({"id": "warm-up", "prompt": "Say OK.", "answer": "OK", "checker": "normalised"}) + "\n"
    )
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "{RUN}"
database = "sqlite:///{folder / "serve.db"}"

[model]
chat = "local/smollm2"
max_tokens = 64

[embedder]
name = "minilm"

[environment]
tasks = "job_tasks.jsonl"
paraphrase = false

[memory]
enabled = {"true" if memory else "false"}
k1 = 10
k2 = 2
delta = 0.3

[[agents]]
name = "solver"
system = "{SYSTEM}"
"""
    )
    return spec


def bfcl_text(calls: Sequence[Any] | None) -> str:
    """The SDK's ``tool_calls`` in BFCL's call syntax: ``[f(a=1), g(b='x')]``."""
    read = [ToolCall(c.function.name, json.loads(c.function.arguments or "{}")) for c in calls or ()]
    return "[" + ", ".join(call_text(c) for c in read) + "]" if read else ""


def epoch(url: str, tasks: Sequence[Task], *, rate: bool, seed: int, rho: float = 0.0, n: int = 0) -> list[float]:
    """The app's pass over its tasks (its ``n``-th): ask, check, and (evolve arm) rate; one reward per task.
    With ``rho`` the app's rating is wrong that often (``evolve.envs.ratings.flipped``): a failure rated 1 with
    "Correct.", a success rated 0 with "Wrong."; the reward counted is always the checker's."""
    client = openai.OpenAI(base_url=url, api_key=next(iter(KEYS)), max_retries=0, timeout=3600)
    rewards = []
    for task in tasks:
        tools: Any = [tool_of(f).spec() for f in task.meta["functions"]]
        try:
            completion = client.chat.completions.create(
                model=RUN,
                messages=[{"role": "user", "content": task.prompt}],
                tools=tools,
                tool_choice="required",
                max_tokens=64,
                stop=["\n\n"],
                seed=seed,
            )
            response_id, calls = completion.id, bfcl_text(completion.choices[0].message.tool_calls)
        except openai.InternalServerError as e:  # 502: the model made no call after the server's retries
            failed = e.body if isinstance(e.body, dict) else {}
            if e.status_code != 502 or "response_id" not in failed:
                raise
            response_id, calls = failed["response_id"], ""  # recorded all the same: the app rates the failure
        graded = grade(task, calls)
        rewards.append(graded.reward)
        if rate:
            score, comment = graded.reward, graded.feedback
            if flipped(rho, seed, task.id, n):
                score, comment = (0.0, SAID_WRONG) if graded.reward >= 1.0 else (1.0, SAID_CORRECT)
            body = {"response_id": response_id, "score": score, "comment": comment}
            headers = {"Authorization": f"Bearer {next(iter(KEYS))}"}
            rated = httpx.post(f"{url}/feedback", json=body, headers=headers, timeout=60)
            rated.raise_for_status()
    return rewards


def job(spec: Path) -> str:
    """``evolve job --tenant`` in its own process, as cron would run it; its output line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "apps.cli", "job", str(spec), "--tenant", TENANT, "--once", "--quiet"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"evolve job failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def run_arm(arm: str, tasks: Sequence[Task], epochs: int, seed: int, rho: float = 0.0) -> dict[str, Any]:
    started = time.perf_counter()
    jobs: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_spec(Path(tmp), memory=arm == "evolve")
        per_epoch = []
        with serving(spec, KEYS) as served:
            for e in range(1, epochs + 1):
                rewards = epoch(served.url, tasks, rate=arm == "evolve", seed=seed, rho=rho, n=e - 1)
                per_epoch.append(sum(rewards) / len(rewards))
                print(f"{arm} seed {seed} epoch {e}: {per_epoch[-1]:.3f}", flush=True)
                if arm == "evolve" and e < epochs:
                    jobs.append(job(spec))
    return {"success": per_epoch, "jobs": jobs, "seconds": round(time.perf_counter() - started, 1)}


def run(
    category: str, n_tasks: int, epochs: int, seeds: int, rho: float = 0.0, partial: Path | None = None
) -> dict[str, Any]:
    """Every arm on every seed; with ``partial``, each finished (arm, seed) is saved there at once and a run
    with the same settings picks up where a stopped one ended (an arm on a seed takes up to half an hour)."""
    everything = bfcl_tasks(category)
    settings = {"category": category, "tasks": n_tasks, "epochs": epochs, "rho": rho}
    saved = json.loads(partial.read_text()) if partial is not None and partial.exists() else {}
    done: dict[str, Any] = saved.get("cells", {}) if saved.get("settings") == settings else {}
    cells: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    drawn = []
    for seed in range(seeds):
        tasks = random.Random(seed).sample(everything, n_tasks)
        drawn.append([t.id for t in tasks])
        for arm in ARMS:
            key = f"{arm}/{seed}"
            if key not in done:
                done[key] = run_arm(arm, tasks, epochs, seed, rho)
                if partial is not None:
                    partial.write_text(json.dumps({"settings": settings, "cells": done}, indent=2) + "\n")
            else:
                print(f"{arm} seed {seed}: resumed from {partial}", flush=True)
            cells[arm].append(done[key])
    figures: dict[str, Any] = {}
    for arm in ARMS:
        for e in range(epochs):
            q = seed_interval([c["success"][e] for c in cells[arm]])
            figures[f"{arm}_epoch{e + 1}"] = {
                "mean": round(q.mean, 4),
                "low": round(q.low, 4),
                "high": round(q.high, 4),
            }
    for e in range(epochs):
        d = paired_interval(
            baseline=[c["success"][e] for c in cells["direct"]], treatment=[c["success"][e] for c in cells["evolve"]]
        )
        figures[f"evolve_minus_direct_epoch{e + 1}"] = {
            "mean": round(d.mean, 4), "low": round(d.low, 4), "high": round(d.high, 4),
        }  # fmt: skip
    return {
        "category": category, "tasks": n_tasks, "epochs": epochs, "seeds": seeds, "rho": rho, "task_ids": drawn,
        "cells": cells, "figures": figures,
    }  # fmt: skip


def markdown(r: dict[str, Any]) -> str:
    f, epochs = r["figures"], r["epochs"]

    def cell(key: str) -> str:
        x = f[key]
        return (
            f"{x['mean']:.3f} [{x['low']:+.3f}, {x['high']:+.3f}]"
            if "minus" in key
            else (f"{x['mean']:.3f} [{x['low']:.3f}, {x['high']:.3f}]")
        )

    lines = [
        f"# The closed loop on BFCL `{r['category']}`: an OpenAI-SDK app through evolve serve, rated, with jobs",
        "",
        f"SmolLM2-135M + MiniLM on the CPU; {r['tasks']} tasks per seed, each asked once per epoch; {r['seeds']} seeds, "
        "mean and 95% interval; differences paired by seed. *direct*: the same API with memory off and no job; "
        "*evolve*: memory, the app's ratings (verdict and the checker's message) and `evolve job --tenant` "
        "between epochs."
        + (
            f' A share ρ = {r.get("rho", 0.0):g} of the app\'s ratings is wrong (a failure rated 1 "Correct.", a '
            'success rated 0 "Wrong."); success is the checker\'s.'
            if r.get("rho")
            else ""
        ),
        "",
        "| epoch | direct | evolve | evolve − direct |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {e} | {cell(f'direct_epoch{e}')} | {cell(f'evolve_epoch{e}')} | {cell(f'evolve_minus_direct_epoch{e}')} |"
        for e in range(1, epochs + 1)
    ]
    jobs = [j for c in r["cells"]["evolve"] for j in c["jobs"]]
    lines += ["", "Job lines (first seed):", "", *[f"- `{j}`" for j in jobs[: epochs - 1]], ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--category", default="simple_python", choices=("simple_python", "multiple"))
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rho", type=float, default=0.0, help="the share of the app's ratings that are wrong")
    args = parser.parse_args(argv)
    try:
        rho = check_probability("--rho", args.rho)
    except ConfigError as e:
        parser.error(str(e))
    RESULTS.mkdir(exist_ok=True)
    stem = "serve_closed_loop" + ("" if args.category == "simple_python" else f"_{args.category}")
    stem += f"_rho{round(rho * 10)}" if rho else ""
    partial = RESULTS / f"{stem}.partial.json"
    result = {**run(args.category, args.tasks, args.epochs, args.seeds, rho, partial), "machine": machine()}
    partial.unlink(missing_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(result))
    keys: dict[str, float] = {}
    for name, x in result["figures"].items():
        base = (
            f"noise_closed_loop_{args.category}_rho{round(rho * 10)}_{name}"
            if rho
            else f"closed_loop_{args.category}_{name}"
        )
        keys |= {f"{base}_mean": x["mean"], f"{base}_ci_low": x["low"], f"{base}_ci_high": x["high"]}
    merge_summary(RESULTS / "summary.json", keys)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
