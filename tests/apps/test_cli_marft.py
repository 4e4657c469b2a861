"""``evolve marft SPEC``: train the agents' adapters now, print before and after, record the versions that
``evolve adapters`` shows and ``evolve run`` then serves; API models get the reason and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main

TASKS = ["say the word star", "say star", "the word star", "say the star word"]


def write_spec(folder: Path, chat: str, *, marft: str = "", model: str = "") -> Path:
    tasks = folder / "stars.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "prompt": p, "answer": "star"}) + "\n" for i, p in enumerate(TASKS))
    )
    spec = folder / "stars.toml"
    spec.write_text(
        f"""
[run]
name = "stars"
database = "sqlite:///{folder / "runs.db"}"
batch_size = 4

[model]
chat = "{chat}"
max_tokens = 1
{model}

[embedder]
name = "hash"

[environment]
tasks = "stars.jsonl"
paraphrase = false

[marft]
steps = 30
batch_size = 16
max_new_tokens = 1
temperature = 1.0
lr = 3e-3
eval_episodes = 16
{marft}

[[agents]]
name = "solver"
system = "Reply with one word ."
"""
    )
    return spec


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_marft_trains_records_and_the_next_run_serves_the_adapter(
    tiny_local_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, f"local/{tiny_local_model}")
    db = f"sqlite:///{tmp_path / 'runs.db'}"

    code, out, err = run_cli(capsys, "marft", str(spec), "--quiet")

    assert code == 0, err
    assert "agents solver on local/" in out and "30 iterations x 16 episodes, evaluated on 16 episodes" in out
    assert "evaluation success  before 0.000  after 1.000" in out
    assert "solver: new adapter version" in out
    code, log_out, _ = run_cli(capsys, "adapters", "log", "--db", db, "--run", "stars")
    assert code == 0 and "eval_after=1.000 eval_before=0.000 steps=30.000" in log_out
    code, run_out, _ = run_cli(capsys, "run", str(spec), "--rounds", "1", "--quiet")
    assert code == 0
    assert run_out.splitlines()[1].split()[:2] == ["1", "1.00"]  # round 1 answered by the trained adapter

    code, moved, _ = run_cli(
        capsys, "adapters", "rollback", "--db", db, "--run", "stars", "--agent", "solver", "--to", "base"
    )
    assert code == 0 and "-> base (no adapter)" in moved


def test_marft_on_an_api_model_says_why_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, "openai/gpt-4o-mini", model='base_url = "http://127.0.0.1:9/v1"')  # never called

    code, out, err = run_cli(capsys, "marft", str(spec), "--quiet")

    assert code == 2 and out == ""
    assert "weight updates need local models, and solver (openai/gpt-4o-mini) runs on an API" in err


def test_a_bad_marft_section_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, "local/smollm2", marft="patience = 0")

    code, _, err = run_cli(capsys, "marft", str(spec))

    assert code == 2 and "marft.patience" in err


def test_the_marft_section_reaches_the_evolver(tiny_local_model: Path, tmp_path: Path) -> None:
    from evolve.build import build
    from evolve.spec import load_spec

    off = build(load_spec(write_spec(tmp_path, f"local/{tiny_local_model}")), progress=False)
    assert off.weights is None  # enabled = false by default: no escalation on a plateau

    spec = load_spec(
        write_spec(tmp_path, f"local/{tiny_local_model}", marft="enabled = true\noptions = { kl_coef = 0.1 }")
    )
    on = build(spec, progress=False)
    assert on.weights is not None
    assert (on.weights.steps, on.weights.batch_size, on.weights.lr, on.weights.eval_episodes) == (30, 16, 3e-3, 16)
    assert on.weights.args().kl_coef == 0.1 and on.weights.seed == spec.run.seed
