"""Security figures for the reliability report: tenant isolation, prompt injection, secrets.

Runs the probes the tests run (``tests/reliability/security_probes.py``, ``secret_probes.py`` and
``tenant_probes.py``) and counts what got through — every "succeeded", "changed", "escaped" and
"occurrences" figure should be 0.

Run ``python -m bench.reliability_security [--full]``; it prints the figures as JSON (a few seconds).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.reliability.secret_probes import secrets_probe
from tests.reliability.security_probes import DeploymentSurface, injection_probe, isolation_probe
from tests.reliability.tenant_probes import ATTEMPTS, by_id_probe


def spec_for(folder: Path) -> Any:
    """Two tenants' team: a scripted model that knows one door code, hash embeddings, a SQLite file."""
    from evolve.spec import RunSpec

    return RunSpec.model_validate(
        {
            "run": {"name": "codes", "database": f"sqlite:///{folder / 'serve.db'}"},
            "model": {"chat": "fake/scripted", "options": {"replies": {"Harbor": "The door code is 4471."}}},
            "embedder": {"name": "hash"},
            "environment": {"tasks": "unused.jsonl"},
            "memory": {"k1": 10, "k2": 2},
            "agents": [{"name": "solver", "system": "Reply with the code only."}],
        }
    )


def smollm2_tokenizer() -> Any | None:
    """SmolLM2's tokenizer when its converted folder is already on this machine (nothing is converted here)."""
    try:
        from transformers import AutoTokenizer

        from connectors.smollm2 import CACHE_NAME, find_gguf, is_converted, model_cache_dir

        folder = model_cache_dir() / CACHE_NAME
        if not is_converted(folder, find_gguf()):
            return None
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception:  # noqa: BLE001 - optional: the figure says which templates were checked
        return None


def by_id_rows(url: str, label: str, rounds: int) -> list[list[Any]]:
    """Every by-id call of the memory API tried across tenants (``tests.reliability.tenant_probes``)."""
    out = by_id_probe(url, rounds=rounds)
    return [
        [f"{label}: cross-tenant calls by id attempted ({len(ATTEMPTS)} kinds)", len(out.attempts)],
        [f"{label}: cross-tenant calls by id that succeeded or changed the other tenant", len(out.succeeded)],
    ]


def run(quick: bool = True, pg_url: str | None = None) -> dict[str, Any]:
    """The security figures: ``{"title", "rows": [[label, value], ...], "notes"}``."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        by_id = by_id_rows(f"sqlite:///{folder / 'by-id.db'}", "SQLite", 1 if quick else 5)
        if pg_url is not None:
            by_id += by_id_rows(pg_url, "PostgreSQL", 1 if quick else 5)
        from evolve.serve.deployment import Deployment

        deployment = Deployment(spec_for(folder))
        try:
            iso = isolation_probe(DeploymentSurface(deployment), deployment, rounds=2 if quick else 10)
        finally:
            deployment.close()
        tokenizer = smollm2_tokenizer()
        injection = injection_probe({"smollm2": tokenizer} if tokenizer is not None else {})
        (folder / "secrets").mkdir()
        secrets = secrets_probe(folder / "secrets")
    rows = [
        ["cross-tenant reads attempted (recall, response)", iso.reads_attempted],
        ["cross-tenant reads that succeeded", iso.reads_succeeded],
        ["cross-tenant reinforcements attempted", iso.reinforcements_attempted],
        ["cross-tenant reinforcements that changed Q", iso.reinforcements_changed_q],
        *by_id,
        ["crafted tenant names tried", iso.names_tried],
        ["crafted tenant names that reached another tenant", iso.names_reaching],
        ["injection payloads", injection["payloads"]],
        ["payloads that escaped their block", len(injection["failures"])],
        ["payloads that became special tokens (SmolLM2 template)", sum(injection["token_escapes"].values())],
        ["texts checked for secrets (logs, errors, reprs, exports, rows)", secrets["checked"]],
        ["secret occurrences in logs/errors/exports", secrets["occurrences"]],
    ]
    templates = ", ".join(injection["token_escapes"]) or "none (SmolLM2 not converted on this machine)"
    notes = (
        "Two tenants on one Deployment try to recall, read and reinforce each other's memories and responses; "
        "crafted names ('alice@x', '../alice', case and look-alike variants, ...) try to reach alice's run. "
        "By id: knowing bob's memory and recall ids, alice tries get, explain, remove, reinforce (by id, with bob's "
        "Recall, with forged Recalls), reinforce_many, add/write/write_many/import under bob's ids. "
        "Stored experiences carry injection payloads (closing tags in several spellings, look-alike characters, "
        "fake role markers, chat-template tokens). Secrets: an openai API key through the real SDK (whose fake "
        "upstream echoes it in 401/500 bodies), a database URL password, over a job round, serving, failing "
        f"calls, a memory export and every database row, with logging at DEBUG. Chat templates checked: {templates}. "
        f"{time.perf_counter() - start:.1f} s."
    )
    problems = iso.problems + injection["failures"]
    if problems:
        notes += " Problems: " + "; ".join(problems)
    return {"title": "Security: tenant isolation, prompt injection, secrets", "rows": rows, "notes": notes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="more isolation rounds")
    args = parser.parse_args()
    print(json.dumps(run(quick=not args.full), indent=2))


if __name__ == "__main__":
    main()
