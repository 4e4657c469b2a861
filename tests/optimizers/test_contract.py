"""The optimizer contract: both optimizers are ``PromptOptimizer``s, a plain function is an ``Evaluate``
(checked by mypy, which is where a Protocol's signature matters), and the names renamed in 0.2.0 still
import, with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api as mypy_api

import optimizers
from connectors import ChatClient, ScriptedChat
from optimizers import Critique, PromptOptimizer, StepResult, TextualGradientOptimizer, TrainingFreeGRPO

ROOT = Path(__file__).resolve().parents[2]

# Only the contract's own modules are read; everything they import is skipped (Any), so a cold run
# takes seconds instead of the minutes a check of the whole import graph would.
MYPY_CONFIG = """\
[mypy]
python_version = 3.11
ignore_missing_imports = True
follow_imports = skip

[mypy-optimizers,optimizers.types]
follow_imports = silent
"""

PLAIN_FUNCTION = """\
from collections.abc import Mapping, Sequence

from optimizers import Evaluate, Trace


def run(candidate: Mapping[str, str], ids: Sequence[str], *, samples: int = 1,
        temperature: float | None = None) -> list[Trace]:
    return [Trace(i, (), "4", 1.0, "right") for i in ids for _ in range(samples)]


evaluate: Evaluate = run
"""


def critic() -> ChatClient:
    return ChatClient(ScriptedChat(["NO CHANGE"]))


def test_both_optimizers_are_prompt_optimizers() -> None:
    assert isinstance(TextualGradientOptimizer(critic=critic()), PromptOptimizer)
    assert isinstance(TrainingFreeGRPO(critic=critic(), library_component="solver.library"), PromptOptimizer)
    assert not isinstance(critic(), PromptOptimizer)  # no step(): not an optimizer


def mypy_errors(tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG, encoding="utf-8")
    (tmp_path / "snippet.py").write_text(source, encoding="utf-8")
    monkeypatch.setenv("MYPYPATH", str(ROOT))
    out, err, status = mypy_api.run(
        ["--config-file", str(tmp_path / "mypy.ini"), "--cache-dir", str(tmp_path / ".mypy_cache"),
         str(tmp_path / "snippet.py")]
    )  # fmt: skip
    assert status in (0, 1), err  # 2: mypy itself failed
    return out if status else ""


def test_a_plain_function_is_an_evaluate_for_mypy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert mypy_errors(tmp_path, PLAIN_FUNCTION, monkeypatch) == ""


def test_a_function_without_the_keywords_is_not_an_evaluate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without = PLAIN_FUNCTION.replace(", *, samples: int = 1,\n        temperature: float | None = None", "")
    without = without.replace("for _ in range(samples)", "")
    assert without != PLAIN_FUNCTION
    errors = mypy_errors(tmp_path, without, monkeypatch)
    assert 'variable has type "Evaluate"' in errors


def test_gradient_is_a_deprecated_name_of_critique() -> None:
    with pytest.warns(DeprecationWarning, match="optimizers.Critique"):
        from optimizers import Gradient
    assert Gradient is Critique
    assert "Gradient" not in optimizers.__all__ and "Critique" in optimizers.__all__
    with pytest.raises(AttributeError, match="no attribute 'Gradients'"):
        _ = optimizers.Gradients  # type: ignore[attr-defined]


def test_step_result_gradients_is_a_deprecated_name_of_critiques() -> None:
    critiques = (Critique("solver.system", "State the units.", ("t1",)),)
    result = StepResult("v0", None, False, "no change", critiques=critiques)
    with pytest.warns(DeprecationWarning, match="StepResult.critiques"):
        assert result.gradients == critiques
