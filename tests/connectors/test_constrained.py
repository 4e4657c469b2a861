"""Structured output by construction (``connectors.constrained``, ``connectors.call_grammar``): a tiny random
model that writes garbage on its own writes JSON of the schema, and calls of the tools' types, under the grammar."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from connectors import ConfigError, Message, Tool
from connectors.call_grammar import call_grammar
from connectors.constrained import Opened, calls_constraint, compiled, grammar_tokenizer, response_constraint
from connectors.local_chat import LocalChat
from connectors.tools import parse_tool_calls
from tests.connectors.conftest import CHAT_TEMPLATE, CORPUS, build_tiny_llama

pytest.importorskip("llguidance")

CARD = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "color": {"enum": ["red", "green"]},
    },
    "required": ["ok", "n", "color"],
    "additionalProperties": False,
}  # every value bounded: a random model must close it within a few dozen tokens
FORMAT = {"type": "json_schema", "json_schema": {"name": "card", "schema": CARD}}
LIGHT = Tool(
    "set_light",
    "Switch a room's light.",
    {
        "type": "object",
        "properties": {"room": {"enum": ["hall", "kitchen"]}, "on": {"type": "boolean"}, "level": {"type": "integer"}},
        "required": ["room", "on"],
    },
)
ASK = [Message("user", "open the door")]


def byte_tokenizer() -> Any:
    """A byte-level BPE tokenizer that can write any text (every byte is a token), trained in code."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(CORPUS + [CHAT_TEMPLATE, json.dumps(CARD)], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<|im_start|>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-bytes")
    tokenizer = byte_tokenizer()
    build_tiny_llama(tokenizer, seed=3).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def chat(model_dir: Path) -> LocalChat:
    return LocalChat(str(model_dir), max_new_tokens=80, batch_size=2)


def valid(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), CARD)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_a_random_model_writes_json_of_the_schema_only_under_the_grammar(chat: LocalChat) -> None:
    free = chat.complete_batch([ASK] * 3, temperature=1.0, seed=1)
    assert not any(valid(c.text) for c in free)  # on its own: garbage
    greedy = chat.complete(ASK, response_format=FORMAT)
    sampled = chat.complete_batch([ASK] * 3, temperature=1.0, seed=1, response_format=FORMAT)
    for c in [greedy, *sampled]:
        assert valid(c.text) and c.finish_reason == "stop", c.text
    assert len({c.text for c in sampled}) > 1  # still sampled: the grammar only removes what cannot fit
    assert ", " in greedy.text and "\n" not in greedy.text  # compact JSON: no blank space to spend tokens on


def test_a_required_call_is_a_call_to_one_of_the_tools_with_arguments_of_its_types(
    chat: LocalChat, model_dir: Path
) -> None:
    prompted = LocalChat(str(model_dir), max_new_tokens=80, constrained=False)
    free = prompted.complete(ASK, tools=[LIGHT], tool_choice="required", max_tokens=40)
    assert not free.tool_calls  # unconstrained, the prefill's "[" alone does not make a call
    for seed in (1, 2, 3):
        c = chat.complete(ASK, tools=[LIGHT], tool_choice="required", temperature=1.0, seed=seed, max_tokens=120)
        assert c.tool_calls and not c.tool_problems and c.finish_reason == "tool_calls", c.text
        assert all(call.name == "set_light" and call.arguments["room"] in ("hall", "kitchen") for call in c.tool_calls)


def test_a_stream_under_a_format_sends_what_complete_gives(chat: LocalChat) -> None:
    stream = chat.stream(ASK, response_format=FORMAT, temperature=1.0, seed=4)
    assert "".join(stream) == chat.complete(ASK, response_format=FORMAT, temperature=1.0, seed=4).text
    assert valid(stream.completion.text)


def test_a_prompt_offered_tools_under_auto_and_a_chat_built_unconstrained_are_left_free(model_dir: Path) -> None:
    plain = LocalChat(str(model_dir), max_new_tokens=20, constrained=False)
    assert plain.takes_response_format is False and LocalChat(str(model_dir)).takes_response_format is True
    with pytest.raises(ConfigError, match="constrained=False"):
        plain.complete(ASK, response_format=FORMAT)
    free = plain.complete(ASK, tools=[LIGHT], tool_choice="required")
    assert not free.tool_calls  # prompted only, as before


def fits(model_dir: Path, tools: list[Tool], text: str) -> bool:
    """Whether the call grammar of ``tools`` admits ``text`` whole."""
    import llguidance
    from transformers import AutoTokenizer

    table = grammar_tokenizer(AutoTokenizer.from_pretrained(model_dir))
    matcher = llguidance.LLMatcher(table, compiled(calls_constraint(tools), table))
    return bool(matcher.consume_tokens(table.tokenize_str(text)) and matcher.is_accepting())


@pytest.mark.parametrize(
    ("text", "admitted"),
    [
        ("[set_light(room='hall', on=True)]", True),
        ("[set_light(room=\"kitchen\", on=False, level=3), set_light(room='hall', on=True)]", True),
        ("[set_light(on=True)]", False),  # a required argument missing
        ("[set_light(room='attic', on=True)]", False),  # not in the enum
        ("[set_light(room='hall', on='yes')]", False),  # not a boolean
        ("[set_light(room='hall', on=True, colour='red')]", False),  # an argument the tool lacks
        ("[open_door(door='front')]", False),  # not a tool
        ("The light is on.", False),
    ],
)
def test_the_call_grammar_admits_exactly_the_calls_of_the_tools_types(
    model_dir: Path, text: str, admitted: bool
) -> None:
    assert fits(model_dir, [LIGHT], text) is admitted
    if admitted:  # and the prompted parser reads it
        assert parse_tool_calls(text, [LIGHT]).calls and not parse_tool_calls(text, [LIGHT]).problems


def test_the_call_grammar_writes_python_literals_of_every_schema_shape(model_dir: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "where": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
            "mode": {"const": "fast"},
            "maybe": {"type": ["integer", "null"]},
            "either": {"anyOf": [{"type": "boolean"}, {"enum": [1, 2]}]},
            "free": {},
        },
        "required": ["tags"],
    }
    plot = [Tool("plot", "", schema)]
    good = "[plot(tags=['a', \"b\"], where={'x': 1.5}, mode='fast', maybe=None, either=2, free=[1, {'k': None}])]"
    assert fits(model_dir, plot, good) and parse_tool_calls(good, plot).calls
    assert fits(model_dir, plot, "[plot(tags=['a'], maybe=4, either=True)]")
    for bad in ("[plot(tags=[])]", "[plot(tags=['a'], where={'y': 1})]", "[plot(tags=['a'], mode='slow')]",
                "[plot(tags=['a'], maybe=1.5)]", "[plot(tags=['a'], either=3)]"):  # fmt: skip
        assert not fits(model_dir, plot, bad), bad
    assert call_grammar(plot, opened=True).startswith('start: call (", " call)* "]"')  # after a prefill's "["


def test_response_formats_and_a_missing_library() -> None:
    assert response_constraint(None) is None and response_constraint({"type": "text"}) is None
    assert json.loads(response_constraint({"type": "json_object"}).grammar) == {"type": "object"}  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="json_object or json_schema"):
        response_constraint({"type": "xml"})
    with pytest.raises(ConfigError, match="at least one tool"):
        calls_constraint([])


def test_without_llguidance_a_constrained_answer_names_the_local_extra(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = LocalChat(str(model_dir), max_new_tokens=4)
    chat.complete(ASK)  # loaded; nothing constrained needs llguidance
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ConfigError, match=r"llguidance.*'local' extra.*pip install -e '\.\[local\]'"):
        chat.complete(ASK, response_format=FORMAT)


LOOSE = {
    "type": "object",
    "properties": {
        "note": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "sizes": {"type": "array", "items": {"type": "object", "properties": {"w": {"type": "number"}}}},
    },
    "required": ["note", "tags"],
}  # nothing bounded: a random model left to itself runs past any budget
LOOSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "loose", "schema": LOOSE}}
NOTE = Tool(
    "write_note", "Write a note.", {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_an_answer_near_the_end_of_its_budget_is_steered_to_a_valid_end_and_says_it_was_cut(
    chat: LocalChat, seed: int
) -> None:
    c = chat.complete(ASK, response_format=LOOSE_FORMAT, temperature=1.0, seed=seed, max_tokens=40)
    jsonschema.validate(json.loads(c.text), LOOSE)  # valid, though the budget ran out before the model ended
    assert c.finish_reason == "length" and c.usage.completion_tokens <= 40
    call = chat.complete(ASK, tools=[NOTE], tool_choice="required", temperature=1.0, seed=seed, max_tokens=30)
    assert [t.name for t in call.tool_calls] == ["write_note"] and isinstance(call.tool_calls[0].arguments["text"], str)


def test_what_an_answer_has_open_is_read_from_its_text() -> None:
    opened = Opened()
    opened.read('{"a": ["x\\"y')  # inside a string with an escaped quote
    assert (opened.quote, opened.stack, opened.closer) == ('"', ["}", "]"], '"')
    opened.read('", 2]')
    assert opened.closer == "}"
    call = Opened()
    call.read("[f(a='x]y')")  # a bracket inside a string is text
    assert call.closer == "]"
