"""Output rules: each rule, the checker's reward and feedback, validation at load, the bundled family."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from connectors.errors import ConfigError
from evolve.envs.rules import (
    RULE_NAMES,
    check_rules,
    count_sentences,
    count_words,
    lowercase,
    max_words,
    no_punctuation,
    one_line,
    one_sentence,
    one_word,
    parse_rule,
    parse_rules,
    prefix,
    rule_violations,
    state_rules,
)
from evolve.envs.tasks import CHECKERS, Task, TaskEnv, check, load_tasks

FAMILY_RULES = ["max_words:7", "one_sentence"]


def rules_task(**kw: object) -> Task:
    kw.setdefault("id", "t1")
    kw.setdefault("prompt", "What is the capital of France?")
    kw.setdefault("answer", "Paris")
    kw.setdefault("checker", "rules")
    kw.setdefault("meta", {"rules": ["one_word", "lowercase", "no_punctuation"]})
    return Task(**kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- each rule


@pytest.mark.parametrize(
    ("rule", "good", "bad", "message"),
    [
        (one_word, "paris", "the capital is paris", "single word; it had 4 words"),
        (one_word, "Paris.", "", "single word; it had 0 words"),
        (lowercase, "the capital is paris.", "Paris", "lowercase; it has the capital letters P"),
        (no_punctuation, "the capital is paris", "paris, france.", "no punctuation; it has ',', '.'."),
        (no_punctuation, "paris", "\u201cparis\u201d", "no punctuation"),
        (one_line, "The capital is Paris.", "Paris.\nIt is big.", "on one line; it had 2 lines"),
        (one_sentence, "The opposite of hot is cold.", "It is cold. Heat is energy", "single sentence; it had 2"),
        (one_sentence, "2 + 3 = 5", "4.\nA dog has four legs.", "single sentence; it had 2"),
        (one_sentence, "It is 3.5 metres long!", "Cold! Really? Yes.", "single sentence; it had 3"),
    ],
)
def test_rule_passes_good_and_explains_bad(
    rule: Callable[[str], str | None], good: str, bad: str, message: str
) -> None:
    assert rule(good) is None
    problem = rule(bad)
    assert problem is not None and message in problem


def test_max_words_counts_words_not_symbols() -> None:
    assert count_words("2 + 3 = 5") == 3
    assert max_words("2 + 3 = 5", 3) is None
    assert max_words("one two three four", 3) == "The answer must be at most 3 words; it had 4."
    assert max_words("one", 1) is None


def test_prefix_is_exact_and_case_sensitive() -> None:
    assert prefix("  ANSWER: paris", "ANSWER:") is None
    assert "must start with 'ANSWER:'" in (prefix("Answer: paris", "ANSWER:") or "")
    assert "was empty" in (prefix("   ", "ANSWER:") or "")


def test_count_sentences_ignores_decimals_and_empty_pieces() -> None:
    assert count_sentences("Pi is 3.14.") == 1
    assert count_sentences("...") == 0
    assert count_sentences("One. Two! Three?") == 3


# ---------------------------------------------------------------- parsing and unknown rules


def test_parse_rule_with_argument() -> None:
    rule = parse_rule("max_words:6")
    assert (rule.name, rule.arg) == ("max_words", 6)
    assert rule.check("a b c d e f g") == "The answer must be at most 6 words; it had 7."
    assert parse_rule("prefix:ANSWER: ").arg == "ANSWER: "  # everything after the first ':' is the text


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        (["shout"], "unknown output rule 'shout'"),
        (["one_word", "max_words:zero"], "positive whole number"),
        (["max_words:0"], "positive whole number"),
        (["max_words"], "needs an argument"),
        (["one_word:3"], "takes no argument"),
        (["prefix:"], "expected the text"),
        (["prefix:A:", "prefix:B:"], "at most one prefix"),
        ([], "non-empty list"),
        ("one_word", "non-empty list"),
        ([3], "non-empty string"),
    ],
)
def test_bad_rules_are_refused(rules: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_rules(rules)


def test_unknown_rule_error_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        parse_rule("uppercase")
    for name in RULE_NAMES:
        assert name in str(info.value)


def test_state_rules_gives_one_instruction_per_rule() -> None:
    text = state_rules(["one_word", "lowercase", "max_words:6", "prefix:ANSWER:"])
    assert text == (
        "Answer with a single word. Write in lowercase only, with no capital letters. "
        "Use at most 6 words. Start the answer with 'ANSWER:'."
    )


# ---------------------------------------------------------------- check_rules


def test_reward_needs_every_rule_and_the_content() -> None:
    rules = ["one_word", "lowercase", "no_punctuation"]
    assert check_rules(rules, " paris\n", "Paris") == (1.0, "")
    assert check_rules(rules, "paris", ["lutetia", "Paris"]) == (1.0, "")
    assert check_rules(["max_words:7"], "2 + 3 = 5", 5) == (1.0, "")
    assert check_rules(rules, "lyon", "Paris")[0] == 0.0
    assert check_rules(rules, "Paris", "Paris")[0] == 0.0


def test_feedback_lists_every_violation_then_the_content_verdict() -> None:
    rules = ["one_word", "lowercase", "no_punctuation", "one_sentence", "max_words:5"]
    reward, feedback = check_rules(rules, "The capital of France is Paris. It is big.", "paris")
    assert reward == 0.0
    assert feedback == (
        "The answer must be a single word; it had 9 words. "
        "The answer must be lowercase; it has the capital letters T, F, P, I. "
        "The answer must have no punctuation; it has '.'. "
        "The answer must be a single sentence; it had 2 sentences. "
        "The answer must be at most 5 words; it had 9. "
        "The content was right."
    )


def test_wrong_content_is_revealed_unless_told_not_to() -> None:
    rules = ["one_word", "lowercase"]
    assert check_rules(rules, "lyon", "Paris") == (
        0.0,
        "Every rule was followed, but the content was wrong. The expected answer is: Paris.",
    )
    assert check_rules(rules, "Lyon", "Paris", reveal=False) == (
        0.0,
        "The answer must be lowercase; it has the capital letters L. The content was wrong.",
    )


def test_envelope_is_removed_before_the_other_rules_and_the_content() -> None:
    rules = ["prefix:ANSWER:", "one_word", "lowercase"]
    assert rule_violations(rules, "ANSWER: paris") == ([], "paris")
    assert check_rules(rules, "ANSWER: paris", "paris") == (1.0, "")
    reward, feedback = check_rules(rules, "paris", "paris")
    assert reward == 0.0
    assert feedback.startswith("The answer must start with 'ANSWER:'; it started with 'paris'.")
    assert feedback.endswith("The content was right.")
    # content inside a wrong envelope is still judged: "Answer:" is not "ANSWER:"
    assert "single word; it had 2 words" in check_rules(rules, "Answer: paris", "paris")[1]


def test_a_right_answer_buried_in_a_long_reply_is_right_content_but_no_reward() -> None:
    long_reply = "The opposite of hot is cold. " + "This is because heat is a form of energy. " * 3
    reward, feedback = check_rules(["max_words:7"], long_reply, "cold")
    assert (reward, feedback) == (0.0, "The answer must be at most 7 words; it had 33. The content was right.")
    assert check_rules(["max_words:7"], long_reply, "warm")[1].endswith(
        "The content was wrong. The expected answer is: warm."
    )
    # with no rule broken the reward's own match decides: a word lost in a long reply is not an answer
    assert check_rules(["one_line"], long_reply, "cold")[0] == 0.0


def test_check_rules_needs_an_expected_answer() -> None:
    with pytest.raises(ConfigError, match="expected answer"):
        check_rules(["one_word"], "paris", [])


# ---------------------------------------------------------------- through the task checker


def test_rules_is_a_registered_checker() -> None:
    assert "rules" in CHECKERS
    task = rules_task()
    assert check(task, "paris") == (1.0, "Correct.")
    reward, text = check(task, "The capital of France is Paris.")
    assert reward == 0.0
    assert text.startswith("Wrong. The answer must be a single word; it had 6 words.")
    assert text.endswith("The content was right. The expected answer is: Paris.")


def test_feedback_modes_apply_to_rule_tasks() -> None:
    hidden = rules_task(feedback="none")
    assert check(hidden, "Lyon") == (0.0, "Wrong.")
    hinted = rules_task(feedback="hint", hint="one lowercase word")
    assert check(hinted, "Lyon")[1].endswith("The content was wrong. Hint: one lowercase word")


@pytest.mark.parametrize(
    ("meta", "answer", "says"),
    [
        ({"rules": ["shout"]}, "Paris", "unknown output rule 'shout'"),
        ({}, "Paris", "needs meta 'rules'"),
        ({"rules": "one_word"}, "Paris", "non-empty list"),
        ({"rules": ["one_word"]}, "", "'answer' must be"),
        ({"rules": ["one_word"]}, None, "'answer' must be"),
        ({"rules": ["one_word"]}, ["Paris", True], "'answer' must be"),
    ],
)
def test_bad_rule_tasks_fail_at_construction(meta: dict[str, object], answer: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        rules_task(meta=meta, answer=answer)


def test_unknown_rule_fails_at_load_with_file_and_line(tmp_path: Path) -> None:
    good = {"id": "a", "prompt": "Capital of France?", "answer": "paris", "checker": "rules", "rules": ["one_word"]}
    bad = {**good, "id": "b", "rules": ["one_word", "shout"]}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tasks\.jsonl:2: task 'b'.*unknown output rule 'shout'"):
        load_tasks(path)


# ---------------------------------------------------------------- the bundled family


def load_generator(repo_root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_format_rules", repo_root / "data" / "make_format_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def family(repo_root: Path) -> list[Task]:
    return load_tasks(repo_root / "data" / "format_rules.jsonl")


def test_family_loads_with_one_rule_set(family: list[Task]) -> None:
    assert len(family) == 40
    assert {t.family for t in family} == {"format-rules"}
    assert {t.checker for t in family} == {"rules"}
    assert all(t.meta["rules"] == FAMILY_RULES for t in family)
    kinds = [t.meta["kind"] for t in family]
    assert {kind: kinds.count(kind) for kind in kinds} == {
        "capital": 8,
        "opposite": 8,
        "sum": 8,
        "language": 8,
        "double": 8,
    }


def test_every_expected_answer_passes_its_own_checker(family: list[Task]) -> None:
    for task in family:
        accepted = task.answer if isinstance(task.answer, tuple) else (task.answer,)
        for answer in accepted:
            assert check(task, str(answer)) == (1.0, "Correct."), (task.id, answer)


def test_the_small_models_rambling_fails_and_says_why(family: list[Task]) -> None:
    env = TaskEnv(family)
    env.reset("opposite-hot")
    obs = env.step("The opposite of hot is cold. This is because heat is a form of energy")
    assert obs.reward == 0.0
    assert "at most 7 words; it had 15" in obs.text
    assert "single sentence; it had 2 sentences" in obs.text
    assert "The content was right." in obs.text
    env.reset("opposite-hot")
    assert env.step("The opposite of hot is cold.").reward == 1.0


def test_committed_file_is_what_the_generator_writes(repo_root: Path) -> None:
    generator = load_generator(repo_root)
    rows = generator.generate(11)
    committed = (repo_root / "data" / "format_rules.jsonl").read_text(encoding="utf-8")
    assert committed == "".join(json.dumps(r) + "\n" for r in rows)
    assert generator.RULES == FAMILY_RULES


# ---------------------------------------------------------------- with the real model

RULES_PROMPT = "Answer in one short sentence of at most seven words. Do not explain."
PLAIN_PROMPT = "You are a helpful assistant."


@pytest.mark.slow
def test_smollm2_does_better_when_the_prompt_states_the_rules(family: list[Task]) -> None:
    from connectors import load_chat

    tasks = family[::5]  # 8 tasks across the five kinds
    chat = load_chat("local/smollm2", batch_size=8)

    def score(system: str) -> float:
        prompts = [[{"role": "system", "content": system}, {"role": "user", "content": t.prompt}] for t in tasks]
        answers = chat.complete_batch(prompts, max_tokens=16, temperature=0)
        return sum(check(t, a.text)[0] for t, a in zip(tasks, answers, strict=True))

    plain, stated = score(PLAIN_PROMPT), score(RULES_PROMPT)
    assert stated >= plain + 2, (plain, stated)


def test_docstring_examples_run() -> None:
    import doctest

    import evolve.envs.rules

    result = doctest.testmod(evolve.envs.rules)
    assert result.attempted > 0 and result.failed == 0
