"""CHAMP problems as tasks: every reference answer passes its own checker, wrong ones fail, hints not answers."""

from __future__ import annotations

from collections import Counter

import pytest

from connectors import ConfigError
from evolve import TaskEnv
from evolve.envs.champ import INSTRUCTION, canonical_text, champ_tasks, reference
from evolve.envs.mathmatch import best_expression, equivalent, final_answer, parse
from evolve.envs.tasks import Task, check

KINDS = {"numeric": 140, "formula": 33, "yes_no": 33, "numbers": 6, "text": 58}


# ---------------------------------------------------------------- pure answer matching (no dataset)
@pytest.mark.parametrize(
    ("expected", "variables", "stated"),
    [
        ("C(10, 5)", (), "252"),
        ("sqrt(3)/3", (), "\\frac{1}{\\sqrt{3}}"),
        ("1/2", (), "0.5"),
        ("2^997", (), "2**997"),
        ("-1/2", (), "−1/2"),  # a unicode minus
        ("2^(n-1)", {"n"}, "2^{n-1}"),
        ("n(n+1)(2n+1)/6", {"n"}, "\\frac{n(n+1)(2n+1)}{6}"),
        ("(2n)!/(2^n*n!)", {"n"}, "\\frac{(2n)!}{2^n \\cdot n!}"),
        ("C(n, 4)", {"n"}, "\\binom{n}{4}"),
        ("(n+1)/(r+1)", {"n", "r"}, "(1 + n) / (1 + r)"),
    ],
)
def test_equivalent_forms_pass(expected: str, variables: set[str], stated: str) -> None:
    assert equivalent(parse(expected, variables), best_expression(stated, variables))


@pytest.mark.parametrize(
    ("expected", "variables", "stated"),
    [("239", (), "240"), ("1/2", (), "0.49"), ("2^(n-1)", {"n"}, "2^n"), ("n", {"n"}, "5"), ("0", (), "none")],
)
def test_different_values_fail(expected: str, variables: set[str], stated: str) -> None:
    assert not equivalent(parse(expected, variables), best_expression(stated, variables))


def test_final_answer_and_expression_runs() -> None:
    assert final_answer("Thus \\boxed{\\frac{1}{2}} is it.") == "\\frac{1}{2}"
    assert final_answer("Work.\nThe answer is 5.\nThanks!") == "5."
    assert final_answer("Step 1.\nStep 2: 7") == "Step 2: 7"
    assert best_expression("there are 98 values", ()) == ("num", 98.0)
    assert best_expression("2^(n-1) strings for n >= 1", {"n"}) == parse("2^(n-1)", {"n"})
    assert parse("376 625") is None and parse("import os") is None and parse("2 +") is None
    assert parse("2^99999") is not None and best_expression("2^99999", ()) is not None
    assert not equivalent(parse("1"), parse("2^99999"))  # too large to evaluate: never equal


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ("239", "numeric"),
        ("C(10, 5), or equivalently 252", "numeric"),
        ("3 is the only possible value", "numeric"),
        ("The limit exists and is equal to (a+3b)/2", "formula"),
        ("((-1)^(n+1)+n+1)/(n+2) (i.e., 1 if for odd n, and n/(n+2) for even n)", "formula"),
        ("No", "yes_no"),
        ("1, 4 and 9", "numbers"),
        ("(x^2+x+1)(x^2-x+1)", "text"),
        ("No integer solutions", "text"),
    ],
)
def test_reference_kinds(answer: str, kind: str) -> None:
    assert reference(answer).kind == kind


def test_canonical_text() -> None:
    assert canonical_text("x = 6, y = 5") == canonical_text("x=6,y=5") == "x=6,y=5"
    assert canonical_text("$(x^2 + x + 1)*(x^2 − x + 1)$") == "(x^2+x+1)(x^2-x+1)"


# ---------------------------------------------------------------- the dataset
@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    pytest.importorskip("champ_dataset", reason="the bench extra: pip install -e '.[bench]'")
    return champ_tasks()


def test_all_270_problems_load_with_hints(tasks: list[Task]) -> None:
    assert len(tasks) == 270 and len({t.id for t in tasks}) == 270
    assert Counter(t.meta["kind"] for t in tasks) == KINDS
    assert all(t.feedback == "hint" and t.hint and t.checker == "champ" for t in tasks)
    assert all(t.prompt.endswith(f"\n\n{INSTRUCTION}") for t in tasks)
    first = tasks[0]
    assert first.id == "P_Combinatorics_1" and first.answer == "239" and first.meta["category"] == "Combinatorics"


def test_every_reference_answer_passes_its_own_checker(tasks: list[Task]) -> None:
    failed = [t.id for t in tasks if check(t, f"Some working.\nAnswer: {t.answer}")[0] != 1.0]
    assert failed == []


def test_no_problem_accepts_a_wrong_or_empty_answer(tasks: list[Task]) -> None:
    for reply in ("Answer: 123456789", "Answer: I do not know", ""):
        assert [t.id for t in tasks if check(t, reply)[0] != 0.0] == [], reply


def by_id(tasks: list[Task], task_id: str) -> Task:
    return next(t for t in tasks if t.id == task_id)


@pytest.mark.parametrize(
    ("task_id", "reply", "reward"),
    [
        ("P_Combinatorics_1", "So we get \\boxed{239}.", 1.0),
        ("P_Combinatorics_1", "Answer: 240", 0.0),
        ("P_Combinatorics_2", "Answer: \\binom{10}{5}", 1.0),
        ("P_Combinatorics_37", "Answer: n(n+1)(2n+1)/6", 1.0),
        ("P_Combinatorics_37", "Answer: n(n+1)/2", 0.0),
        ("P_Inequality_6", "Answer: No, A is smaller.", 1.0),
        ("P_Inequality_6", "Answer: Yes", 0.0),
        ("P_Inequality_6", "Answer: yes or no", 0.0),
        ("P_Number-Theory_3", "Answer: 625 and 376", 1.0),
        ("P_Number-Theory_3", "Answer: 376", 0.0),
        ("P_Number-Theory_7", "Answer: there are no integer solutions.", 1.0),
        ("P_Number-Theory_7", "Answer: two integer solutions", 0.0),
        ("P_Polynomial_8", "Answer: there are no real-valued zeros", 1.0),  # the worded aside of "0 (i.e., ...)"
        ("P_Inequality_15", "Answer: 0 or 1", 0.0),  # naming the answer among others is not answering
    ],
)
def test_checker_verdicts(tasks: list[Task], task_id: str, reply: str, reward: float) -> None:
    assert check(by_id(tasks, task_id), reply)[0] == reward


def test_feedback_gives_hints_not_answers(tasks: list[Task]) -> None:
    env = TaskEnv(tasks)
    env.reset("P_Combinatorics_1")
    obs = env.step("Answer: 240")
    assert obs.reward == 0.0 and obs.text.startswith("Wrong. Hint: (1) Let x_n, y_n, z_n")
    assert "239" not in obs.text and "expected" not in obs.info
    env.reset("P_Combinatorics_1")
    assert "No final answer found" in env.step("").text
    revealed = champ_tasks(limit=1, feedback="reveal")[0]
    assert "The expected answer is: 239." in check(revealed, "Answer: 240")[1]


def test_choosing_problems(tasks: list[Task]) -> None:
    assert [t.id for t in champ_tasks(limit=2)] == ["P_Combinatorics_1", "P_Combinatorics_2"]
    with pytest.raises(ConfigError, match="limit"):
        champ_tasks(limit=-3)
    with pytest.raises(ConfigError, match="feedback"):
        champ_tasks(feedback="shout")


def test_without_champ_dataset_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from evolve.envs import champ as champ_env

    monkeypatch.setitem(sys.modules, "champ_dataset", None)
    champ_env._problems.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"\.\[bench\]"):
            champ_tasks(limit=1)
    finally:
        champ_env._problems.cache_clear()
