"""A spec's ``[team]``: parallel teams built from TOML, their checks, and ``evolve team diagnose`` run as a
user runs it (a spec in a folder with spaces and Unicode, relative paths, the figures and heat map written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main
from connectors import ConfigError, load_chat
from evolve.build import build_team, spec_prompts
from evolve.spec import load_spec
from evolve.teams.parallel import ParallelTeam

TASKS = [
    {"id": "rolltor-süd", "prompt": "Welcher Code öffnet das Rolltor in der Halle Süd?", "answer": "4471"},
    {"id": "rolltor-nord", "prompt": "Welcher Code öffnet das Rolltor in der Halle Nord?", "answer": "9902"},
    {"id": "rolltor-ost", "prompt": "Welcher Code öffnet das Rolltor in der Halle Ost?", "answer": "1234"},
]
AGENTS = """
[[agents]]
name = "Schicht A · knapp"
system = "Antworte nur mit dem Code."

[[agents]]
name = "Schicht B · gründlich"
system = "Prüfe zweimal, dann antworte mit dem Code."
temperature = 0.9

[[agents]]
name = "Richterin Süd"
system = "Wähle die richtige Antwort."
memory = false
"""


def write_spec(
    folder: Path, team: str, *, replies: str = '{ "Süd" = "4471", "Nord" = "9902", "Ost" = "0000" }'
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rolltore.jsonl").write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in TASKS), "utf-8")
    spec = f"""
[run]
name = "Zürich Nordhafen · Rolltore"
database = "sqlite:///läufe/evolve.db"

[model]
chat = "fake/scripted"
temperature = 0.2
options = {{ replies = {replies}, default = "weiß nicht" }}

[embedder]
name = "hash"

[environment]
tasks = "rolltore.jsonl"
paraphrase = false

{team}
{AGENTS}
"""
    path = folder / "team spec.toml"
    path.write_text(spec, encoding="utf-8")
    return path


def test_a_parallel_team_with_a_judge_is_built_from_the_spec(tmp_path: Path) -> None:
    spec = load_spec(
        write_spec(
            tmp_path, '[team]\ntopology = "parallel"\naggregate = "judge"\njudge = "Richterin Süd"\ndebate = true'
        )
    )
    team = build_team(spec, load_chat("fake/scripted", replies=["4471"]), None)
    assert isinstance(team, ParallelTeam) and team.judge == "Richterin Süd" and team.debate
    assert team.members == ["Schicht A · knapp", "Schicht B · gründlich"]
    assert team.agents["Schicht B · gründlich"].params["temperature"] == 0.9  # its own
    assert team.agents["Schicht A · knapp"].params["temperature"] == 0.2  # [model]'s
    prompts, edges = spec_prompts(spec)
    assert ("Schicht A · knapp", "Richterin Süd", 1.0) in edges and "Richterin Süd.system" in prompts


@pytest.mark.parametrize(
    ("team", "says"),
    [
        ('[team]\naggregate = "vote"', 'apply only to topology = "parallel"'),
        ('[team]\ntopology = "parallel"\naggregate = "judge"', 'needs judge = "<agent name>"'),
        ('[team]\ntopology = "parallel"\njudge = "Richterin Süd"', 'needs judge = "<agent name>"'),
        ('[team]\ntopology = "parallel"\nmembers = ["Schicht Z"]', "are not agents of this spec"),
        ('[team]\ntopology = "parallel"\nrecompose = "kstar"', "needs size = <members>"),
        ('[team]\ntopology = "parallel"\nrecompose = "kstar"\nsize = 4', "size 4 is more than the 3 agents"),
        (
            '[team]\ntopology = "parallel"\nrecompose = "validation"\nsize = 2\n[optimizer]\nkind = "textgrad"',
            'set kind = "none"',
        ),
        (
            '[team]\ntopology = "parallel"\naggregate = "judge"\njudge = "Richterin Süd"\nmembers = ["Richterin Süd"]',
            "cannot also be a member",
        ),
    ],
)
def test_a_team_the_spec_cannot_mean_is_a_clear_error(tmp_path: Path, team: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_spec(write_spec(tmp_path, team))


def test_evolve_team_diagnose_reports_and_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(
        tmp_path / "Zürich Teams", '[team]\ntopology = "parallel"\naggregate = "judge"\njudge = "Richterin Süd"'
    )
    out = tmp_path / "Bericht Süd"
    assert main(["team", "diagnose", str(spec), "--tasks", "3", "--out", str(out), "--quiet"]) == 0
    shown = capsys.readouterr().out
    figures = json.loads((out / "diagnosis.json").read_text(encoding="utf-8"))
    assert figures["members"] == [
        "Schicht A · knapp",
        "Schicht B · gründlich",
    ]  # the team: the judge decides, not votes
    assert figures["accuracy"] == {
        "Schicht A · knapp": pytest.approx(2 / 3),
        "Schicht B · gründlich": pytest.approx(2 / 3),
    }
    assert figures["kstar_mean"] == pytest.approx(1.0)  # one model, one script: the same answers
    assert "K* 1.00 (of at most 2)" in shown and str(out / "heat_map.png") in shown
    assert (out / "heat_map.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "Zürich Teams" / "läufe" / "evolve.db").exists()  # the spec's relative database


def test_a_chain_is_diagnosed_only_as_a_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, "")
    assert main(["team", "diagnose", str(spec), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "--pool" in capsys.readouterr().err
    assert main(["team", "diagnose", str(spec), "--pool", "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert json.loads((tmp_path / "out" / "diagnosis.json").read_text("utf-8"))["members"][2] == "Richterin Süd"


def test_evolve_run_recomposes_a_spec_team(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``recompose`` from the spec: the pool is every agent but none is a judge; the run records the team kept."""
    replies = (
        '{ "Antworte nur" = "4471", "Prüfe zweimal" = "0000", "Wähle" = "9902" }, match = "all"'  # by system prompt
    )
    team = '[team]\ntopology = "parallel"\nmembers = ["Schicht B · gründlich", "Richterin Süd"]\nrecompose = "validation"\nsize = 2'
    spec = write_spec(tmp_path, team, replies=replies)
    assert main(["run", str(spec), "--rounds", "1", "--quiet"]) == 0
    from evolve.build import build

    evolver = build(load_spec(spec), progress=False)
    assert evolver.recompose is not None and [a.name for a in evolver.recompose.pool] == [
        "Schicht A · knapp", "Schicht B · gründlich", "Richterin Süd"]  # fmt: skip
    (first,) = evolver.log.completed().values()
    assert first.team == ["Schicht A · knapp", "Richterin Süd"]  # each knows another code; B knows none
    assert set(evolver.team.members) == set(first.team)  # type: ignore[attr-defined] # a resumed run acts with it
    served = build_team(load_spec(spec), evolver.team.agents["Schicht A · knapp"].model, evolver.memory)
    assert isinstance(served, ParallelTeam) and served.members == first.team  # and so does what is served
    evolver.memory.close()  # type: ignore[union-attr]


def test_the_bundled_team_spec_builds_from_another_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = load_spec(Path(__file__).resolve().parents[3] / "data" / "format_rules_team.toml")
    team = build_team(spec, load_chat("fake/scripted", replies=["Dublin."]), None)
    assert isinstance(team, ParallelTeam) and len(team.members) == 4 and team.aggregate == "vote"
    assert spec.resolve(spec.environment.tasks).exists()
