"""The strategy-memory bench end to end with a scripted model that answers only with what recall showed it:
episodic memory must recall episodes only and never consolidate; the strategies condition must recall
strategies only (none before consolidation has run), both must hold both kinds; BFCL's transfer protocol
must run on a frozen store; the report and the strategy_* summary keys must carry every cell."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from bench.learning_conditions import EnvSpec, memory_for
from bench.noise import rule_reply
from bench.strategy_memory import Family, Settings, bfcl, conditions, parse_args, run, settings_from
from bench.strategy_reader import rule_reader
from connectors import ConfigError, HashEmbedder, Message, load_chat
from connectors.quoting import quote
from evolve import Task
from memory import RetrievalConfig
from memory.storage.records import MemoryItem
from memory.upkeep.consolidation import Strategy, rule_strategy

SITES = ("Zürich-Nordhafen-Logistik-Lager-07", "Basel-Rheinhafen-Kühlhaus-Süd-12", "Genève-Cointrin-Fracht-Ost-03")
TASKS = [Task(id=f"door-{i}", prompt=f"What is the door code of {site}?", answer=f"{4471 + 7 * i}")
         for i, site in enumerate(SITES)]  # fmt: skip
ENV = EnvSpec(name="door_codes", tasks=lambda n: TASKS[:n], system="Reply with the code only.", max_tokens=8,
              retrieval=RetrievalConfig(k1=10, k2=1, delta=0.9), note="Three door codes.")  # fmt: skip
REVEALED = re.compile(r"The expected answer is: (\d+)")
STRATEGY_DO = re.compile(r'Do: answer "(\d+)"')


def reader(messages: Sequence[Message]) -> str:
    """Answers with the code a recalled memory shows (an episode's revealed answer or a strategy's Do line)."""
    for block in re.findall(r"<experience>(.*?)</experience>", messages[-1].content, re.S):
        found = STRATEGY_DO.search(block) or REVEALED.search(block)
        if found:
            return found.group(1)
    return "I do not know the code."


def door_codes(s: Settings) -> Family:
    return Family(ENV, list(range(s.seeds)), lambda seed: (list(TASKS), []), False, 8, "memrl")


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("strategy-bench")
    s = Settings(families=(), epochs=3, seeds=2, bfcl_seeds=2, bfcl_train=3, bfcl_test=2, bfcl_batch_size=4)
    families = {
        "door_codes": functools.partial(door_codes, s),
        "bfcl_simple_python": functools.partial(bfcl, "simple_python", s),
    }
    chat = load_chat("fake/scripted", replies=reader)
    return run(s, chat=chat, embedder=HashEmbedder(), out=out, model="fake/scripted", families=families), out


def test_each_condition_recalls_the_kinds_it_names(result: tuple[dict, Path]) -> None:
    block = result[0]["families"]["door_codes"]
    cells = block["conditions"]
    for seed in range(2):
        episodic, strategies, both = (cells[c]["per_seed"][seed] for c in ("episodic", "strategies", "both"))
        assert [r["strategies"] for r in episodic["recalled"]] == [0, 0, 0]
        assert [r["episodes"] for r in episodic["recalled"]] == [0, 3, 3]  # each task recalls its own last attempt
        assert [r["episodes"] for r in strategies["recalled"]] == [0, 0, 0]  # never an episode
        assert [r["strategies"] for r in strategies["recalled"]] == [0, 0, 3]  # a strategy once 2 episodes exist
        assert sum(r["episodes"] + r["strategies"] for r in both["recalled"][1:]) == 6
    assert cells["episodic"]["per_epoch"] == [0.0, 1.0, 1.0]  # the failure's feedback showed the code
    assert cells["strategies"]["per_epoch"] == [0.0, 0.0, 1.0]  # round 2 found no strategy; round 3 read its Do
    assert block["recalled"]["strategies"]["strategy_share_per_round"] == [0.0, 0.0, 1.0]


def test_consolidation_runs_after_every_round_only_where_asked(result: tuple[dict, Path]) -> None:
    sizes = result[0]["families"]["door_codes"]["sizes"]
    assert sizes["episodic"] == {"episodes": 9, "strategies": 0, "superseded_strategies": 0, "valid": 9}
    # after round 2 one strategy per task; after round 3 a new one from 3 episodes supersedes it
    assert sizes["strategies"] == {"episodes": 9, "strategies": 3, "superseded_strategies": 3, "valid": 12}
    notes = result[0]["families"]["door_codes"]["conditions"]["both"]["per_seed"][0]["upkeep"]
    assert notes[0] == {"groups": 0, "written": 0, "replacing": 0, "unchanged": 0, "skipped": 0}
    assert notes[1] == {"groups": 3, "written": 3, "replacing": 0, "unchanged": 0, "skipped": 0}
    assert notes[2] == {"groups": 3, "written": 3, "replacing": 3, "unchanged": 0, "skipped": 0}
    assert result[0]["families"]["door_codes"]["conditions"]["episodic"]["per_seed"][0]["upkeep"] == []


def test_bfcl_runs_train_then_frozen_transfer(result: tuple[dict, Path]) -> None:
    block = result[0]["families"]["bfcl_simple_python"]
    assert block["protocol"] == "transfer" and block["tasks"] == 3
    for cond, cell in block["conditions"].items():
        seed0 = cell["per_seed"][0]
        assert not set(seed0["train_ids"]) & set(seed0["test_ids"]) and len(seed0["test_ids"]) == 2
        assert len(cell["transfer_per_seed"]) == 2, cond
        assert seed0["sizes"]["episodes"] == 9  # 3 train tasks x 3 epochs; the frozen test wrote nothing
    assert set(block["differences"]["both"]) == {"last", "cum", "transfer"}


def test_report_and_summary_keys_carry_every_cell(result: tuple[dict, Path]) -> None:
    data, out = result
    keys = json.loads((out / "summary.json").read_text())
    assert keys["strategy_seeds"] == 2 and keys["strategy_bfcl_seeds"] == 2 and keys["strategy_min_size"] == 2
    assert keys["strategy_door_codes_episodic_last"] == 1.0 and keys["strategy_door_codes_strategies_last"] == 1.0
    assert keys["strategy_door_codes_strategies_cum_lo"] == keys["strategy_door_codes_strategies_cum_hi"] == 1.0
    for cond in ("strategies", "both"):
        for name in (
            f"strategy_door_codes_{cond}_minus_episodic",
            f"strategy_bfcl_simple_python_{cond}_transfer_minus_episodic",
        ):
            assert {name, f"{name}_lo", f"{name}_hi"} <= set(keys)
    assert keys["strategy_door_codes_strategies_strategies_at_end"] == 3
    assert "strategy_bfcl_simple_python_episodic_transfer_hi" in keys
    md = (out / "strategy_memory.md").read_text()
    assert "strategies − episodic (paired over 2 seeds): last +0.000 [+0.000, +0.000] → **level**" in md
    assert json.loads((out / "strategy_memory.json").read_text())["settings"]["consolidation"] == "rule"


def test_conditions_differ_only_in_what_they_draw_and_consolidate() -> None:
    episodic, strategies, both = conditions(2)
    draws = [memory_for(c, ENV.retrieval).retrieval.draw_from for c in (episodic, strategies, both)]  # type: ignore[union-attr]
    assert draws == ["episodes", "strategies", "both"]
    assert (episodic.consolidate, strategies.consolidate, both.consolidate) == (False, True, True)
    assert strategies.consolidate_min == both.consolidate_min == 2


def test_bad_flags_are_refused_with_the_flag_named() -> None:
    with pytest.raises(ConfigError, match="--min-size must be >= 1"):
        settings_from(parse_args(["--min-size", "0"]))
    with pytest.raises(ConfigError, match="unknown families"):
        settings_from(parse_args(["--families", "door_codes"]))
    assert settings_from(parse_args(["--families", "--bfcl"])).bfcl == ("simple_python",)


def test_add_keeps_the_earlier_families_and_refuses_another_protocol(result: tuple[dict, Path], tmp_path: Path) -> None:
    (tmp_path / "strategy_memory.json").write_text((result[1] / "strategy_memory.json").read_text())
    s = Settings(families=(), epochs=3, seeds=2)
    chat = load_chat("fake/scripted", replies=reader)
    again = {"door_codes_again": functools.partial(door_codes, s)}
    merged = run(s, chat=chat, embedder=HashEmbedder(), out=tmp_path, model="fake/scripted", families=again, add=True)
    assert list(merged["families"]) == ["door_codes", "bfcl_simple_python", "door_codes_again"]
    assert "## bfcl_simple_python" in (tmp_path / "strategy_memory.md").read_text()
    with pytest.raises(ConfigError, match="--add: the report at .* ran {'epochs': 3}"):
        run(Settings(families=(), epochs=2, seeds=2), chat=chat, embedder=HashEmbedder(), out=tmp_path,
            model="fake/scripted", families=again, add=True)  # fmt: skip


def test_the_rule_reader_answers_with_the_best_memory_be_it_an_episode_or_a_strategy() -> None:
    def ask(*experiences: str) -> str:  # rendered as the agent does: best last
        return rule_reader([Message("user", "\n".join(quote(e, "experience") for e in experiences) + "\nCode?")])

    def episode(i: int, answer: str, ok: bool) -> MemoryItem:  # as the cheap writer stores it
        kept, outcome = (f"Answer given: {answer}", "success") if ok else ("(not kept)", "failure")
        feedback = "Correct." if ok else f"Wrong. The expected answer is: {answer}"
        text = f"Task: Code?\nOutcome: {outcome}\nTrajectory (condensed):\n{kept}\nFeedback: {feedback}"
        return MemoryItem(f"m{i}", "default", "Code?", text, 0.0, 0, 0.0, {"success": ok})

    won, revealed = episode(1, "4471", True), episode(2, "5210", False)
    by_wins, by_failures = rule_strategy([won, episode(3, "4471", True)]), rule_strategy([revealed])
    assert by_wins is not None and by_failures is not None
    assert ask(revealed.experience, by_wins.text()) == "4471"  # the strategy is the best: its Do line
    assert ask(by_wins.text(), revealed.experience) == "5210"  # the episode is the best: rule_reply reads it
    assert ask(won.experience, by_failures.text()) == "5210"  # a strategy of revealed answers
    assert ask(revealed.experience) == rule_reply([Message("user", quote(revealed.experience, "experience"))])
    calls = Strategy("Weather", "asked for a forecast", "Called weather(city='Bern') -> ok\nCalled units(c=True)")
    assert ask(calls.text()) == "[weather(city='Bern'), units(c=True)]"  # BFCL's calls, as rule_reply answers them
    assert ask(won.experience, Strategy("Door", "asked for a door code", "say the code 4471").text()) == "unknown"


def test_the_start_and_the_memory_reach_the_consolidating_conditions_stores() -> None:
    s = settings_from(parse_args(["--model", "rule", "--strategy-start", "sources", "--memory", "q_context"]))
    assert (s.strategy_start, s.memory) == ("sources", "q_context")
    for cond in conditions(2, start=s.strategy_start, memory=s.memory):
        config = memory_for(cond, ENV.retrieval)
        assert config is not None and config.retrieval.context_q
        assert config.strategy_start == ("q_init" if cond.name == "episodic" else "sources")
    assert all(memory_for(c, ENV.retrieval).strategy_start == "q_init" for c in conditions(2))  # type: ignore[union-attr]
    assert not any(memory_for(c, ENV.retrieval).retrieval.context_q for c in conditions(2))  # type: ignore[union-attr]
    with pytest.raises(SystemExit):
        parse_args(["--strategy-start", "mean"])


def test_add_refuses_another_start_and_reads_an_older_report_as_the_default_start(
    result: tuple[dict, Path], tmp_path: Path
) -> None:
    older = json.loads((result[1] / "strategy_memory.json").read_text())
    del older["settings"]["strategy_start"], older["settings"]["memory"]  # written before they were recorded
    (tmp_path / "strategy_memory.json").write_text(json.dumps(older))
    s = Settings(families=(), epochs=3, seeds=2)
    chat = load_chat("fake/scripted", replies=reader)
    again = {"door_codes_again": functools.partial(door_codes, s)}
    with pytest.raises(ConfigError, match="ran {'strategy_start': 'q_init'}; this run {'strategy_start': 'sources'}"):
        run(replace(s, strategy_start="sources"), chat=chat, embedder=HashEmbedder(), out=tmp_path,
            model="fake/scripted", families=again, add=True)  # fmt: skip
    merged = run(s, chat=chat, embedder=HashEmbedder(), out=tmp_path, model="fake/scripted", families=again, add=True)
    assert list(merged["families"]) == ["door_codes", "bfcl_simple_python", "door_codes_again"]
