from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from apps.cli import main
from connectors import HashEmbedder, make_engine
from evolve.prompts.graph import PromptGraph
from memory import MemoryStore

TASKS = [
    {"id": "harbor-door", "prompt": "What is the door code of the Harbor warehouse?", "answer": "4471"},
    {"id": "summit-alarm", "prompt": "What is the alarm code of the Summit workshop?", "answer": "9310"},
]


def exit_status(argv: list[str]) -> int:
    """``evolve``'s exit status for ``argv``: what ``main`` returns, or the status the parser exits with (2 for
    a command line it refuses, with its usage line)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


def write_spec(
    folder: Path,
    *,
    chat: str = 'chat = "fake/scripted"\noptions = { replies = ["4471"] }',
    embedder: str = "hash",
    tasks: list[dict] | None = None,
    rounds: int = 2,
) -> Path:
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in (TASKS if tasks is None else tasks)))
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "cli"
rounds = {rounds}
database = "sqlite:///{folder / "runs.db"}"

[model]
{chat}
max_tokens = 12

[embedder]
name = "{embedder}"

[environment]
tasks = "tasks.jsonl"

[memory]
k2 = 1
"""
    )
    return spec


def test_run_prints_the_round_table_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    assert main(["run", str(spec), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:6] == ["round", "success", "solved", "reward", "memories", "mean"]
    rows = [line.split() for line in table.splitlines()[1:]]
    assert [r[1] for r in rows] == ["0.50", "0.50"]  # the scripted model knows one of the two codes
    assert [r[2] for r in rows] == ["0.50", "0.50"]  # and never the other: half the tasks solved so far
    assert [r[4] for r in rows] == ["2", "4"]  # one experience per attempt
    assert main(["memory", "stats", "--db", f"sqlite:///{tmp_path / 'runs.db'}"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["count"] == 4  # two tasks, two rounds, one experience per attempt
    assert main(["run", str(spec), "--quiet", "--rounds", "3"]) == 0  # resumes: only round 3 is new
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["1", "2", "3"]


@pytest.mark.parametrize(
    ("spec_kwargs", "message"),
    [
        ({"tasks": []}, "at least one task"),
        ({"chat": 'chat = "nosuch/model"'}, "unknown chat provider 'nosuch'"),
        ({"embedder": "nosuch"}, "unknown embedder"),
    ],
)
def test_bad_specs_get_a_clear_error_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec_kwargs: dict, message: str
) -> None:
    spec = write_spec(tmp_path, **spec_kwargs)
    assert main(["run", str(spec), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evolve: ") and message in err and "Traceback" not in err


def test_unknown_spec_field_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace("k2 = 1", "k2 = 1\nlamda = 0.5"))
    assert main(["run", str(spec)]) == 2
    assert "memory.lamda" in capsys.readouterr().err


@pytest.mark.slow
def test_evolve_run_end_to_end_with_the_local_models(tmp_path: Path, repo_root: Path) -> None:
    """The console entry point, in its own process, on SmolLM2 + MiniLM + SQLite/FAISS."""
    spec = write_spec(tmp_path, chat='chat = "local/smollm2"', embedder="minilm", rounds=2)
    out = subprocess.run(
        [sys.executable, "-m", "apps.cli", "run", str(spec), "--quiet"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["1", "2"]
    assert all(0.0 <= float(r[1]) <= 1.0 for r in rows)
    assert (tmp_path / "runs.db").is_file()
    assert list((tmp_path / "runs.db.faiss").glob("*.faiss")), "the vector index is saved beside the database"


def test_memory_show_export_import_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["run", str(spec), "--quiet"]) == 0
    capsys.readouterr()

    assert main(["memory", "show", "--spec", str(spec)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 4 and all("q=" in line and "visits=" in line for line in shown)

    exported = tmp_path / "memories.jsonl"
    assert main(["memory", "export", str(exported), "--db", db, "--embedder", "hash"]) == 0
    assert "exported 4 items" in capsys.readouterr().out
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    assert main(["memory", "import", str(exported), "--db", copy, "--embedder", "hash"]) == 0
    assert "imported 4 items" in capsys.readouterr().out
    assert main(["memory", "import", str(exported), "--db", copy, "--embedder", "hash"]) == 0
    assert "imported 0 items" in capsys.readouterr().out  # idempotent by id

    png = tmp_path / "curve.png"
    assert main(["report", "--spec", str(spec), "--out", str(png)]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["round", "cli"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def no_embedder(name: str, **kwargs: object) -> None:
    raise AssertionError(f"the command loaded the embedder {name!r}: it only needs SQL")


@pytest.mark.parametrize("action", ["stats", "show"])
def test_memory_stats_and_show_load_no_embedder_and_print_what_the_store_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    assert main(["run", str(write_spec(tmp_path)), "--quiet"]) == 0
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with MemoryStore(db, embedder=HashEmbedder()) as store:
        stats, items = store.stats(), sorted(store.items(), key=lambda it: -it.q)
    expected = {
        "stats": json.dumps(stats, indent=2, default=str) + "\n",
        "show": "".join(
            f"{it.id}  q={it.q:+.3f}  visits={it.visits}  [{it.namespace}]  {it.intent[:70]}\n" for it in items
        ),
    }[action]
    capsys.readouterr()
    monkeypatch.setattr("connectors.load_embedder", no_embedder)
    monkeypatch.setattr("apps.cli.load_embedder", no_embedder, raising=False)
    assert main(["memory", action, "--db", db]) == 0  # the default --embedder is MiniLM: 15-23 s to load
    assert capsys.readouterr().out == expected
    assert main(["memory", action, "--db", db, "--embedder", "no-such-embedder"]) == 0  # not even looked up
    out, err = capsys.readouterr()
    assert out == expected and "--embedder is deprecated" in err  # an ignored flag, accepted one more release


def test_memory_stats_on_a_missing_database_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "Équipe support — nuit" / "runs" / "evolve.db"
    assert main(["memory", "stats", "--db", f"sqlite:///{missing}"]) == 2
    assert f"no database at {missing}" in capsys.readouterr().err
    assert not missing.parent.parent.exists()
    other = tmp_path / "prompts-only.db"  # a database with Evolve's other tables, but no memories
    PromptGraph(make_engine(f"sqlite:///{other}"), "cli")  # creates the prompt tables only
    assert main(["memory", "show", "--db", f"sqlite:///{other}"]) == 2
    assert "holds no memory store (no memory_items table)" in capsys.readouterr().err


def test_memory_export_needs_a_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(["memory", "export"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


CITY_TASKS = [
    {
        "id": f"q{i}",
        "prompt": q,
        "answer": "Paris",
        "checker": "rules",
        "meta": {"rules": ["max_words:7", "one_sentence"]},
    }
    for i, q in enumerate(
        [
            "What is the capital of France?",
            "Which city is the French capital?",
            "Name the capital city of France.",
            "France's capital is which city?",
            "Where is the seat of the French government?",
            "Tell me the capital of France.",
            "Capital of France?",
            "Which city hosts the French presidency?",
            "What city is France's capital?",
            "In which city is the capital of France?",
        ]
    )
]
MEMORY_AND_PROMPTS = """
[run]
name = "cli"
rounds = 2
database = "sqlite:///{db}"

[model]
chat = "fake/scripted"
options = {{ match = "all", default = "The capital of France is Paris, a lovely city on the Seine.", replies = {{ "at most seven words" = "Paris." }} }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"
paraphrase = false

[optimizer]
kind = "textgrad"
critic = "fake/scripted"
critic_options = {{ replies = {{ "Rewrite one" = "<new_text>Answer in at most seven words.</new_text>", "Critique" = "The answers are too long: ask for at most seven words." }}, default = "NO CHANGE" }}
minibatch = 4

[memory]
k2 = 1
"""


def test_run_with_memory_and_prompt_evolution_shows_both_updates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in CITY_TASKS))
    spec = tmp_path / "spec.toml"
    spec.write_text(MEMORY_AND_PROMPTS.format(db=tmp_path / "runs.db"))
    assert main(["run", str(spec), "--quiet"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[1] for r in rows] == ["0.00", "1.00"]  # the evolved prompt fixes round 2
    assert [r[2] for r in rows] == ["0.00", "1.00"]  # solved at least once so far
    assert [r[4] for r in rows] == ["10", "20"]  # memory grew by one experience per attempt
    assert [r[6] for r in rows] == ["+1", "0"]  # round 1 accepted a prompt update, round 2 had nothing to fix

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["prompts", "log", "--spec", str(spec)]) == 0  # the spec's database and run: no --db, no --run
    log = capsys.readouterr().out.splitlines()
    assert len(log) == 2 and log[0].startswith("*")
    assert main(["prompts", "show", "--spec", str(spec)]) == 0
    assert "Answer in at most seven words." in capsys.readouterr().out
    assert main(["prompts", "rollback", "--spec", str(spec)]) == 0
    capsys.readouterr()
    assert main(["prompts", "show", "--db", db, "--run", "cli"]) == 0  # a database without its spec
    assert "You are a careful assistant." in capsys.readouterr().out
    assert main(["prompts", "diff", log[1].split()[0], "--db", db, "--run", "cli"]) == 0  # the seed vs HEAD
    assert "no difference" in capsys.readouterr().out


def test_small_critic_options_reach_the_optimizer_from_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """backward = "feedback" sends no critique call; edit = "append" adds the critic's one instruction."""
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in CITY_TASKS))
    spec_text = MEMORY_AND_PROMPTS.format(db=tmp_path / "runs.db").replace(
        '"Rewrite one" = "<new_text>Answer in at most seven words.</new_text>", "Critique" = "The answers are too long: ask for at most seven words."',
        '"Add one instruction" = "<new_text>Answer in at most seven words.</new_text>"',
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text.replace("minibatch = 4", 'minibatch = 4\nbackward = "feedback"\nedit = "append"'))
    assert main(["run", str(spec), "--quiet"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[6] for r in rows] == ["+1", "0"]
    assert main(["prompts", "show", "--db", f"sqlite:///{tmp_path / 'runs.db'}", "--graph", "cli"]) == 0  # deprecated
    shown = capsys.readouterr().out
    assert "You are a careful assistant. Reply with the answer only.\nAnswer in at most seven words." in shown

    spec.write_text(spec_text.replace("minibatch = 4", 'minibatch = 4\nedit = "prepend"'))
    assert main(["run", str(spec), "--quiet"]) == 2
    assert "edit" in capsys.readouterr().err
