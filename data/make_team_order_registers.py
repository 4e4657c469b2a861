"""Generate data/team_order_registers.{jsonl,toml} — a team family a 135M model can act in, whose best order
depends on the task.

The price desk (``make_team_order.py``) needs arithmetic that SmolLM2-135M does not do (0 of 32 in one
round), so it measures the order only with rule readers. This family asks for nothing but looking a number
up: a campus help desk of two clerks, each with a register in its instructions, where the desk's answer is
what the clerk who acts last says.

- ``keys``: the keys clerk's register gives the hook of each building's key in the key cabinet;
- ``parking``: the parking clerk's register gives the permit code of each car park.

Two kinds of task, 16 each (four entries of the register, four phrasings each): "which hook holds the key of
the Library?" and "what is the permit code of the North gate car park?". Only the clerk whose register names
the place can answer, so the right order puts that clerk last: parking > keys for key requests, keys > parking
for parking requests. Each fixed order gets one kind right (at most half of the tasks, for a reader that
answers only from its own register); an order chosen per kind of task can get them all. A model that copies
the number its predecessor said can still pass in the wrong order: that is measured, not assumed away.

The numbers are drawn with the seed (20261130), distinct across both registers. Designed and frozen with its
seed before any run, except two settings mended after the first SmolLM2 probe (one round, every answer 0),
which cut every answer before its number: ``max_tokens`` 8 → 24 (SmolLM2 answers in a sentence, "The key to the
Library is 3279."), and the checker ``normalised`` → ``numeric`` (the reply's last number: the normalised rule
refuses a sentence of more than ten words around the number, as "The parking permit code for the Market square
car park is 6112." is). The registers, the tasks and the conditions did not change.

Run: python data/make_team_order_registers.py  (writes both files next to this file)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20261130
KEYS_PLACES = ["Library", "Sports hall", "Chemistry lab", "Boat house"]
PARKING_PLACES = ["North gate", "Riverside", "Stadium", "Market square"]
KEYS_TEMPLATES = [
    "Which key hook holds the key of the {place}?",
    "I need the {place} key: which hook is it on?",
    "Key cabinet: the hook number for the {place} key, please.",
    "Where in the key cabinet is the key to the {place}? Give me the hook number.",
]
PARKING_TEMPLATES = [
    "What is the parking permit code for the {place} car park?",
    "I am parking at the {place} car park: which permit code do I enter?",
    "The permit code of the {place} car park, please.",
    "Give me the code to park in the {place} car park.",
]
CLERKS = {
    "keys": ("keys clerk", "key cabinet register: the hook of each building's key", "hook number", "building"),
    "parking": ("parking clerk", "parking register: the permit code of each car park", "permit code", "car park"),
}


def registers() -> dict[str, dict[str, str]]:
    """Each clerk's register: place → its number (four digits, distinct across both registers)."""
    rng = random.Random(SEED)
    numbers = [str(n) for n in rng.sample(range(1000, 10000), len(KEYS_PLACES) + len(PARKING_PLACES))]
    return {
        "keys": dict(zip(KEYS_PLACES, numbers[: len(KEYS_PLACES)], strict=True)),
        "parking": dict(zip(PARKING_PLACES, numbers[len(KEYS_PLACES) :], strict=True)),
    }


def system_prompt(clerk: str, register: dict[str, str]) -> str:
    """The clerk's instructions, its register one ``place: number`` line each."""
    title, what, number, place = CLERKS[clerk]
    lines = "\n".join(f"{name}: {value}" for name, value in register.items())
    return (
        f"You are the {title} of the campus help desk. Your {what}:\n{lines}\n"
        f"Reply with the {number} from your register for the {place} the request names, and nothing else."
    )


def tasks() -> list[dict[str, object]]:
    regs = registers()
    out: list[dict[str, object]] = []
    for kind, templates, other in (("keys", KEYS_TEMPLATES, "parking"), ("parking", PARKING_TEMPLATES, "keys")):
        for i, (place, number) in enumerate(regs[kind].items()):
            for j, template in enumerate(templates):
                out.append({
                    "id": f"{kind}-{4 * i + j + 1:02d}",
                    "prompt": template.format(place=place),
                    "answer": number,
                    "checker": "numeric",
                    "family": "team-order-registers",
                    "feedback": "reveal",
                    "meta": {"kind": kind, "place": place, "order": [other, kind]},
                })  # fmt: skip
    return out


def spec() -> str:
    """The runnable spec: the two clerks (keys listed first) with their registers, a learned order."""
    regs = registers()
    agents = "\n".join(
        f'[[agents]]\nname = "{clerk}"\nsystem = """{system_prompt(clerk, regs[clerk])}"""\n' for clerk in CLERKS
    )
    return f"""# evolve run data/team_order_registers.toml — a help desk of two clerks, each with a register; the desk's
# answer is what the clerk acting last says, so the right order depends on the request (see
# data/make_team_order_registers.py, which writes this file). bench.team_order --family registers measures it.
[run]
name = "team-order-registers"
rounds = 8
database = "sqlite:///runs/team_order_registers.db"
batch_size = 8

[model]
chat = "local/smollm2"          # or "openai/gpt-4o-mini", with base_url for any compatible server
max_tokens = 24

[embedder]
name = "minilm"

[environment]
tasks = "team_order_registers.jsonl"   # relative to this file

[team]
order = "learned"               # "fixed": always the order below
order_lr = 0.5
order_temperature = 1.0
order_group_threshold = 0.6

{agents}"""


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    jsonl, toml = here / "team_order_registers.jsonl", here / "team_order_registers.toml"
    jsonl.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks()), encoding="utf-8")
    toml.write_text(spec(), encoding="utf-8")
    print(f"wrote {jsonl} and {toml}")
