"""Generate data/lookalikes.jsonl — look-alike entities with different answers, asked in paraphrases.

Each task asks for the visitor badge colour of one site. Sites come in pairs whose names differ by a
suffix (Quartz and Quartzite, Ash and Ashford, ...), and the two sites of a pair have different colours.
A colour is arbitrary (no model can guess it); a wrong answer's feedback reveals it. Embedders put the
two sites' questions closer together than two phrasings of the same question, so similarity recall
hands an agent its twin's memory: this is the case Q-values have to fix. Tasks recur every round in
one of five phrasings (``meta.paraphrases``).

Written before any run, frozen with its seed: regenerate with
    python data/make_lookalikes.py --seed 17
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

PAIRS = [
    ("Quartz", "Quartzite"),
    ("Ash", "Ashford"),
    ("Mill", "Millbrook"),
    ("Elm", "Elmwood"),
    ("Rose", "Rosemont"),
    ("Oak", "Oakley"),
    ("Pine", "Pinehurst"),
    ("Stone", "Stonebridge"),
    ("Brook", "Brookfield"),
    ("Fern", "Ferndale"),
    ("Clay", "Clayton"),
    ("Glen", "Glenview"),
]
COLOURS = ["red", "blue", "green", "yellow", "orange", "purple", "white", "black", "grey", "pink"]
TEMPLATES = [
    "What colour is the visitor badge at the {site} site?",
    "Visitor badges at {site}: which colour?",
    "Which badge colour do visitors get at the {site} site?",
    "I'm visiting {site} tomorrow. What colour will my visitor badge be?",
    "Tell me the visitor badge colour for {site}.",
]


def generate(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    tasks: list[dict[str, object]] = []
    for pair in PAIRS:
        for site, colour in zip(pair, rng.sample(COLOURS, 2), strict=True):  # twins never share a colour
            phrasings = [t.format(site=site) for t in TEMPLATES]
            tasks.append(
                {
                    "id": f"badge-{site.lower()}",
                    "prompt": phrasings[0],
                    "answer": colour,
                    "checker": "normalised",
                    "family": "lookalikes",
                    "feedback": "reveal",
                    "meta": {"paraphrases": phrasings[1:], "site": site, "twin": next(s for s in pair if s != site)},
                }
            )
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("lookalikes.jsonl"))
    args = parser.parse_args()
    rows = generate(args.seed)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {args.out}")


if __name__ == "__main__":
    main()
