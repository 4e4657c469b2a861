r"""Pure maths-answer matching: find a reply's final answer, read it as an expression, compare values.

Expressions are read by a small recursive-descent parser (never ``eval``): numbers, the variables a
problem names, ``+ - * / ^ !``, implicit products (``2n``, ``n(n+1)``), ``sqrt``, ``C(n, k)`` /
``binom``, ``floor``, ``ceil``, ``pi`` and the LaTeX forms ``\frac{a}{b}``, ``\sqrt{x}``,
``\binom{n}{k}``, ``\cdot``. Two expressions are equivalent when they agree at fixed sample points.

Example:
    >>> want = parse("n(n+1)/2", {"n"})
    >>> equivalent(want, best_expression(final_answer("So... Answer: \\frac{n^2+n}{2}."), {"n"}))
    True
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

Expr = tuple[Any, ...]  # ("num", v) | ("var", name) | ("neg", e) | ("fact", e) | (op, a, b) | ("call", name, args)
Point = dict[str, float]

FUNCTIONS = {"sqrt": 1, "frac": 2, "binom": 2, "C": 2, "floor": 1, "ceil": 1}
MAX_EXPONENT = 5000
MAX_FACTORIAL = 2000
SAMPLE_VALUES = (3, 5, 8, 4, 7, 10, 6, 9, 12, 11, 2, 13)
SAMPLES = 6
"""Formula answers are compared at this many points; variable j of point p takes
``SAMPLE_VALUES[(3p + 5j) % 12]`` (small integers, so factorials and binomials stay defined)."""

_UNICODE = {
    "\u2212": "-",
    "\u00d7": "*",
    "\u00b7": "*",
    "\u22c5": "*",
    "\u00f7": "/",
    "\u221a": " sqrt ",
    "\u03c0": " pi ",
}
_LATEX = [
    (r"\\[dt]?frac", " frac "),
    (r"\\sqrt", " sqrt "),
    (r"\\binom", " binom "),
    (r"\\pi", " pi "),
    (r"\\(?:cdot|times)", "*"),
    (r"\\lfloor", " floor( "),
    (r"\\rfloor", " ) "),
    (r"\\lceil", " ceil( "),
    (r"\\rceil", " ) "),
    (r"\\(?:left|right)|\\[,;! ]|\$", " "),
]
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?|\.\d+)|([A-Za-z]+)|(\*\*|[-+*/^!(){},])|(\S))")
_THOUSANDS = re.compile(r"(?<![\d,(.])\d{1,3}(?:,\d{3})+(?![\d,])")
_BOXED = re.compile(r"\\boxed\s*\{")
_ANSWER = re.compile(r"(?:final answer|answer)\s*(?:is|:|=)\s*", re.IGNORECASE)


# ---------------------------------------------------------------- the final answer
def final_answer(reply: str) -> str:
    r"""The part of a reply that states its answer: the last ``\boxed{...}``, else what follows the last
    "answer:" / "answer is" (to the end of that line), else the last non-empty line."""
    boxes = list(_BOXED.finditer(reply))
    if boxes:
        start = boxes[-1].end()
        depth, end = 1, start
        while end < len(reply) and depth:
            depth += {"{": 1, "}": -1}.get(reply[end], 0)
            end += 1
        return reply[start : end - 1 if depth == 0 else end].strip()
    marks = list(_ANSWER.finditer(reply))
    if marks:
        rest = reply[marks[-1].end() :].strip()
        return rest.splitlines()[0].strip() if rest else ""
    lines = [ln.strip() for ln in reply.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# ---------------------------------------------------------------- tokens and parsing
def tokens(text: str, variables: Collection[str]) -> list[tuple[str, str]]:
    """``(kind, text)`` pairs: kind ``num``, ``var``, ``fn``, ``op``, or ``word`` for anything else."""
    for old, new in _UNICODE.items():
        text = text.replace(old, new)
    for pattern, new in _LATEX:
        text = re.sub(pattern, new, text)
    text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    out: list[tuple[str, str]] = []
    for num, name, op, other in _TOKEN.findall(text):
        if num:
            out.append(("num", num))
        elif name:
            kind = "var" if name in variables else "fn" if name in FUNCTIONS or name == "pi" else "word"
            out.append((kind, name))
        elif op:
            out.append(("op", "^" if op == "**" else op))
        else:
            out.append(("word", other))
    return out


def parse(text: str, variables: Collection[str] = ()) -> Expr | None:
    """The whole of ``text`` as one expression, or ``None`` when it is not one."""
    return _parse_all(tokens(text, variables))


def best_expression(text: str, variables: Collection[str] = ()) -> Expr | None:
    """The longest run of maths in ``text`` that parses (the last of equally long ones), or ``None``.

    Runs are split by words and by commas outside brackets: in "there are 98 values" the run is "98".
    """
    runs: list[list[tuple[str, str]]] = [[]]
    depth = 0
    for kind, tok in tokens(text, variables):
        depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(tok, 0) if kind == "op" else 0
        if kind == "word" or (tok == "," and depth <= 0):
            runs.append([])
            depth = 0
        else:
            runs[-1].append((kind, tok))
    parsed = [(len(run), i, _parse_all(_trim(run))) for i, run in enumerate(runs) if run]
    found = [(n, i, e) for n, i, e in parsed if e is not None]
    return max(found)[2] if found else None


def _trim(run: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A run without the dangling brackets and operators at its ends ("100 (" of "100 (i.e., all")."""
    while run and run[-1][1] in ("(", "{", "+", "-", "*", "/", "^", ","):
        run = run[:-1]
    while run and run[0][1] in (")", "}", "*", "/", "^", ","):
        run = run[1:]
    return run


def _parse_all(toks: Sequence[tuple[str, str]]) -> Expr | None:
    if not toks:
        return None
    parser = _Parser(toks)
    try:
        expr = parser.expr()
    except (ValueError, IndexError):
        return None
    return expr if parser.i == len(toks) else None


class _Parser:
    """expr := term (± term)*; term := unary ((*|/)? unary)*; unary := -unary | power;
    power := postfix (^ unary)?; postfix := atom !*; atom := number | var | pi | fn args | (expr) | {expr}."""

    def __init__(self, toks: Sequence[tuple[str, str]]) -> None:
        self.toks, self.i = toks, 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i] if self.i < len(self.toks) else ("end", "")

    def take(self, tok: str) -> None:
        if self.peek()[1] != tok:
            raise ValueError(f"expected {tok!r}")
        self.i += 1

    def expr(self) -> Expr:
        left = self.term()
        while self.peek()[1] in ("+", "-"):
            op = self.toks[self.i][1]
            self.i += 1
            left = (op, left, self.term())
        return left

    def term(self) -> Expr:
        left = self.unary()
        while True:
            kind, tok = self.peek()
            if tok in ("*", "/"):
                self.i += 1
                left = (tok, left, self.unary())
            elif (kind in ("var", "fn") or tok in ("(", "{")) or (kind == "num" and self.toks[self.i - 1][0] != "num"):
                left = ("*", left, self.power())  # implicit product: 2n, n(n+1), 2sqrt(3); never "376 625"
            else:
                return left

    def unary(self) -> Expr:
        if self.peek()[1] in ("-", "+"):
            sign = self.toks[self.i][1]
            self.i += 1
            inner = self.unary()
            return ("neg", inner) if sign == "-" else inner
        return self.power()

    def power(self) -> Expr:
        base = self.postfix()
        if self.peek()[1] == "^":
            self.i += 1
            return ("^", base, self.unary())
        return base

    def postfix(self) -> Expr:
        node = self.atom()
        while self.peek()[1] == "!":
            self.i += 1
            node = ("fact", node)
        return node

    def atom(self) -> Expr:
        kind, tok = self.peek()
        self.i += 1
        if kind == "num":
            return ("num", float(tok))
        if kind == "var":
            return ("var", tok)
        if tok == "pi":
            return ("num", math.pi)
        if kind == "fn":
            return ("call", tok, self.arguments(FUNCTIONS[tok]))
        if tok in ("(", "{"):
            inner = self.expr()
            self.take(")" if tok == "(" else "}")
            return inner
        raise ValueError(f"unexpected {tok!r}")

    def arguments(self, count: int) -> tuple[Expr, ...]:
        if self.peek()[1] == "(":  # f(a, b)
            self.i += 1
            args = [self.expr()]
            while self.peek()[1] == ",":
                self.i += 1
                args.append(self.expr())
            self.take(")")
        elif self.peek()[1] == "{":  # \frac{a}{b}
            args = [self.atom() for _ in range(count)]
        else:  # sqrt 3, √3
            args = [self.postfix()]
        if len(args) != count:
            raise ValueError(f"expected {count} arguments")
        return tuple(args)


# ---------------------------------------------------------------- values
def evaluate(expr: Expr, point: Point) -> float | None:
    """The value of ``expr`` at ``point``; ``None`` where it is undefined or absurdly large."""
    try:
        value = _value(expr, point)
    except (ValueError, ZeroDivisionError, OverflowError, KeyError):
        return None
    return value if math.isfinite(value) else None


def _value(e: Expr, p: Point) -> float:
    kind = e[0]
    if kind == "num":
        return float(e[1])
    if kind == "var":
        return p[e[1]]
    if kind == "neg":
        return -_value(e[1], p)
    if kind == "fact":
        return float(math.factorial(_integer(_value(e[1], p), MAX_FACTORIAL)))
    if kind == "call":
        return _call(e[1], [_value(a, p) for a in e[2]])
    a, b = _value(e[1], p), _value(e[2], p)
    if kind == "^":
        if abs(b) > MAX_EXPONENT:
            raise OverflowError("exponent too large")
        return float(a**b) if not (a < 0 and b != int(b)) else math.nan
    ops: dict[str, Callable[[float, float], float]] = {
        "+": lambda x, y: x + y,
        "-": lambda x, y: x - y,
        "*": lambda x, y: x * y,
        "/": lambda x, y: x / y,
    }
    return ops[kind](a, b)


def _call(name: str, args: list[float]) -> float:
    if name == "sqrt":
        return math.sqrt(args[0])
    if name == "frac":
        return args[0] / args[1]
    if name in ("binom", "C"):
        return float(math.comb(_integer(args[0], 10**6), _integer(args[1], 10**6)))
    return float(math.floor(args[0]) if name == "floor" else math.ceil(args[0]))


def _integer(x: float, limit: int) -> int:
    if x != int(x) or not 0 <= x <= limit:
        raise ValueError(f"{x} is not a non-negative integer up to {limit}")
    return int(x)


def variables_of(expr: Expr) -> set[str]:
    """The variable names ``expr`` uses."""
    if expr[0] == "var":
        return {expr[1]}
    children = expr[2] if expr[0] == "call" else [c for c in expr[1:] if isinstance(c, tuple)]
    return set().union(*(variables_of(c) for c in children))


def sample_points(names: Collection[str]) -> list[Point]:
    """The fixed points formulas are compared at (one empty point when there are no variables)."""
    ordered = sorted(names)
    if not ordered:
        return [{}]
    n = len(SAMPLE_VALUES)
    return [{v: float(SAMPLE_VALUES[(3 * p + 5 * j) % n]) for j, v in enumerate(ordered)} for p in range(SAMPLES)]


def equivalent(expected: Expr | None, got: Expr | None, *, rel_tol: float = 1e-6) -> bool:
    """Whether ``got`` has ``expected``'s value at every sample point where ``expected`` is defined
    (and at least one is)."""
    if expected is None or got is None:
        return False
    compared = 0
    for point in sample_points(variables_of(expected) | variables_of(got)):
        want = evaluate(expected, point)
        if want is None:
            continue
        value = evaluate(got, point)
        if value is None or not math.isclose(value, want, rel_tol=rel_tol, abs_tol=1e-9):
            return False
        compared += 1
    return compared > 0
