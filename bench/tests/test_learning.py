"""The learning benchmark: its metrics, and a tiny end-to-end run with a scripted model."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from bench.learning import Settings, run
from bench.learning_conditions import CONDITIONS, EnvSpec, OptimizerSettings, pick
from bench.learning_report import (
    SKIPPED,
    cell_metrics,
    cumulative_curve,
    cumulative_success,
    last_epoch_success,
    mean_pass_at_k,
    pass_at_k,
    success_matrix,
    summary_keys,
)
from connectors import ConfigError, HashEmbedder, Message, load_chat
from evolve import Task

# ---------------------------------------------------------------- metrics


def test_last_and_cumulative_success_follow_the_memrl_definitions() -> None:
    m = success_matrix([[0, 0, 1, 0], [1, 0, 0, 0], [1, 0, 0, 1.0]])
    assert last_epoch_success(m) == 0.5  # tasks 1 and 4 in the final epoch
    assert cumulative_success(m) == 0.75  # tasks 1, 3 and 4 solved at least once
    assert cumulative_curve(m) == [0.25, 0.5, 0.75]


def test_partial_rewards_are_not_successes() -> None:
    m = success_matrix([[0.99, 1.0]])
    assert m.tolist() == [[False, True]]


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # any 3 of 5 include one of the 3 successes


def test_cumulative_success_is_pass_at_e_over_the_epochs() -> None:
    rng = np.random.default_rng(0)
    m = rng.random((6, 30)) < 0.2
    assert cumulative_success(m) == pytest.approx(mean_pass_at_k(m, 6))
    assert last_epoch_success(m) <= cumulative_success(m)
    assert mean_pass_at_k(m, 1) == pytest.approx(m.mean())


@pytest.mark.parametrize("args", [(3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)])
def test_pass_at_k_refuses_impossible_counts(args: tuple[int, int, int]) -> None:
    with pytest.raises(ConfigError, match="pass@k"):
        pass_at_k(*args)


def test_success_matrix_refuses_an_empty_table() -> None:
    with pytest.raises(ConfigError, match="epochs x tasks"):
        success_matrix([])


def test_summary_keys_name_every_cell_that_ran_and_no_skipped_one() -> None:
    result = {
        "envs": {
            "facility_codes": {
                "conditions": {
                    "q_memory": {"status": "ok", **cell_metrics([[0, 1], [1, 1]])},
                    "tfgrpo": {"status": SKIPPED},
                }
            }
        }
    }
    assert summary_keys(result) == {
        f"learning_facility_codes_q_memory_{key}{part}": 1.0
        for key in ("last", "cum")
        for part in ("", "_mean", "_ci_low", "_ci_high")  # one seed: the interval is the point
    }


def test_pick_keeps_the_registry_order_and_refuses_unknown_names() -> None:
    assert pick(["q_memory", "no_memory"], [c.name for c in CONDITIONS], "conditions") == ["no_memory", "q_memory"]
    with pytest.raises(ConfigError, match="unknown conditions"):
        pick(["q-memory"], [c.name for c in CONDITIONS], "conditions")


# ---------------------------------------------------------------- end to end

CODES = {  # prompts with few shared words, so the hash embedder keeps them apart
    "alpha": ("Which number opens the alpha warehouse door?", "4471"),
    "beta": ("Tell me beta's alarm PIN.", "9302"),
    "gamma": ("gamma garage keypad code, please", "1187"),
}


def _answer_from_memory(messages: Sequence[Message]) -> str:
    """A model that knows nothing but copies the code a recalled experience's feedback reveals."""
    found = re.findall(r"expected answer is: (\d+)", messages[-1].content)
    return found[-1] if found else "I do not know."


def _toy_env(*, quick_skip: tuple[str, ...] = ()) -> EnvSpec:
    tasks = [Task(id=name, prompt=prompt, answer=code) for name, (prompt, code) in CODES.items()]
    return EnvSpec(
        name="toy",
        tasks=lambda limit: tasks[:limit],
        system="Reply with the code only.",
        max_tokens=8,
        quick_skip=quick_skip,
    )


def _settings(conditions: Sequence[str], *, profile: str = "full", epochs: int = 3) -> Settings:
    return Settings(
        profile=profile,
        envs=("toy", "missing"),
        conditions=tuple(conditions),
        epochs=epochs,
        batch_size=8,
        optimizer=OptimizerSettings(group_size=2, grpo_batch=1, minibatch=2),
        progress=False,
    )


def _registry(env: EnvSpec) -> dict[str, object]:
    def missing() -> EnvSpec:
        raise ConfigError("no such game package")

    return {"toy": lambda: env, "missing": missing}


def test_a_tiny_run_writes_json_markdown_png_and_summary_keys(tmp_path: Path) -> None:
    chat = load_chat("fake/scripted", replies=_answer_from_memory)
    names = [c.name for c in CONDITIONS]
    result = run(
        _settings(names),
        chat=chat,
        embedder=HashEmbedder(),
        out=tmp_path,
        registry=_registry(_toy_env()),  # type: ignore[arg-type]
    )

    cells = result["envs"]["toy"]["conditions"]
    assert set(cells) == set(names)
    assert cells["no_memory"]["cum"] == 0.0  # nothing to copy from
    assert cells["repeated_sampling"]["cum"] == 0.0
    assert cells["q_memory"]["per_epoch"][0] == 0.0  # the first epoch has no memories yet
    assert cells["q_memory"]["last"] == 1.0  # later epochs copy the revealed codes
    assert cells["similarity"]["last"] == 1.0
    assert cells["q_memory_writer"]["tokens"] > cells["q_memory"]["tokens"]  # the model also wrote each memory
    assert cells["q_memory_keeps_answer"]["last"] == 1.0  # the revealed code is in the feedback it keeps too
    assert all(
        len(c["per_seed"][0]["rewards"]) == 3 and len(c["per_seed"][0]["rewards"][0]) == 3 for c in cells.values()
    )
    assert all(c["tokens"] > 0 and c["seconds"] >= 0 for c in cells.values())
    assert result["envs"]["missing"]["conditions"]["q_memory"]["status"].startswith("not run: no such game")

    saved = json.loads((tmp_path / "learning.json").read_text())
    assert saved["envs"]["toy"]["conditions"]["q_memory"]["last"] == 1.0
    assert saved["machine"]["cpu_count"] >= 1
    md = (tmp_path / "learning.md").read_text()
    assert "| q_memory | 1.000 (1 seed) | 1.000 (1 seed) |" in md
    assert "**toy**: Q-memory against similarity-only" in md
    assert (tmp_path / "learning_toy.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "learning_missing.png").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["learning_toy_q_memory_last"] == 1.0
    assert summary["learning_toy_no_memory_cum"] == 0.0
    assert not any(k.startswith("learning_missing") for k in summary)


def test_quick_profile_leaves_slow_cells_to_the_full_profile_without_a_number(tmp_path: Path) -> None:
    chat = load_chat("fake/scripted", replies=_answer_from_memory)
    env = _toy_env(quick_skip=("tfgrpo",))
    result = run(
        _settings(["q_memory", "tfgrpo"], profile="quick", epochs=2),
        chat=chat,
        embedder=HashEmbedder(),
        out=tmp_path,
        registry=_registry(env),  # type: ignore[arg-type]
    )
    assert result["envs"]["toy"]["conditions"]["tfgrpo"] == {"status": SKIPPED}
    assert f"| tfgrpo | {SKIPPED} |" in (tmp_path / "learning.md").read_text()
    assert "learning_toy_tfgrpo_last" not in json.loads((tmp_path / "summary.json").read_text())


def test_repeated_sampling_draws_with_a_new_seed_each_epoch(tmp_path: Path) -> None:
    chat = load_chat("fake/scripted", replies=_answer_from_memory)
    run(
        _settings(["no_memory", "repeated_sampling"], epochs=3),
        chat=chat,
        embedder=HashEmbedder(),
        out=tmp_path,
        registry=_registry(_toy_env()),  # type: ignore[arg-type]
    )
    calls = chat.backend.calls  # type: ignore[attr-defined]
    greedy = {(p["temperature"], p["seed"]) for _, p in calls[:9]}
    sampled = [(p["temperature"], p["seed"]) for _, p in calls[9:]]
    assert greedy == {(0.0, 0)}
    assert {t for t, _ in sampled} == {0.7}
    assert len({s for _, s in sampled}) == 3  # one seed per epoch


def test_a_users_spec_or_task_file_becomes_an_environment(tmp_path: Path) -> None:
    """``--tasks``: a spec brings its tasks and settings, a bare task file a generic prompt; both are named
    by their file stem, and a missing file or a taken name is refused before any model loads."""
    from bench.learning_conditions import DATA, user_envs

    folder = tmp_path / "Ünïcode family folder"
    folder.mkdir()
    tasks = folder / "lookalike warehouses (round 2).jsonl"
    tasks.write_text((DATA / "facility_codes.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    spec = folder / "my codes.toml"
    spec.write_text(
        (DATA / "facility_codes.toml").read_text(encoding="utf-8").replace("facility_codes.jsonl", tasks.name),
        encoding="utf-8",
    )
    envs = user_envs([spec, tasks], system="Reply with the code only.")
    assert list(envs) == ["my codes", "lookalike warehouses (round 2)"]
    from_spec, from_file = envs["my codes"](), envs["lookalike warehouses (round 2)"]()
    assert len(from_spec.tasks(None)) == len(from_file.tasks(None)) > 0 and len(from_spec.tasks(3)) == 3
    assert from_file.system == "Reply with the code only." and from_spec.system != from_file.system
    with pytest.raises(ConfigError, match="not a file"):
        user_envs([folder / "missing.jsonl"])
    with pytest.raises(ConfigError, match="--system sets the prompt of --tasks task files"):
        user_envs([spec], system="ignored otherwise")  # a spec brings its own prompt: never dropped silently
    taken = folder / "facility_codes.jsonl"
    taken.write_text(tasks.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ConfigError, match="is taken"):
        user_envs([taken])


def test_seeds_give_intervals_per_seed_values_and_a_paired_verdict(tmp_path: Path) -> None:
    from dataclasses import replace

    from bench.learning_conditions import seed_order

    chat = load_chat("fake/scripted", replies=_answer_from_memory)
    settings = replace(_settings(["similarity", "q_memory"]), envs=("toy",), seeds=3)
    result = run(settings, chat=chat, embedder=HashEmbedder(), out=tmp_path, registry=_registry(_toy_env()))  # type: ignore[arg-type]
    q = result["envs"]["toy"]["conditions"]["q_memory"]
    assert q["seeds"] == [0, 1, 2] and len(q["per_seed"]) == 3
    assert q["last_per_seed"] == [1.0, 1.0, 1.0] and q["last_ci"] == [1.0, 1.0]
    assert (
        result["settings"]["seeds"] == [0, 1, 2] and result["settings"]["paraphrases"] is True
    )  # the default protocol
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["learning_toy_q_memory_last_ci_low"] == summary["learning_toy_q_memory_last_mean"] == 1.0
    md = (tmp_path / "learning.md").read_text()
    assert "paired over 3 seeds: +0.000 [+0.000, +0.000], no difference" in md  # equal on every seed
    tasks = _toy_env().tasks(None)
    assert seed_order(tasks, 0) == list(tasks)  # seed 0 keeps the file's order (earlier single-seed figures)
    assert seed_order(tasks, 1) == seed_order(tasks, 1) and sorted(t.id for t in seed_order(tasks, 1)) == sorted(
        t.id for t in tasks
    )


def test_paraphrases_are_the_default_protocol_and_can_be_turned_off() -> None:
    from bench.learning import parse_args

    assert parse_args([]).paraphrases is True
    assert parse_args(["--no-paraphrases"]).paraphrases is False
    assert parse_args(["--paraphrases"]).paraphrases is True
