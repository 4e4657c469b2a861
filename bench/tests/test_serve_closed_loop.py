"""The closed-loop bench's app side: the SDK's tool calls read back as BFCL's call syntax that BFCL's
checker grades, and the report shows each epoch with its interval."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.serve_closed_loop import bfcl_text, markdown

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by make test (--no-deps)")


def sdk_call(name: str, arguments: dict[str, object]) -> SimpleNamespace:
    """What ``completion.choices[0].message.tool_calls`` holds: objects with ``.function.name/.arguments``."""
    return SimpleNamespace(function=SimpleNamespace(name=name, arguments=json.dumps(arguments)))


def test_tool_calls_become_bfcl_syntax_that_the_checker_grades() -> None:
    from evolve.envs.bfcl.single import bfcl_tasks, grade

    [task] = bfcl_tasks("simple_python", limit=1)  # calculate_triangle_area(base=10, height=5)
    right = bfcl_text([sdk_call("calculate_triangle_area", {"base": 10, "height": 5, "unit": "units"})])
    wrong = bfcl_text([sdk_call("calculate_triangle_area", {"base": 5, "height": 10})])
    assert right.startswith("[calculate_triangle_area(") and right.endswith(")]")
    assert grade(task, right).reward == 1.0
    assert grade(task, wrong).reward == 0.0 and "A correct call" in grade(task, wrong).feedback
    assert bfcl_text(None) == "" and grade(task, "").reward == 0.0


def test_the_report_has_a_row_per_epoch_with_intervals() -> None:
    cell = {"mean": 0.25, "low": 0.1, "high": 0.4}
    diff = {"mean": 0.1, "low": -0.05, "high": 0.25}
    figures = {f"{arm}_epoch{e}": cell for arm in ("direct", "evolve") for e in (1, 2)}
    figures |= {f"evolve_minus_direct_epoch{e}": diff for e in (1, 2)}
    result = {"category": "simple_python", "tasks": 12, "epochs": 2, "seeds": 3, "figures": figures,
              "cells": {"evolve": [{"jobs": ["ran r@t round 1: success 1.00"]}]}}  # fmt: skip
    report = markdown(result)
    assert "| 2 | 0.250 [0.100, 0.400] | 0.250 [0.100, 0.400] | 0.100 [-0.050, +0.250] |" in report
    assert "`ran r@t round 1: success 1.00`" in report


def test_a_run_with_wrong_ratings_says_so() -> None:
    cell = {"mean": 0.25, "low": 0.1, "high": 0.4}
    figures = {f"{arm}_epoch1": cell for arm in ("direct", "evolve")} | {"evolve_minus_direct_epoch1": cell}
    result = {"category": "simple_python", "tasks": 12, "epochs": 1, "seeds": 3, "rho": 0.2, "figures": figures,
              "cells": {"evolve": [{"jobs": []}]}}  # fmt: skip
    assert "A share ρ = 0.2 of the app's ratings is wrong" in markdown(result)
    assert "is wrong" not in markdown({**result, "rho": 0.0})


def test_a_stopped_run_resumes_from_its_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each finished arm and seed is saved at once; a rerun with the same settings runs only what is missing,
    and one with other settings starts afresh."""
    from bench import serve_closed_loop

    ran: list[tuple[str, int]] = []
    stops = [("evolve", 1)]  # the first run stops in the middle of the second seed

    def fake_arm(arm: str, tasks: Any, epochs: int, seed: int, rho: float = 0.0) -> dict[str, Any]:
        if (arm, seed) in stops:
            stops.clear()
            raise RuntimeError("stopped")
        ran.append((arm, seed))
        return {"success": [0.25 * (arm == "evolve")] * epochs, "jobs": [], "seconds": 1.0}

    monkeypatch.setattr(serve_closed_loop, "run_arm", fake_arm)
    partial = tmp_path / "serve_closed_loop_rho2.partial.json"
    with pytest.raises(RuntimeError, match="stopped"):
        serve_closed_loop.run("simple_python", 4, 2, 2, 0.2, partial)
    assert ran == [("direct", 0), ("evolve", 0), ("direct", 1)]
    result = serve_closed_loop.run("simple_python", 4, 2, 2, 0.2, partial)
    assert ran[3:] == [("evolve", 1)] and result["figures"]["evolve_minus_direct_epoch2"]["mean"] == 0.25
    serve_closed_loop.run("simple_python", 4, 2, 2, 0.1, partial)  # other settings: nothing reused
    assert len(ran) == 8
