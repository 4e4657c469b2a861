"""Structured output valid by construction on a local model: the answer is generated under a grammar,
so JSON parses and fits its schema, and a required call names a tool with arguments of the right types.

A ``Constraint`` says what an answer must be:

- ``response_constraint(response_format)``: OpenAI's ``json_schema`` (JSON valid against the schema) or
  ``json_object`` (any JSON object); ``text`` or None asks for nothing;
- ``calls_constraint(tools)``: one or more calls to ``tools`` in the Python syntax the prompted parser
  reads (``connectors.call_grammar``), as ``tool_choice="required"`` (or a named function) demands.

``GrammarMask`` is the transformers logits processor that applies one constraint per row of a batch:
at every step each row's matcher reads the token just chosen and leaves only the tokens that can continue
a valid answer (or end a complete one). The grammars are compiled and matched by llguidance — the
library vLLM also uses; it has no dependencies of its own (xgrammar, measured alongside it in
``bench.structured_output``, brings triton and tvm-ffi) and compiles a schema in about a millisecond.
JSON is written compactly (``", "`` and ``": "``, no other whitespace), so a small model cannot spend its
tokens on blank space.

llguidance is part of the ``local`` extra; it is imported when a constraint is first compiled, never
when ``connectors`` is imported.

Example:
    >>> fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": {"type": "object"}}}
    >>> response_constraint(fmt).kind, response_constraint({"type": "text"})
    ('json_schema', None)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.call_grammar import call_grammar
from connectors.errors import ConfigError
from connectors.install import extra_hint
from connectors.tools import Tool

COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}
"""How constrained JSON is laid out: one space after ``,`` and ``:``, none elsewhere. ``lenient``: a keyword
llguidance does not implement is left to the check every served answer gets (``evolve.serve.formats``)."""


CLOSERS = frozenset("\"']})")
"""The characters that end what a grammar has open: a string (either quote), a list, an object, a call."""
OPENERS = frozenset("[{(")
"""The characters that open something more to close."""
CLOSING = 16
"""Tokens left in an answer's budget at which a constrained answer is steered to its end (``GrammarMask``): late
enough to leave a call or an object that would end on its own alone, early enough to close what a small model
leaves open (9 of 9 looping SmolLM2 answers at 16 and at 32; at 10, a byte-level tokenizer's could not)."""
STEER = 1e4
"""How hard the last ``CLOSING`` tokens are steered (``Steering``): far beyond any logit, so an allowed closing
token is always taken, and among the others the one that opens least."""


@dataclass(frozen=True)
class Constraint:
    """What an answer must be: ``kind`` (``json_schema``, ``json_object`` or ``calls``) and its grammar in
    llguidance's form (a JSON schema, or a Lark grammar for calls)."""

    kind: str
    grammar: str


def response_constraint(response_format: Mapping[str, Any] | None) -> Constraint | None:
    """The constraint of an OpenAI ``response_format`` (None for text or none).

    Raises:
        ConfigError: a type other than text, json_object and json_schema, or a json_schema without a schema object.
    """
    kind = None if response_format is None else response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return Constraint("json_object", json.dumps({"type": "object"}))
    spec = response_format.get("json_schema") if response_format is not None else None
    if kind != "json_schema" or not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
        raise ConfigError(
            f"response_format must be text, json_object or json_schema with {{'schema': {{...}}}}, got {response_format!r:.120}"
        )
    return Constraint("json_schema", json.dumps(dict(spec.get("schema") or {}), ensure_ascii=False))


def calls_constraint(tools: Sequence[Tool]) -> Constraint:
    """The constraint of a required call: one or more calls to ``tools`` (one tool: a named ``tool_choice``)."""
    if not tools:
        raise ConfigError("a required call needs at least one tool")
    return Constraint("calls", call_grammar(tools))


def row_constraints(
    fmt: Constraint | None, offered: Sequence[Sequence[Tool]], *, required: bool
) -> list[Constraint | None]:
    """Each prompt's constraint, from the tools it is offered (``connectors.prompted_tools.prompted_batch``):
    a call to one of them when a call is ``required``; none when it may call one or answer in text
    (``tool_choice="auto"``); else ``fmt``, the response format's (None for text)."""
    return [calls_constraint(t) if t and required else None if t else fmt for t in offered]


def require_llguidance() -> Any:
    """The llguidance module, or a ``ConfigError`` naming the ``local`` extra that installs it."""
    try:
        import llguidance
    except ImportError as e:
        raise ConfigError(
            f"structured output on a local model needs llguidance, part of the 'local' extra: {extra_hint('local')}"
        ) from e
    return llguidance


def grammar_tokenizer(tokenizer: Any) -> Any:
    """llguidance's view of a Hugging Face fast tokenizer (about 0.4 s for SmolLM2's 49k tokens: make it once)."""
    require_llguidance()
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer)


@dataclass(frozen=True)
class Steering:
    """What ``GrammarMask`` needs to steer an answer to its end: each token's text (``pieces``), per closing
    character the tokens that start with it and hold only ``CLOSERS`` (``"``, ``"}``, ``]}``, ``')]``...), and
    how many ``OPENERS`` each token has (``": [{"`` opens two)."""

    pieces: tuple[str, ...]
    closing: Mapping[str, Any]
    opens: Any

    @classmethod
    def of(cls, tokenizer: Any) -> Steering:
        """The steering of a Hugging Face tokenizer (byte-level pieces: ASCII punctuation is itself)."""
        import numpy as np

        pieces = tuple(p or "" for p in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
        closes = np.array([bool(p) and set(p) <= CLOSERS for p in pieces])
        starts = np.array([p[:1] for p in pieces])
        closing = {c: closes & (starts == c) for c in CLOSERS}
        opens = np.array([sum(ch in OPENERS for ch in p) for p in pieces], dtype=np.float32)
        return cls(pieces, closing, opens)

    def bonus(self, closer: str | None) -> Any:
        """Per token, what steering adds (times ``STEER``): +1 for a token that closes ``closer`` (the
        innermost thing open), minus the number of things each token opens."""
        return (self.closing[closer] if closer else 0) - self.opens


class Opened:
    """What an answer has open, read from its text as it comes: the quote it is inside (``"`` or ``'``), and
    the brackets open outside strings; ``closer`` is the character that closes the innermost."""

    PAIRS = {"[": "]", "{": "}", "(": ")"}

    def __init__(self) -> None:
        self.quote: str | None = None
        self.escaped = False
        self.stack: list[str] = []

    def read(self, text: str) -> None:
        for ch in text:
            if self.quote is not None:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == self.quote:
                    self.quote = None
            elif ch in "\"'":
                self.quote = ch
            elif ch in self.PAIRS:
                self.stack.append(self.PAIRS[ch])
            elif ch in "]})" and self.stack:
                self.stack.pop()

    @property
    def closer(self) -> str | None:
        return self.quote if self.quote is not None else (self.stack[-1] if self.stack else None)


def compiled(constraint: Constraint, table: Any) -> str:
    """``constraint``'s grammar checked against ``table`` (``grammar_tokenizer``), in llguidance's form.

    Raises:
        ConfigError: a schema or tool llguidance cannot turn into a grammar, with its reason.
    """
    llguidance = require_llguidance()
    matcher = llguidance.LLMatcher
    if constraint.kind == "calls":
        grammar = matcher.grammar_from_lark(constraint.grammar)
    else:
        grammar = matcher.grammar_from_json_schema(constraint.grammar, overrides=COMPACT)
    error = matcher.validate_grammar(grammar, table)
    if error:
        raise ConfigError(f"the {constraint.kind} constraint cannot be compiled to a grammar: {error[:400]}")
    return grammar


class GrammarMask:
    """A logits processor that keeps each row of a batch on its grammar (rows without one are left alone).

    Args:
        table: ``grammar_tokenizer(tokenizer)``.
        constraints: one per row of the batch ``generate`` runs (None: that row is free).
        prompt_length: the prompt's length in tokens (what comes after it was generated).
        prefill: text the answers start with, in the prompt (``connectors.prompted_tools.PREFILL``): each
            grammar reads it first.
        budget: the most tokens an answer may have (``max_new_tokens``); with ``steer`` (``Steering``), an
            answer not complete ``CLOSING`` tokens before the end (at most half the budget) is steered to it:
            wherever its grammar allows a token that closes the innermost thing open (``Opened``: a string, a
            list, an object, a call) one is taken, else the allowed token that opens least, so it ends valid
            instead of being cut midway — a small model looping inside a string is the usual case. Such rows are in ``closed`` (cut short:
            ``finish_reason`` ``length``).

    Once an answer is complete only its end can follow; after it ends (transformers pads a finished row, a
    stop string cuts one) the row is left alone.
    """

    def __init__(
        self,
        table: Any,
        constraints: Sequence[Constraint | None],
        prompt_length: int,
        prefill: str = "",
        *,
        budget: int | None = None,
        steer: Any = None,
    ) -> None:
        llguidance = require_llguidance()
        grammars = {c: compiled(c, table) for c in set(constraints) if c is not None}
        self.matchers = [None if c is None else llguidance.LLMatcher(table, grammars[c]) for c in constraints]
        start = table.tokenize_str(prefill) if prefill else []
        for m in self.matchers:
            if m is not None and start and not m.consume_tokens(start):
                raise ConfigError(f"the answer's start {prefill!r} does not fit its grammar: {m.get_error()[:200]}")
        self.done = [False] * len(self.matchers)
        self.closed = [False] * len(self.matchers)
        self.budget, self.steer = budget, steer
        self.opened = [Opened() for _ in self.matchers]
        for o in self.opened:
            o.read(prefill)
        self.prompt_length = prompt_length
        self.vocab = table.vocab_size
        self.mask_seconds, self.steps = 0.0, 0  # time spent masking, over steps (bench.structured_output reads them)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import time

        started = time.perf_counter()
        try:
            return self._masked(input_ids, scores)
        finally:
            self.mask_seconds += time.perf_counter() - started
            self.steps += 1

    def _masked(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np

        bits = np.full((len(self.matchers), (self.vocab + 31) // 32), -1, dtype=np.int32)
        live = []
        for row, m in enumerate(self.matchers):
            if m is None or self.done[row]:
                continue
            if input_ids.shape[1] > self.prompt_length:  # the token chosen last step: the grammar reads it
                token = int(input_ids[row, -1])
                if m.is_stopped() or not m.consume_token(token):
                    self.done[row] = True  # it ended the answer (the padding after an end, or a stop string's cut)
                    continue
                if self.steer is not None and token < len(self.steer.pieces):
                    self.opened[row].read(self.steer.pieces[token])
            m.unsafe_compute_mask_ptr(bits[row].ctypes.data, bits[row].nbytes)  # once complete: only the end
            live.append(row)
        if not live:
            return scores
        out = masked(scores, bits, live)
        if self.budget is None or self.steer is None:
            return out
        left = self.budget - (input_ids.shape[1] - self.prompt_length)
        closing = [r for r in live if not self.matchers[r].is_accepting()] if left <= min(CLOSING, self.budget // 2) else []  # type: ignore[union-attr]  # fmt: skip
        for row in closing:
            self.closed[row] = True
        return steered(out, {r: self.steer.bonus(self.opened[r].closer) for r in closing}) if closing else out


def steered(scores: Any, bonuses: Mapping[int, Any]) -> Any:
    """``scores`` with ``STEER`` times each row's bonus (one value per token) added; a masked token stays ``-inf``."""
    import torch

    out = scores.clone()
    for row, bonus in bonuses.items():
        width = min(len(bonus), scores.shape[1])
        out[row, :width] += torch.from_numpy((bonus[:width] * STEER).astype("float32")).to(scores.dtype)
    return out


def masked(scores: Any, bits: Any, rows: Sequence[int]) -> Any:
    """A copy of ``scores`` with ``-inf`` for every token whose bit is 0 in its row of ``bits`` (32 tokens to an
    int32, lowest bit first), in ``rows`` only; tokens past the bitmask's end are masked too.

    On the CPU the copy is masked by NumPy, on one thread: torch's small operations wait on its thread pool,
    which on a busy machine (two cores, two CPU-bound jobs beside) took 10-60 ms each, 64 ms per token in all;
    through NumPy the whole step, matcher included, took 0.13 ms."""
    import numpy as np
    import torch

    picked = list(rows)
    width = scores.shape[1]
    allowed = np.unpackbits(bits[picked].view(np.uint8), axis=1, bitorder="little")[:, :width].astype(bool)
    keep = np.zeros((len(picked), width), dtype=bool)
    keep[:, : allowed.shape[1]] = allowed
    if scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64):
        out = scores.detach().numpy().copy()  # a copy: transformers keeps the raw logits it passed in
        out[picked] = np.where(keep, out[picked], -np.inf)
        return torch.from_numpy(out)
    out = scores.clone()
    out[picked] = scores[picked].masked_fill(~torch.from_numpy(keep).to(scores.device), float("-inf"))
    return out


__all__ = [
    "CLOSERS", "CLOSING", "COMPACT", "Constraint", "GrammarMask", "OPENERS", "calls_constraint", "compiled",
    "Opened", "Steering", "grammar_tokenizer", "masked", "require_llguidance", "response_constraint", "row_constraints",
    "steered",
]  # fmt: skip
