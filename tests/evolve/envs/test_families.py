"""The task families written for the learning claims (data/make_<family>.py): each file is what its
generator writes at its seed, each tests what its docstring says, and facts that change mid-run change."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from connectors import ConfigError
from evolve import Task, TaskEnv, load_tasks, paraphrase_schedule, same_tasks
from evolve.spec import load_spec

FAMILIES = {"changing_facts": 11, "procedures": 13, "lookalikes": 17}


def generator(repo_root: Path, family: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"make_{family}", repo_root / "data" / f"make_{family}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_frozen_file_is_what_its_generator_writes_at_its_seed(repo_root: Path, family: str) -> None:
    rows = generator(repo_root, family).generate(FAMILIES[family])
    frozen = (repo_root / "data" / f"{family}.jsonl").read_text(encoding="utf-8")
    assert frozen == "".join(json.dumps(r) + "\n" for r in rows)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_spec_runs_its_family_with_paraphrases_from_another_folder(repo_root: Path, family: str) -> None:
    spec = load_spec(repo_root / "data" / f"{family}.toml")
    tasks = load_tasks(spec.resolve(spec.environment.tasks))
    assert spec.environment.paraphrase and len(tasks) == 24
    assert all(len(t.meta["paraphrases"]) == 4 for t in tasks)
    assert len({t.id for t in tasks}) == 24


def test_lookalike_twins_never_share_an_answer(repo_root: Path) -> None:
    tasks = {t.meta["site"]: t for t in load_tasks(repo_root / "data" / "lookalikes.jsonl")}
    for site, task in tasks.items():
        twin = tasks[task.meta["twin"]]
        assert twin.meta["twin"] == site and twin.answer != task.answer
        assert task.meta["twin"].startswith(site) or site.startswith(task.meta["twin"])


def test_procedures_are_shared_by_device_and_differ_between_devices(repo_root: Path) -> None:
    by_device: dict[str, set[str]] = {}
    for task in load_tasks(repo_root / "data" / "procedures.jsonl"):
        by_device.setdefault(task.meta["device"], set()).add(task.answer)
    assert all(len(answers) == 1 for answers in by_device.values())
    assert len({next(iter(a)) for a in by_device.values()}) == len(by_device) == 8
    env = TaskEnv(load_tasks(repo_root / "data" / "procedures.jsonl"))
    env.reset("restart-harbor-label-printer")
    assert env.step("Remove tray, flip breaker, press power.").reward == 1.0
    env.reset("restart-harbor-label-printer")
    assert env.step("flip breaker, remove tray, press power").reward == 0.0  # the order is the procedure


def test_half_the_staff_change_extension_at_round_five(repo_root: Path) -> None:
    tasks = load_tasks(repo_root / "data" / "changing_facts.jsonl")
    movers = [t for t in tasks if "changes" in t.meta]
    assert len(movers) == 12
    assert all(t.in_round(4).answer == t.answer != t.in_round(5).answer == t.in_round(8).answer for t in movers)
    assert len({t.answer for t in tasks} | {t.in_round(5).answer for t in movers}) == 36  # never a reused number


# ---------------------------------------------------------------- facts that change mid-run


def moving(answer: str = "214", changes: object = None) -> Task:
    return Task(id="ext-ann", prompt="Ann's extension?", answer=answer, meta={"changes": changes or [
        {"round": 3, "answer": "388"}, {"round": 6, "answer": "512"}]})  # fmt: skip


def test_the_answer_in_force_is_the_last_change_whose_round_has_come() -> None:
    task = moving()
    assert [task.in_round(r).answer for r in range(1, 8)] == ["214", "214", "388", "388", "388", "512", "512"]
    assert task.in_round(1) is task
    plain = Task(id="t", prompt="p?", answer="1")
    assert plain.in_round(9) is plain


@pytest.mark.parametrize("schedule", [same_tasks, paraphrase_schedule(3)], ids=["same_tasks", "paraphrases"])
def test_every_schedule_asks_the_answer_of_its_round(schedule: object) -> None:
    [before] = schedule([moving()], 2)  # type: ignore[operator]
    [after] = schedule([moving()], 3)  # type: ignore[operator]
    env = TaskEnv([moving()])
    env.reset(before)
    assert env.step("214").reward == 1.0
    env.reset(after)
    wrong = env.step("214")
    assert wrong.reward == 0.0 and "388" in wrong.text  # the feedback reveals the new fact


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"round": 3, "answer": "388"}, "must be a list"),
        ([{"round": 1, "answer": "388"}], "increasing rounds R >= 2"),
        ([{"round": 4, "answer": "388"}, {"round": 4, "answer": "512"}], "increasing rounds"),
        ([{"round": "5", "answer": "388"}], "increasing rounds"),
        ([{"round": 5, "answer": "388", "note": "moved"}], "increasing rounds"),
        ([{"round": 5, "answer": ""}], "change at round 5: 'answer' must be a non-empty string"),
    ],
)
def test_a_malformed_change_is_refused_naming_what_was_expected(changes: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Task(id="ext-ann", prompt="Ann's extension?", answer="214", meta={"changes": changes})


def test_a_change_survives_the_task_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "staff moves — Ünicode.jsonl"
    path.write_text(json.dumps(moving().to_dict()) + "\n", encoding="utf-8")
    [task] = load_tasks(path)
    assert task.in_round(6).answer == "512"
