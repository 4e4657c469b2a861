"""The loop-overhead benchmark measures what it says: every episode, every phase, both loops."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import loop_overhead as lo
from bench.loop_overhead_report import PHASES


def test_generated_tasks_are_distinct_and_paraphrased() -> None:
    tasks = lo.make_tasks(300)
    assert len({t.id for t in tasks}) == 300
    assert len({t.prompt for t in tasks}) == 300
    assert all(len(t.meta["paraphrases"]) == 4 for t in tasks)
    with pytest.raises(ValueError, match="at most"):
        lo.make_tasks(10_000)


def test_phase_clock_counts_a_nested_call_of_the_same_phase_once() -> None:
    class Store:
        def write(self) -> int:
            return self.write_many()

        def write_many(self) -> int:
            return 1

    store, clock = Store(), lo.PhaseClock()
    clock.wrap(store, "write", "write")
    clock.wrap(store, "write_many", "write")
    assert store.write() == 1 and store.write_many() == 1
    assert clock.calls == {"write": 2}


@pytest.mark.parametrize("memory", [True, False])
def test_measure_loop_accounts_for_every_episode_and_second(memory: bool) -> None:
    out = lo.measure_loop(lo.make_tasks(8), rounds=2, batch_size=3, memory=memory)
    assert out["episodes"] == 16
    phases = out["phases_ms_per_episode"]
    assert set(phases) == set(PHASES)
    assert sum(phases.values()) == pytest.approx(out["ms_per_episode"])
    if memory:
        assert min(phases["recall"], phases["reinforce"], phases["write"]) > 0
    else:
        assert phases["recall"] == phases["reinforce"] == phases["write"] == 0
    assert out["memory_size"] == ([8, 16] if memory else [0, 0])  # one experience per attempt


def test_results_files_and_summary_keys(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"other_bench": 1}))
    results = lo.main(["--no-generation", "--out", str(tmp_path)], profile=lo.Profile(8, 2, 4, 2, 4, 1))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["other_bench"] == 1  # merged, not overwritten
    assert summary["loop_overhead_ms_per_episode"] == pytest.approx(results["loop"]["ms_per_episode"], abs=1e-3)
    assert {"loop_episodes_per_s", "loop_overhead_ms_per_episode_no_memory"} <= set(summary)
    page = (tmp_path / "loop_overhead.md").read_text()
    assert "<= 0.5 ms" in page and f"{os.cpu_count()} CPUs" in page  # the target and the machine beside the figure
    assert json.loads((tmp_path / "loop_overhead.json").read_text())["loop"]["episodes"] == 16


def test_headline_includes_generation_when_measured() -> None:
    fake = {
        "loop": {"ms_per_episode": 0.9, "episodes_per_s": 1111.1},
        "loop_no_memory": {"ms_per_episode": 0.2},
        "generation": {"batched": {"tokens_per_s": 40.0}, "single": {"tokens_per_s": 10.0}, "speedup": 4.0},
    }
    flat = lo.headline(fake)
    assert flat["local_gen_batch_speedup"] == 4.0
    assert flat["local_gen_tokens_per_s_batched"] == 40.0 and flat["local_gen_tokens_per_s_single"] == 10.0


@pytest.mark.slow
def test_generation_batched_and_single_give_the_same_prompts_answers() -> None:
    out = lo.measure_generation(lo.make_tasks(2), prompts=2, tokens=4)
    assert out["single"]["tokens"] > 0 and out["batched"]["tokens"] > 0
    assert out["speedup"] > 0 and 0 <= out["same_text"] <= 2
