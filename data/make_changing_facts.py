"""Generate data/changing_facts.jsonl — facts that change in the middle of a run.

Each task asks for the desk phone extension of one member of staff. An extension is an arbitrary
three-digit number no model can guess; a wrong answer's feedback reveals it. Half of the staff move
desks before round 5: from then on their extension is a new number (``meta.changes``), and every memory
that showed the old one is stale. Names are all different (no look-alikes), so what this family tests
is whether memory lets go of a fact that was right and is now wrong. Tasks recur every round in one of
five phrasings (``meta.paraphrases``).

Written before any run, frozen with its seed: regenerate with
    python data/make_changing_facts.py --seed 11
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

FIRST = ["Amara", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hiroshi", "Ines", "Jonas", "Keziah", "Lars"]
LAST = ["Okafor", "Lindqvist", "Moreau", "Petrov", "Yilmaz", "Haddad", "Novak", "Tanaka", "Duarte", "Weber"]
TEMPLATES = [
    "What is {name}'s desk phone extension?",
    "Which extension reaches {name}'s desk?",
    "I need to call {name} at their desk. What's the extension?",
    "Desk extension for {name}, please.",
    "How do I dial {name}'s desk phone internally?",
]
TASKS = 24
CHANGE_ROUND = 5


def generate(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    names = rng.sample([f"{f} {last}" for f in FIRST for last in LAST], TASKS)
    extensions = [str(n) for n in rng.sample(range(200, 900), 2 * TASKS)]
    movers = set(rng.sample(range(TASKS), TASKS // 2))
    tasks: list[dict[str, object]] = []
    for i, name in enumerate(names):
        phrasings = [t.format(name=name) for t in TEMPLATES]
        meta: dict[str, object] = {"paraphrases": phrasings[1:], "person": name}
        if i in movers:
            meta["changes"] = [{"round": CHANGE_ROUND, "answer": extensions[TASKS + i]}]
        tasks.append(
            {
                "id": "ext-" + name.lower().replace(" ", "-"),
                "prompt": phrasings[0],
                "answer": extensions[i],
                "checker": "normalised",
                "family": "changing-facts",
                "feedback": "reveal",
                "meta": meta,
            }
        )
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("changing_facts.jsonl"))
    args = parser.parse_args()
    rows = generate(args.seed)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {args.out}")


if __name__ == "__main__":
    main()
