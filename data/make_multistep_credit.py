"""Generate data/multistep_credit.jsonl — a family where the reward comes two steps after the memory that decides it.

Each site has a vault whose key moved to a new place after a security audit. Memory holds two notes per
site before round 1: the current one and an outdated one, worded alike ("Where is the vault key for the
X kept?" / "Vault key of the X: where is it kept?"), so which one similarity prefers depends on how the
question is phrased (``prompts``); for half of the sites the outdated note is worded exactly as the first
phrasing. ``bench/multistep_credit.py`` runs each site as a three-step work order (plan, collect, open)
whose only reward is the last step's.

Written before any run, frozen with its seed: regenerate with
    python data/make_multistep_credit.py --seed 24
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SITES = [
    "Nordhafen Depot", "Südkai Lager", "Altona Kühlhaus", "Wilhelmsburg Terminal", "Harburg Umschlag",
    "Finkenwerder Halle", "Moorburg Silo", "Veddel Speicher", "Steinwerder Kai", "Waltershof Brücke",
    "Kattwyk Werft", "Neuhof Zollamt", "Billwerder Bahnhof", "Rothenburgsort Lager", "Ellerholz Schleuse",
    "Hohe Schaar Tanklager",
]  # fmt: skip
PLACES = [
    "key cabinet in the gatehouse", "drawer of the shift supervisor's desk", "safe in the harbour master's office",
    "lockbox beside loading dock 3", "key rack behind reception", "night guard's key pouch",
    "sealed envelope in the customs office", "wall safe in the crane control room",
]  # fmt: skip
QUESTIONS = [
    "Where is the vault key for the {site} kept?",
    "Where do I find the vault key at the {site}?",
    "The {site} vault key: where is it kept?",
    "Which place holds the key to the {site} vault?",
]
OTHER_WORDING = "Vault key of the {site}: where is it kept?"


def slug(text: str) -> str:
    return text.lower().replace(" ", "-").replace("ü", "ue").replace("ö", "oe")


def generate(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for i, site in enumerate(SITES):
        current, old = rng.sample(PLACES, 2)
        first, other = QUESTIONS[0].format(site=site), OTHER_WORDING.format(site=site)
        stale, fresh = (first, other) if i % 2 == 0 else (other, first)
        notes = [
            {"intent": fresh, "current": True,
             "experience": f"Since the 2024 security audit the vault key for the {site} is kept in the {current}."},
            {"intent": stale, "current": False, "experience": f"The vault key for the {site} is kept in the {old}."},
        ]  # fmt: skip
        rows.append({
            "id": f"vault-{slug(site)}", "site": site, "code": f"WO-{i + 1:02d}", "answer": current, "stale": old,
            "family": "multistep-credit", "prompts": [q.format(site=site) for q in QUESTIONS], "notes": notes,
        })  # fmt: skip
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "multistep_credit.jsonl")
    args = p.parse_args()
    args.out.write_text("".join(json.dumps(row) + "\n" for row in generate(args.seed)), encoding="utf-8")


if __name__ == "__main__":
    main()
