"""Generate data/team_order.jsonl — a team family where the best order of the agents depends on the task.

A price desk of three agents, each doing one thing to the amount it is handed (the task's, for the first one):
``rounder`` rounds it to whole euros, ``vat`` adds 20% VAT, ``labeller`` writes it as a price tag
("EUR 14.40"). The team's answer is the last agent's output, checked exactly. Two kinds of task, 16 each:

- **shelf tags** of a garden centre: the net price is rounded to whole euros first, then VAT is added
  (rounder > vat > labeller);
- **dinner bills** of a restaurant: VAT is added to the bill first, then the total is rounded
  (vat > rounder > labeller).

Only the labeller last can pass, and of those two orders each kind takes one, so every fixed order gets at
most half of the tasks right; an order chosen per kind of task can get them all. The amounts are drawn so
that the two orders always give different tags. Designed and frozen with its seed (20261129) before any run.

Run: python data/make_team_order.py  (writes data/team_order.jsonl next to this file)
"""

from __future__ import annotations

import json
import random
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

SEED = 20261129
PER_KIND = 16
VAT = Decimal("1.2")

SHELF = [
    "Shelf tag for the garden centre: a {item} with a net price of {amount} EUR. Round the net price to whole "
    "euros, then add 20% VAT, and write the price tag.",
    "Garden centre shelf label, {item}, net {amount} EUR: whole euros first, VAT on top, then the tag.",
    "Make the shelf price tag for a {item} (net price {amount} EUR) in the garden centre.",
    "The garden centre needs a shelf tag: {item}, {amount} EUR before tax.",
]
BILL = [
    "Dinner bill for table {table} at the restaurant: {amount} EUR before tax. Add 20% VAT to the bill, then "
    "round the total to whole euros, and write it as a price tag.",
    "Restaurant bill, table {table}, {amount} EUR net: VAT first, then round the total, then the tag.",
    "Write the price tag of table {table}'s dinner bill ({amount} EUR before VAT) at the restaurant.",
    "Table {table} asks for the bill at the restaurant: {amount} EUR before tax.",
]
ITEMS = ["lavender pot", "rose bush", "bag of compost", "watering can", "olive tree", "pair of pruning shears",
         "bird feeder", "terracotta planter"]  # fmt: skip


def tag(amount: Decimal) -> str:
    return f"EUR {cents(amount)}"


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(Decimal("0.01"), ROUND_HALF_UP)


def whole(amount: Decimal) -> Decimal:
    return amount.quantize(Decimal("1"), ROUND_HALF_UP)


def tasks() -> list[dict[str, object]]:
    rng = random.Random(SEED)
    out: list[dict[str, object]] = []
    for kind, templates in (("shelf", SHELF), ("bill", BILL)):
        made = 0
        while made < PER_KIND:
            amount = Decimal(rng.randrange(500, 9000)) / 100
            shelf, bill = tag(whole(amount) * VAT), tag(whole(cents(amount * VAT)))  # each step's output is in cents
            if shelf == bill:
                continue
            prompt = templates[made % len(templates)].format(
                item=ITEMS[made % len(ITEMS)], table=3 + made, amount=f"{amount:.2f}"
            )
            out.append({
                "id": f"{kind}-{made + 1:02d}",
                "prompt": prompt,
                "answer": shelf if kind == "shelf" else bill,
                "checker": "normalised",
                "family": "team-order",
                "feedback": "reveal",
                "meta": {"kind": kind, "order": ["rounder", "vat", "labeller"] if kind == "shelf" else ["vat", "rounder", "labeller"]},
            })  # fmt: skip
            made += 1
    return out


if __name__ == "__main__":
    path = Path(__file__).resolve().parent / "team_order.jsonl"
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks()), encoding="utf-8")
    print(f"wrote {path}")
