"""bench.structured_output's requests, its BFCL pairing and its summary keys (no model loaded)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema

from bench.bfcl_learning import summary_keys as bfcl_keys
from bench.structured_output import bfcl_comparison, markdown, summary_keys
from bench.structured_requests import structured_requests


def test_fifty_requests_are_half_json_of_a_schema_and_every_schema_and_tool_is_valid() -> None:
    requests = structured_requests(50)
    assert Counter(r.kind for r in requests) == {"json_schema": 25, "json_object": 9, "required": 8, "named": 8}
    assert structured_requests(50) == requests  # the same requests every run
    assert len({r.subject for r in requests if r.kind == "json_schema"}) == 25
    for r in requests:
        if r.schema is not None:
            jsonschema.Draft202012Validator.check_schema(r.schema)
            assert r.response_format and r.response_format["json_schema"]["strict"] is True
        if r.kind == "named":
            assert len(r.tools) == 1 and r.params == {"tool_choice": "required"}


def cell(per_seed: list[float]) -> dict[str, Any]:
    return {"transfer_per_seed": per_seed, "last_per_seed": per_seed}


def report(path: Path, calls: str, per_seed: list[float]) -> None:
    settings = {"seeds": list(range(len(per_seed))), "calls": calls}
    body = {"settings": settings, "categories": {"simple_python": {"conditions": {"no_memory": cell(per_seed)}}}}
    path.write_text(json.dumps(body))


def test_the_bfcl_reports_of_both_modes_are_paired_seed_by_seed(tmp_path: Path) -> None:
    assert bfcl_comparison(tmp_path) == {}  # nothing until both ran
    report(tmp_path / "bfcl_learning_calls_constrained.json", "constrained", [0.5, 0.25, 0.5])
    report(tmp_path / "bfcl_learning_calls_prompted.json", "prompted", [0.25, 0.25, 0.25])
    got = bfcl_comparison(tmp_path)["cells"]["simple_python_no_memory_transfer"]
    assert (got["constrained"], got["prompted"], got["seeds"]) == (0.4167, 0.25, 3)
    assert got["difference"][0] == 0.1667 and got["difference"][1] < 0.1667 < got["difference"][2]


def test_the_summary_keys_name_the_served_figures_and_their_prompted_baseline() -> None:
    figures = {"requests": 6, "valid_first_try": 1.0, "valid_after_retries": 1.0, "asked_mean": 1.0,
               "seconds_p50": 2.5, "seconds_p90": 3.0}  # fmt: skip
    prompted = {**figures, "valid_first_try": 0.0, "valid_after_retries": 0.17, "asked_mean": 2.8, "seconds_p50": 30.0}
    result = {
        "settings": {"requests": 6, "max_tokens": 128, "threads": 2},
        "seconds": 10.0,
        "libraries": {},
        "served": {"constrained": {"all": figures, "kinds": {}}, "prompted": {"all": prompted, "kinds": {}}},
        "bfcl": {},
    }
    keys = summary_keys(result)
    assert keys["structured_valid_share_smollm2"] == 1.0 and keys["structured_answer_s_p50"] == 2.5
    assert keys["structured_valid_share_smollm2_prompted"] == 0.0 and keys["structured_answer_s_p50_prompted"] == 30.0
    assert "| constrained | all | 6 | 100% |" in markdown(result)


def test_bfcl_learning_names_a_calls_mode_in_its_keys() -> None:
    c = {k: 0.5 for k in ("last", "cum", "transfer")} | {
        f"{k}_per_seed": [0.5, 0.5] for k in ("last", "cum", "transfer")
    }
    result = {"settings": {"split": "unseen", "calls": "prompted"},
              "categories": {"simple_python": {"conditions": {"no_memory": c}}}}  # fmt: skip
    keys = bfcl_keys(result)
    assert "learning_bfcl_simple_python_no_memory_transfer_calls_prompted" in keys
    assert not [k for k in keys if "_calls_" not in k]  # the default run's keys stay the default run's
