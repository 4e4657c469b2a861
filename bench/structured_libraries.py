"""The grammar libraries ``bench.structured_output`` compares, each as the logits processor of one ``LocalChat``
on SmolLM2: llguidance (``connectors.constrained.GrammarMask``, what the library ships) and xgrammar (a processor
written the same way here), with unconstrained generation of the same prompts as the baseline.

Per library: the one-time view of the tokenizer, the compile time of each schema (median, xgrammar's cache off),
the processor's time per generated token (the matcher reading the last token, filling the next token's mask and
masking the logits), seconds per answer and per generated token, and the share of answers that parse and fit
their schema.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from bench.structured_requests import StructuredRequest
from connectors import Message
from connectors.constrained import Constraint, GrammarMask, compiled, grammar_tokenizer, response_constraint
from connectors.local_chat import LocalChat

LIBRARIES = ("llguidance", "xgrammar")


class XgrammarMask:
    """xgrammar's matchers as a logits processor, one per row, as ``GrammarMask`` does it with llguidance's."""

    def __init__(self, compiler: Any, constraints: Sequence[Constraint | None], prompt_length: int, vocab: int) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        grammars = {c: xgrammar_compile(compiler, c) for c in set(constraints) if c is not None}
        self.matchers = [None if c is None else xgr.GrammarMatcher(grammars[c]) for c in constraints]
        self.done = [False] * len(self.matchers)
        self.closed = [False] * len(self.matchers)  # no steering to the end here: each library as it is
        self.prompt_length = prompt_length
        self.vocab = vocab
        self.bitmask = xgr.allocate_token_bitmask(len(self.matchers), self.vocab)
        self.mask_seconds, self.steps = 0.0, 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        started = time.perf_counter()
        live = []
        for row, m in enumerate(self.matchers):
            if m is None or self.done[row]:
                continue
            if input_ids.shape[1] > self.prompt_length:
                if m.is_terminated() or not m.accept_token(int(input_ids[row, -1])):
                    self.done[row] = True
                    continue
            m.fill_next_token_bitmask(self.bitmask, row)
            live.append(row)
        if live:
            self.xgr.apply_token_bitmask_inplace(scores, self.bitmask, vocab_size=self.vocab, indices=live)
        self.mask_seconds += time.perf_counter() - started  # as GrammarMask counts it: reading, filling, masking
        self.steps += 1
        return scores


def xgrammar_compile(compiler: Any, constraint: Constraint) -> Any:
    """A JSON constraint compiled by xgrammar, laid out as llguidance lays it out (``connectors.constrained.COMPACT``)."""
    return compiler.compile_json_schema(constraint.grammar, any_whitespace=False, separators=(", ", ": "))


class LibraryChat(LocalChat):
    """SmolLM2's ``LocalChat`` with its grammar processor from ``library`` (``unconstrained``: prompted only);
    keeps every processor it made, for their mask times."""

    def __init__(self, library: str, *, max_tokens: int, threads: int) -> None:
        free = library == "unconstrained"
        super().__init__("smollm2", max_new_tokens=max_tokens, threads=threads, constrained=not free)
        self.library = library
        self.masks: list[Any] = []
        self.setup_seconds = 0.0
        self._compiler: Any = None

    def _mask(self, constraints: Sequence[Constraint | None] | None, length: int, prefill: str, budget: int) -> Any:
        """Each library's mask as it is (no steering to the end as the budget runs out: the same for both)."""
        if not constraints or all(c is None for c in constraints):
            return None
        started = time.perf_counter()
        mask: Any
        if self.library == "llguidance":
            if self._grammar_table is None:
                self._grammar_table = grammar_tokenizer(self._tokenizer)
            mask = GrammarMask(self._grammar_table, constraints, length, prefill)
        else:
            if self._compiler is None:
                self._compiler = xgrammar_compiler(self._tokenizer, self._model.config.vocab_size)
            mask = XgrammarMask(self._compiler, constraints, length, self._model.config.vocab_size)
        if not self.masks:
            self.setup_seconds = time.perf_counter() - started  # the tokenizer's view, made on the first call
        self.masks.append(mask)
        return mask


def xgrammar_compiler(tokenizer: Any, vocab_size: int) -> Any:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    return xgr.GrammarCompiler(info, cache_enabled=False)


def library_setup(
    requests: Sequence[StructuredRequest], libraries: Sequence[str], *, max_tokens: int, threads: int
) -> dict[str, Any]:
    """Every library (and the unconstrained baseline) on ``requests`` (JSON of a schema), one answer at a time,
    the decodings in turn on each request (a machine whose load drifts slows them alike)."""
    from evolve.serve import formats

    chats = {name: LibraryChat(name, max_tokens=max_tokens, threads=threads) for name in ("unconstrained", *libraries)}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in chats}
    for i, r in enumerate(tqdm([requests[0], *requests], desc="libraries", unit="request")):  # the first loads
        fmt = formats.response_format(r.response_format)
        assert fmt is not None
        prompt = [Message("user", f"{r.messages[-1].content}\n\n{fmt.instruction()}")]
        for name, chat in chats.items():
            started = time.perf_counter()
            c = chat.complete(prompt, response_format=None if name == "unconstrained" else r.response_format)
            seconds = time.perf_counter() - started
            if i:  # what a served answer must be on its first try
                valid = formats.read_json(c.text, fmt)[1] == ""
                rows[name].append({"seconds": seconds, "tokens": c.usage.completion_tokens, "valid": valid,
                                   "text": c.text[:200]})  # fmt: skip
    answers = {name: library_figures(chats[name], rows[name], requests) for name in chats}
    return {"requests": len(requests), "answers": answers}


def library_figures(
    chat: LibraryChat, rows: Sequence[dict[str, Any]], requests: Sequence[StructuredRequest]
) -> dict[str, Any]:
    """One decoding's figures: valid share, seconds per answer, per token, and the grammar's own costs."""
    seconds = [r["seconds"] for r in rows]
    out: dict[str, Any] = {
        "answers": len(rows),
        "valid_share": round(sum(r["valid"] for r in rows) / len(rows), 4),
        "seconds_p50": round(statistics.median(seconds), 3),
        "tokens_mean": round(statistics.mean(r["tokens"] for r in rows), 1),
        "ms_per_token": round(1000 * sum(seconds) / max(1, sum(r["tokens"] for r in rows)), 2),
        "samples": [r["text"] for r in rows[:3]],
    }
    if chat.library != "unconstrained":
        steps = sum(m.steps for m in chat.masks[1:])
        out["mask_us_per_token"] = round(1e6 * sum(m.mask_seconds for m in chat.masks[1:]) / max(steps, 1), 1)
        out["setup_s"] = round(chat.setup_seconds, 3)
        out["compile_ms_p50"] = compile_ms(chat.library, chat, requests)
    return out


def compile_ms(library: str, chat: LibraryChat, requests: Sequence[StructuredRequest]) -> float:
    """The median milliseconds to compile each distinct schema into a matcher ready for its first mask."""
    constraints = {c for c in (response_constraint(r.response_format) for r in requests) if c is not None}
    times = []
    for c in constraints:
        started = time.perf_counter()
        if library == "llguidance":
            import llguidance

            table = chat._grammar_table if chat._grammar_table is not None else grammar_tokenizer(chat._tokenizer)
            llguidance.LLMatcher(table, compiled(c, table))
        else:
            import xgrammar as xgr

            xgr.GrammarMatcher(xgrammar_compile(chat._compiler, c))
        times.append(time.perf_counter() - started)
    return round(1000 * statistics.median(times), 3)


def library_table(block: dict[str, Any]) -> list[str]:
    """The markdown table of the libraries' figures."""
    lines = [
        "| decoding | answers | valid | s per answer (p50) | tokens | ms per token | compile ms (p50) "
        "| mask µs per token | tokenizer setup s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in block["answers"].items():
        lines.append(f"| {name} | {f['answers']} | {f['valid_share']:.0%} | {f['seconds_p50']} | {f['tokens_mean']} | "
                     f"{f['ms_per_token']} | "
                     f"{f.get('compile_ms_p50', '–')} | {f.get('mask_us_per_token', '–')} | {f.get('setup_s', '–')} |")  # fmt: skip
    return lines


__all__ = ["LIBRARIES", "LibraryChat", "XgrammarMask", "library_setup", "library_table"]
