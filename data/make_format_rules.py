"""Generate data/format_rules.jsonl — a task family where the system prompt's instructions matter.

Each task asks an easy question a 135M-parameter model can answer (the capital or the language of a
well-known country, the opposite of a simple word, a small sum, a number times two), but the
environment also checks output rules that the task text never states. Every task carries the same rules
(``meta.rules``), so one system prompt that states them fixes the whole family:

    max_words:7    at most seven words ("2 + 3 = 5" is three: tokens without a letter or digit do not count)
    one_sentence   a single sentence: no explanation or derivation after the answer

The ``rules`` checker (``evolve.envs.rules``) gives reward 1 only when both rules hold and the content is
right; its feedback names each broken rule ("The answer must be a single sentence; it had 2
sentences.") and says whether the content was right; the "reveal" mode adds the expected answer.

Why these rules and not "one lowercase word": SmolLM2-135M-Instruct cannot be prompted out of its
sentence template ("The capital of France is Paris."). Scored with one_word + lowercase +
no_punctuation (and once with an ``ANSWER:`` envelope), these 40 tasks got 0/40 under each of five
system prompts stating those rules (plain wording, an example answer, a few-shot transcript, the
envelope), while the content was right in 24-36 of 40: the form, not the knowledge, was out of reach.
What a system prompt does change is length: without instructions the model explains after the answer
("The opposite of hot is cold. This is because heat is...") or starts a derivation it does not finish
in 16 tokens ("To solve this problem, we need to..."); told to be brief, it answers in one sentence.

Measured (SmolLM2-135M-Instruct via ``load_chat("local/smollm2", batch_size=24)``, ``complete_batch``
over all 40 tasks, ``max_tokens=16``, greedy). "content": answers whose body matches an expected answer,
in brackets those holding it anywhere as a word; "rules held": answers breaking no rule:

    system prompt                                                         reward  content  rules held
    (a) "You are a helpful assistant."                                     0.275  11 (20)      13
    (b) "Answer in one short sentence of at most seven words.
         Do not explain."                                                  0.800  33 (36)      34
    the same with "six words"                                              0.825  34 (37)      35
    state_rules(RULES): "Use at most 7 words. Answer in a single
         sentence; do not explain."                                        0.575  23 (28)      24
    "Keep every reply to a single short sentence (seven words or
         fewer). Give the answer and stop; never add an explanation."      0.625  27 (31)      26
    evolve.agent.DEFAULT_SYSTEM "You are a careful assistant. Reply
         with the answer only."                                            0.350  16 (24)      14

Per kind, tasks passed of 8, (a) → (b): capital 6 → 8, opposite 3 → 8, sum 0 → 5, language 0 → 4,
double 2 → 7. Greedy decoding makes the numbers repeatable on one machine.

Run: python data/make_format_rules.py [--seed 11] [--out data/format_rules.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

RULES = ["max_words:7", "one_sentence"]
PER_KIND = 8

CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Italy": "Rome",
    "Germany": "Berlin",
    "Spain": "Madrid",
    "England": "London",
    "Russia": "Moscow",
    "Egypt": "Cairo",
    "China": "Beijing",
    "Greece": "Athens",
    "Ireland": "Dublin",
    "Austria": "Vienna",
}
# Every accepted answer: "light" → "dark" or "darkness" or "heavy" are all fair.
OPPOSITES = {
    "hot": ["cold"],
    "up": ["down"],
    "big": ["small", "little"],
    "day": ["night"],
    "fast": ["slow"],
    "open": ["closed", "shut"],
    "happy": ["sad", "unhappy"],
    "left": ["right"],
    "wet": ["dry"],
    "hard": ["soft", "easy"],
    "full": ["empty"],
    "early": ["late"],
    "push": ["pull"],
    "light": ["dark", "darkness", "heavy"],
}
LANGUAGES = {
    "France": ["French"],
    "Germany": ["German"],
    "Spain": ["Spanish"],
    "Italy": ["Italian"],
    "Japan": ["Japanese"],
    "Russia": ["Russian"],
    "China": ["Chinese", "Mandarin"],
    "Greece": ["Greek"],
    "Portugal": ["Portuguese"],
    "England": ["English"],
    "Poland": ["Polish"],
    "Sweden": ["Swedish"],
}
NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty"
).split()


def number_answers(n: int) -> list[str]:
    """A number as digits and as a word: "7" and "seven" both pass."""
    return [str(n), NUMBER_WORDS[n]] if 0 <= n < len(NUMBER_WORDS) else [str(n)]


def task(kind: str, key: str, prompt: str, answer: list[str]) -> dict[str, object]:
    return {
        "id": f"{kind}-{key}".lower(),
        "prompt": prompt,
        "answer": answer,
        "checker": "rules",
        "family": "format-rules",
        "feedback": "reveal",
        "meta": {"rules": list(RULES), "kind": kind},
    }


def generate(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    tasks: list[dict[str, object]] = []
    for country in rng.sample(sorted(CAPITALS), PER_KIND):
        tasks.append(task("capital", country, f"What is the capital of {country}?", [CAPITALS[country]]))
    for word in rng.sample(sorted(OPPOSITES), PER_KIND):
        tasks.append(task("opposite", word, f"What is the opposite of {word}?", OPPOSITES[word]))
    sums = rng.sample([(a, b) for a in range(1, 11) for b in range(1, 11) if a <= b], PER_KIND)
    for a, b in sums:
        tasks.append(task("sum", f"{a}-{b}", f"What is {a} + {b}?", number_answers(a + b)))
    for country in rng.sample(sorted(LANGUAGES), PER_KIND):
        tasks.append(task("language", country, f"What language is spoken in {country}?", LANGUAGES[country]))
    for n in rng.sample(range(2, 13), PER_KIND):
        tasks.append(task("double", str(n), f"What is {n} times 2?", number_answers(2 * n)))
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("format_rules.jsonl"))
    args = parser.parse_args()
    rows = generate(args.seed)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {args.out}")


if __name__ == "__main__":
    main()
