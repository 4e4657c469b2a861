"""The four package faces, exactly: what a user builds with, listed here name by name so that growing a face
is a decision made in review, not a side effect; and the names that left a face still import for one
release, with a warning that says where they live now.

``pytest -s tests/test_faces.py`` prints each face's size.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

FACES: dict[str, list[str]] = {
    "evolve": [
        "AdapterRegistry",
        "Agent",
        "BfclEnv",
        "BfclMultiTurnEnv",
        "Deployment",
        "Episode",
        "Evolver",
        "Executor",
        "InProcess",
        "MemoryView",
        "OrderedTeam",
        "ParallelTeam",
        "PromptEvolution",
        "PromptGraph",
        "RayExecutor",
        "RoundMetrics",
        "Task",
        "TaskEnv",
        "Team",
        "TextWorldEnv",
        "WeightUpdates",
        "bfcl_tasks",
        "champ_tasks",
        "compose",
        "diagnose",
        "humaneval_tasks",
        "list_runs",
        "load_tasks",
        "make_evaluate",
        "multi_turn_tasks",
        "paraphrase_schedule",
        "run_job",
        "same_tasks",
        "split_tasks",
        "textworld_tasks",
    ],
    "memory": [
        "DistrustReport",
        "ForgetConfig",
        "MemoryConfig",
        "MemoryItem",
        "MemoryStore",
        "Recall",
        "Reinforcement",
        "RetrievalConfig",
        "ScoredItem",
        "TrustPolicy",
        "WriteEntry",
        "calibrate_threshold",
        "reinforcements",
        "similarity_only",
    ],
    "connectors": [
        "ChatClient",
        "ChatModel",
        "Completion",
        "ConfigError",
        "ConnectorError",
        "Embedder",
        "Environment",
        "EvolveError",
        "HashEmbedder",
        "Message",
        "Observation",
        "OpenAIEmbedder",
        "ParseError",
        "ParsedCalls",
        "ProviderTimeout",
        "RateLimited",
        "ReplayChat",
        "ResponseCache",
        "ScriptedChat",
        "SentenceTransformerEmbedder",
        "StoreError",
        "Tool",
        "ToolCall",
        "Usage",
        "evolve_home",
        "load_chat",
        "load_embedder",
        "make_engine",
        "parse_tool_calls",
    ],
    "optimizers": [
        "Budget",
        "BudgetExhausted",
        "Candidate",
        "Critique",
        "Evaluate",
        "NodeCall",
        "PRESETS",
        "PromptOptimizer",
        "StepResult",
        "TextualGradientOptimizer",
        "Trace",
        "TrainingFreeGRPO",
        "Version",
    ],
}
MOST = {"evolve": 40, "memory": 20}
"""The most names a face may export: a user reads the whole face, so it stays short."""

# One name that left each face, and the module that holds it now.
MOVED = {
    "evolve": ("seed_interval", "evolve.intervals"),
    "memory": ("zscore", "memory.recall.scoring"),
    "connectors": ("request_key", "connectors.chat"),
    "optimizers": ("pareto_front", "optimizers.selection"),
}


def face(name: str) -> ModuleType:
    return importlib.import_module(name)


def test_the_faces_sizes() -> None:
    sizes = {name: len(face(name).__all__) for name in FACES}
    print(f"\nface sizes (names exported): {sizes}, {sum(sizes.values())} in all")
    assert sizes == {name: len(names) for name, names in FACES.items()}
    assert all(sizes[name] <= most for name, most in MOST.items()), sizes


@pytest.mark.parametrize("name", sorted(FACES))
def test_each_face_exports_exactly_its_list(name: str) -> None:
    assert FACES[name] == sorted(FACES[name])  # the literal list stays sorted, so a diff shows one line
    assert sorted(face(name).__all__) == FACES[name]


@pytest.mark.parametrize("name", sorted(FACES))
def test_every_face_name_imports_without_a_warning(name: str) -> None:
    module = face(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = {n: getattr(module, n) for n in module.__all__}
    assert all(v is not None for v in values.values())


@pytest.mark.parametrize("name", sorted(FACES))
def test_a_name_that_left_the_face_imports_for_one_release_with_a_warning(name: str) -> None:
    old, home = MOVED[name]
    code = f"from {name} import {old} as value; from {home} import {old}; assert value is {old}"
    with pytest.warns(DeprecationWarning, match=rf"`from {name} import {old}` is deprecated .* `from {home} import"):
        exec(code, {})  # the import statement a user writes, run as written
    assert old not in face(name).__all__


@pytest.mark.parametrize("name", sorted(FACES))
def test_every_moved_name_still_imports_from_its_face_and_from_where_it_lives(name: str) -> None:
    module = face(name)
    moved: dict[str, str] = module._MOVED  # type: ignore[attr-defined]
    assert not set(moved) & set(module.__all__)
    for old, home in moved.items():
        with pytest.warns(DeprecationWarning, match=f"use `from {home} import {old}`"):
            value = getattr(module, old)
        assert value is getattr(importlib.import_module(home), old)


def test_the_warning_points_at_the_line_that_imported_the_name(tmp_path: Path) -> None:
    script = tmp_path / "user_code.py"
    script.write_text("import warnings\nwarnings.simplefilter('always')\nfrom memory import fit_id\n")
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"{script}:3: DeprecationWarning: `from memory import fit_id`" in out.stderr
    assert "use `from memory.write.checks import fit_id`" in out.stderr


@pytest.mark.parametrize("name", sorted(FACES))
def test_an_unknown_name_is_still_an_attribute_error(name: str) -> None:
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'NoSuchThing'"):
        getattr(face(name), "NoSuchThing")  # noqa: B009 - the attribute a user would mistype


RENAMED = [  # (old module, a name it held, its home now): renamed because the old name misled
    ("evolve.versions", "Ledger", "evolve.ledger"),  # the HEAD ledger, next to evolve/prompts/versions.py
    ("evolve.figures", "paired_interval", "evolve.intervals"),  # statistics over seeds, not plots
    ("connectors.env", "Observation", "connectors.environment"),  # the environment seam, not env variables
]


@pytest.mark.parametrize(("old", "name", "home"), RENAMED, ids=[r[0] for r in RENAMED])
def test_a_renamed_module_still_imports_for_one_release_with_a_warning(old: str, name: str, home: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"`from {old} import {name}` is deprecated .* `from {home} import"):
        exec(f"from {old} import {name} as value; from {home} import {name}; assert value is {name}", {})


def test_nothing_in_the_repository_imports_a_renamed_module() -> None:
    root = Path(__file__).resolve().parents[1]
    olds = "|".join(re.escape(r[0]) for r in RENAMED)
    pattern = re.compile(rf"^\s*(from ({olds}) import|import ({olds})\b)", re.M)
    shims = {root / (r[0].replace(".", "/") + ".py") for r in RENAMED}
    found = [
        str(path.relative_to(root))
        for folder in ("connectors", "memory", "optimizers", "evolve", "apps", "tests", "bench", "scripts")
        for path in (root / folder).rglob("*.py")
        if path not in shims and pattern.search(path.read_text("utf-8"))
    ]
    assert found == []
