"""Generate data/facility_codes.jsonl — the bundled task family of the demo.

Each task asks for a code (door or alarm) at one building (warehouse or workshop) of one site. A code is
a site convention no model can guess; the environment reveals it after a wrong answer, so an agent with
memory can learn it. Tasks recur every round in a different phrasing (``meta.paraphrases``), and
look-alike tasks — same site, other building or other code — ask almost the same question with a
different answer, so plain similarity recall can hand the agent the wrong code.

Run: python data/make_facility_codes.py [--seed 7] [--out data/facility_codes.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SITES = ["Harbor", "Summit", "Maple", "Granite", "Willow", "Copper"]
BUILDINGS = ["warehouse", "workshop"]
ASSETS = ["door code", "alarm code"]
TEMPLATES = [
    "What is the {asset} of the {site} {building}?",
    "Tell me the {asset} for the {site} {building}.",
    "Which {asset} do I enter at the {site} {building}?",
    "I need the {site} {building} {asset}, please.",
    "{site} {building}: what's the {asset}?",
]


def generate(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    codes = rng.sample(range(1000, 10000), len(SITES) * len(BUILDINGS) * len(ASSETS))
    tasks: list[dict[str, object]] = []
    for site in SITES:
        for building in BUILDINGS:
            for asset in ASSETS:
                phrasings = [t.format(site=site, building=building, asset=asset) for t in TEMPLATES]
                tasks.append(
                    {
                        "id": f"{site}-{building}-{asset.split()[0]}".lower(),
                        "prompt": phrasings[0],
                        "answer": str(codes[len(tasks)]),
                        "checker": "normalised",
                        "family": "facility-codes",
                        "feedback": "reveal",
                        "meta": {"paraphrases": phrasings[1:], "site": site, "building": building, "asset": asset},
                    }
                )
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("facility_codes.jsonl"))
    args = parser.parse_args()
    rows = generate(args.seed)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {args.out}")


if __name__ == "__main__":
    main()
