"""The paths serving, jobs and the OpenAI server had before they moved (``evolve.deploy.*``, ``apps.server``)
still import for one release: every name from where it lives now, with a warning that names that place."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# (old module, a name it had, the module that holds the name now)
MOVED = [
    ("evolve.deploy.serving", "Deployment", "evolve.serve.deployment"),
    ("evolve.deploy.serving", "Answer", "evolve.serve.answers"),
    ("evolve.deploy.serving", "FeedbackReceipt", "evolve.serve.feedback"),
    ("evolve.deploy.serving", "feedback_rows", "evolve.serve.responses"),
    ("evolve.deploy.rating", "rate", "evolve.serve.rating"),
    ("evolve.deploy.mcp_memory", "TenantMemory", "evolve.serve.tenant_memory"),
    ("evolve.deploy.jobs", "run_job", "evolve.jobs.job"),
    ("evolve.deploy.upkeep", "memory_upkeep", "evolve.jobs.maintenance"),
    ("apps.server", "create_app", "evolve.serve.protocols.openai_http"),
    ("apps.server", "ChatRequest", "evolve.serve.protocols.openai_requests"),
    ("apps.server", "check_keys", "evolve.serve.protocols.keys"),
    ("apps.keys", "check_keys", "evolve.serve.protocols.keys"),
    ("evolve.deploy.streaming", "AnswerStream", "evolve.serve.streaming"),
    ("evolve.deploy.feedback", "FeedbackReceipt", "evolve.serve.feedback"),
    ("evolve.deploy.feedback", "learn_served", "evolve.jobs.served"),
    ("evolve.deploy.leases", "Lease", "evolve.jobs.leases"),
    ("evolve.deploy.backup", "backup", "evolve.backup.database"),
]


@pytest.mark.parametrize(("old", "name", "home"), MOVED)
def test_an_old_path_imports_its_names_with_a_warning_naming_the_new_one(old: str, name: str, home: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"`from {old} import {name}` is deprecated .* `from {home} import"):
        exec(f"from {old} import {name} as value", scope := {})  # the line a user wrote, run as written
    assert scope["value"] is getattr(importlib.import_module(home), name)


def test_the_langchain_runnable_keeps_its_old_path() -> None:
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from evolve.serve.protocols.langchain import EvolveRunnable

    with pytest.warns(DeprecationWarning, match="use `from evolve.serve.protocols.langchain import EvolveRunnable`"):
        from evolve.deploy.langchain import EvolveRunnable as old
    assert old is EvolveRunnable


def test_a_name_the_module_never_had_is_an_attribute_error_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImportError, match="cannot import name 'NoSuchThing'"):
            from evolve.deploy.serving import NoSuchThing  # noqa: F401
        with pytest.raises(AttributeError, match="module 'evolve.deploy.jobs' has no attribute '_private'"):
            importlib.import_module("evolve.deploy.jobs")._private  # noqa: B018


def test_the_warning_points_at_the_line_that_used_the_old_path(tmp_path: Path) -> None:
    script = tmp_path / "user_code.py"
    script.write_text(
        "import warnings\nwarnings.simplefilter('always')\nfrom evolve.deploy.serving import Deployment\n"
    )
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"{script}:3: DeprecationWarning: `from evolve.deploy.serving import Deployment`" in out.stderr
    assert "use `from evolve.serve.deployment import Deployment`" in out.stderr
