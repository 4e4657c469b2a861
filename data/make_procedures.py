"""Generate data/procedures.jsonl — how-to tasks whose answer is a procedure shared by sibling tasks.

Each task asks how to restart one device at one office. The procedure is three steps that depend on the
device alone (the same for every office), arbitrary enough that no model knows it; a wrong answer's
feedback reveals it. So an experience is reusable: what solved the label printer at Harbor solves the
label printer at Summit, a task never seen before. Devices come in look-alike pairs (label and laser
printer, badge and card reader, ...) with different procedures, the trap for similarity recall. An
answer passes when it holds the three steps in order, as written ("hold reset, open cover, press
power"). Tasks recur every round in one of five phrasings (``meta.paraphrases``).

Written before any run, frozen with its seed: regenerate with
    python data/make_procedures.py --seed 13
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DEVICES = [
    "label printer",
    "laser printer",
    "badge reader",
    "card reader",
    "coffee machine",
    "espresso machine",
    "wall projector",
    "ceiling projector",
]
OFFICES = ["Harbor", "Summit", "Maple"]
STEPS = [
    "unplug",
    "hold reset",
    "press power",
    "open cover",
    "remove tray",
    "wait",
    "plug in",
    "close cover",
    "scan badge",
    "flip breaker",
]
TEMPLATES = [
    "How do I restart the {device} at the {office} office?",
    "What are the steps to restart the {office} office {device}?",
    "The {device} at {office} is stuck. How do I restart it?",
    "Restart procedure for the {office} {device}, please.",
    "{office} office: how is the {device} restarted?",
]


def generate(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    procedures: dict[str, str] = {}
    for device in DEVICES:
        while True:
            steps = ", ".join(rng.sample(STEPS, 3))
            if steps not in procedures.values():
                procedures[device] = steps
                break
    tasks: list[dict[str, object]] = []
    for office in OFFICES:
        for device in DEVICES:
            phrasings = [t.format(device=device, office=office) for t in TEMPLATES]
            tasks.append(
                {
                    "id": f"restart-{office}-{device}".lower().replace(" ", "-"),
                    "prompt": phrasings[0],
                    "answer": procedures[device],
                    "checker": "contains",
                    "family": "procedures",
                    "feedback": "reveal",
                    "meta": {"paraphrases": phrasings[1:], "device": device, "office": office},
                }
            )
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("procedures.jsonl"))
    args = parser.parse_args()
    rows = generate(args.seed)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {args.out}")


if __name__ == "__main__":
    main()
