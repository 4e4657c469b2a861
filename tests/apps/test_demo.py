"""`evolve demo` over seeds: a table of means with 95% intervals, the paired verdict, per-seed curves in
the JSON and a plot, on a copying model (the real run is `make demo`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main
from apps.demo import CONDITIONS, run_demo
from connectors import ChatClient, ConfigError, HashEmbedder, ScriptedChat
from tests.support.copying_model import copying_reply


def test_the_demo_reports_every_condition_over_seeds(tmp_path: Path) -> None:
    chat = ChatClient(ScriptedChat(copying_reply))
    result = run_demo(rounds=3, seeds=3, seed=4, home=tmp_path, chat=chat, embedder=HashEmbedder(), progress=False)
    assert result["seeds"] == [4, 5, 6]
    lines = result["table"].splitlines()
    assert lines[0].split() == ["round", "no", "memory", "similarity", "q-memory"] and len(lines) == 4
    assert lines[1].split()[1:3] == ["0.00", "[0.00,"]  # round 1: nothing to recall on any seed
    assert "q-memory − similarity, round 3, paired over 3 seeds:" in result["verdict"]
    assert result["solved"].startswith("solved at least once by round 3: no memory 0.00 [0.00, 0.00], similarity ")
    saved = json.loads((tmp_path / "demo" / "demo.json").read_text(encoding="utf-8"))
    assert set(saved["curves"]) == set(CONDITIONS)
    assert all(len(per_seed) == 3 and len(per_seed[0]) == 3 for per_seed in saved["curves"].values())
    assert (tmp_path / "demo" / "learning_curve.png").stat().st_size > 10_000
    assert sorted(p.name for p in (tmp_path / "demo").iterdir() if p.is_dir()) == ["seed-4", "seed-5", "seed-6"]
    noisy = result["noisy"]  # the second regime: a fifth of the ratings wrong, success still the checker's
    assert noisy["rho"] == 0.2 and noisy["table"].splitlines()[0].split() == ["round", "similarity", "q-memory"]
    assert "q-memory − similarity, round 3, paired over 3 seeds:" in noisy["verdict"]
    assert set(saved["noisy"]["curves"]) == {"similarity", "q-memory"}
    assert (tmp_path / "demo" / "learning_curve_noisy.png").stat().st_size > 10_000


def test_one_seed_says_it_is_a_draw_and_no_seeds_is_refused(tmp_path: Path) -> None:
    chat = ChatClient(ScriptedChat(copying_reply))
    result = run_demo(rounds=2, seeds=1, home=tmp_path, chat=chat, embedder=HashEmbedder(), progress=False)
    assert result["table"].splitlines()[1].split() == ["1", "0.00", "0.00", "0.00"]  # one seed: the values
    assert "one seed: a draw" in result["verdict"]
    assert result["solved"] == "solved at least once by round 2: no memory 0.00, similarity 0.25, q-memory 0.25"
    with pytest.raises(ConfigError, match="at least one seed"):
        run_demo(rounds=2, seeds=0, home=tmp_path, chat=chat, embedder=HashEmbedder(), progress=False)


def test_without_matplotlib_the_demo_prints_its_tables_and_says_how_to_draw_the_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("apps.demo.can_plot", lambda: False)  # [local] without [plots]: no matplotlib
    chat = ChatClient(ScriptedChat(copying_reply))
    result = run_demo(rounds=2, seeds=1, home=tmp_path, chat=chat, embedder=HashEmbedder(), progress=False)
    assert result["plot"] is None and result["noisy"]["plot"] is None
    assert not list((tmp_path / "demo").glob("*.png"))
    monkeypatch.setattr("apps.demo.run_demo", lambda **kwargs: result)
    assert main(["demo", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "facility codes, clean ratings" in out
    assert "learning curves: not drawn, matplotlib is missing (pip install -e '.[plots]'" in out
    assert f"all figures:     {tmp_path / 'demo' / 'demo.json'}" in out
