"""BFCL's ``multi_turn_base`` category (200 tasks) as a stateful environment, scored by BFCL's own checker.

Each task is a conversation of user turns over live API instances (a file system, a trading bot, a
travel agency, ...; see ``involved_classes``) loaded from the task's ``initial_config``. ``reset``
shows the first request and builds fresh instances; ``tools()`` gives the episode's functions, each
bound to those instances and recording its call (``cd(folder='document')``) for the current turn. The
model calls tools and ends a turn with a text answer: ``step(answer)`` closes the turn and shows the
next request with a line of the calls so far. After the last turn BFCL's ``multi_turn_checker``
replays the recorded calls against the ground truth: after every turn the state of each instance must
equal the ground truth's, and the ground truth's results must be among the model's. Reward 1.0 or 0.0.

The ground truth of all 200 tasks replayed through ``tools()`` scores 1.0. Through a loop that checks
arguments against the tools' schemas (``evolve.tools.runs.run_call``) 199 do: task 173's ground truth
closes ticket ``'ticket_001'`` (a string id in its data) where BFCL's document types ``ticket_id`` as an
integer, so that call is refused before it runs.

Example:
    >>> env = BfclMultiTurnEnv()
    >>> task = multi_turn_tasks(limit=1)[0]                                   # doctest: +SKIP
    >>> env.reset(task)                                                       # doctest: +SKIP
    "Move 'final_report.pdf' within document directory to 'temp' directory in document. ..."
    >>> cd = next(t for t in env.tools() if t.name == "cd")                   # doctest: +SKIP
    >>> cd.fn(folder="document")                                              # doctest: +SKIP
    '{"current_working_directory": "document"}'
    >>> env.step("Done.").text                                                # doctest: +SKIP
    "Perform a detailed search using grep ...\\nCalls so far: cd(folder='document')"
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from connectors.environment import Observation
from connectors.errors import ConfigError
from connectors.tools import Tool, parse_expression
from evolve.envs.bfcl.data import function_docs, read_rows, tool_of
from evolve.envs.tasks import Task, register_checker

log = logging.getLogger(__name__)

CATEGORY = "multi_turn_base"
CHECKER = "bfcl_multi_turn"
META_FIELDS = ("turns", "initial_config", "involved_classes", "ground_truth")
"""What ``Task.meta`` must hold for ``BfclMultiTurnEnv``; ``excluded_function`` (names) is optional."""
CALLS_LIMIT = 1200
"""The most characters of the "Calls so far" line (older calls are cut first)."""
EXCERPT = 160
"""The most characters of a differing state or a missing result shown in feedback."""

_TURN = re.compile(r"for turn (\d+)")
_CLASS = re.compile(r"Model instance for (\w+) ")


# ---------------------------------------------------------------- tasks
def multi_turn_tasks(*, limit: int | None = None) -> list[Task]:
    """The tasks of ``multi_turn_base`` in BFCL's order (the first ``limit`` of them).

    Example:
        >>> multi_turn_tasks(limit=1)[0].id                                   # doctest: +SKIP
        'multi_turn_base_0'
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"limit must be a non-negative integer or None, got {limit!r}")
    return [task_of(row) for row in read_rows(CATEGORY)[:limit]]


def task_of(row: Mapping[str, Any]) -> Task:
    """One BFCL multi-turn row (with its ``ground_truth``) as a Task; ConfigError names a missing field."""
    where = f"BFCL row {row.get('id')!r}"
    missing = [k for k in ("id", "question", "initial_config", "involved_classes", "ground_truth") if k not in row]
    if missing:
        raise ConfigError(f"{where} is missing {', '.join(missing)}; got keys {sorted(row)}")
    turns = [_turn_text(turn, where) for turn in row["question"]]
    if not turns or len(turns) != len(row["ground_truth"]):
        raise ConfigError(
            f"{where}: expected one ground-truth list per user turn, got {len(turns)} turns and "
            f"{len(row['ground_truth'])} ground-truth lists"
        )
    meta = {
        "turns": turns,
        "initial_config": row["initial_config"],
        "involved_classes": list(row["involved_classes"]),
        "ground_truth": [list(calls) for calls in row["ground_truth"]],
        "excluded_function": list(row.get("excluded_function", [])),
    }
    return Task(id=str(row["id"]), prompt=turns[0], checker=CHECKER, family=CATEGORY, meta=meta)


def _turn_text(turn: Any, where: str) -> str:
    if not isinstance(turn, list) or not all(
        isinstance(m, Mapping) and isinstance(m.get("content"), str) for m in turn
    ):
        raise ConfigError(f"{where}: a turn must be a list of messages with 'content', got {turn!r:.120}")
    text = "\n".join(m["content"] for m in turn if m.get("role", "user") == "user").strip()
    if not text:
        raise ConfigError(f"{where}: a turn holds no user message: {turn!r:.120}")
    return text


def _refuse_single_step(task: Task, answer: str) -> float:
    raise ConfigError(
        f"task {task.id!r} is a BFCL multi-turn task: play it in BfclMultiTurnEnv "
        "(env_factory=BfclMultiTurnEnv, max_turns >= its number of turns), not in TaskEnv"
    )


register_checker(CHECKER, _refuse_single_step, replace=True)


# ---------------------------------------------------------------- BFCL's API classes
def _bfcl() -> Any:
    """BFCL's multi-turn checker module and its class maps, imported on first use."""
    try:
        from bfcl_eval.constants import executable_backend_config as backend
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
    except ImportError as e:
        raise ConfigError(f"BFCL multi-turn tasks need the bfcl-eval package ({e}): see evolve.envs.bfcl.data") from e
    return backend, multi_turn_checker, multi_turn_utils


@functools.cache
def _tools(class_name: str) -> tuple[Tool, ...]:
    """The tools of one API class without functions, from the doc file BFCL maps it to
    (``MULTI_TURN_FUNC_DOC_FILE_MAPPING``); built once, since checking their schemas takes ~7 ms a tool."""
    backend = _bfcl()[0]
    docs = function_docs(backend.MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name].removesuffix(".json"))
    return tuple(tool_of(doc) for doc in docs)


def _with_fn(tool: Tool, fn: Callable[..., Any]) -> Tool:
    """``tool`` running ``fn``: a copy with the field set directly, since ``dataclasses.replace`` would check
    the (already checked) schema again and make every ``reset`` cost 0.2 s."""
    bound = copy.copy(tool)
    object.__setattr__(bound, "fn", fn)
    return bound


def _instance(class_name: str, config: Mapping[str, Any]) -> Any:
    """A fresh instance of one API class loaded with its part of ``initial_config``, as BFCL does it."""
    backend = _bfcl()[0]
    cls = getattr(importlib.import_module(backend.CLASS_FILE_PATH_MAPPING[class_name]), class_name)
    instance = cls()
    if class_name not in backend.STATELESS_CLASSES:
        instance._load_scenario(copy.deepcopy(dict(config.get(class_name, {}))), long_context=False)
    return instance


def _check_meta(task: Task) -> None:
    missing = [k for k in META_FIELDS if k not in task.meta]
    if missing:
        raise ConfigError(
            f"task {task.id!r} is not a BFCL multi-turn task: meta lacks {', '.join(missing)} "
            "(build tasks with multi_turn_tasks or task_of)"
        )
    backend = _bfcl()[0]
    unknown = [c for c in task.meta["involved_classes"] if c not in backend.MULTI_TURN_FUNC_DOC_FILE_MAPPING]
    if unknown:
        known = ", ".join(sorted(backend.MULTI_TURN_FUNC_DOC_FILE_MAPPING))
        raise ConfigError(f"task {task.id!r}: unknown involved classes {unknown}; expected some of {known}")
    if len(task.meta["turns"]) != len(task.meta["ground_truth"]) or not task.meta["turns"]:
        raise ConfigError(f"task {task.id!r}: meta 'turns' and 'ground_truth' must be non-empty and of one length")


# ---------------------------------------------------------------- calls as BFCL writes them
def call_text(name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> str | None:
    """The call in BFCL's string form (``mv(source='a', destination='b')``), or None when it cannot be
    written safely: an argument that is not a plain literal, or a keyword that is not a name. BFCL's
    checker ``eval``s these strings, so nothing else may reach them.

    Example:
        >>> call_text("cd", kwargs={"folder": "document"})
        "cd(folder='document')"
    """
    kwargs = dict(kwargs or {})
    if not all(isinstance(k, str) and k.isidentifier() for k in kwargs):
        return None
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = f"{name}({', '.join(parts)})"
    try:
        node = parse_expression(text)
        if not isinstance(node, ast.Call):
            return None
        values = [ast.literal_eval(a) for a in node.args] + [ast.literal_eval(k.value) for k in node.keywords]
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    return text if values == [*args, *kwargs.values()] else None


def result_text(value: Any) -> str:
    """A call's result as BFCL shows it to a model: a string as it is, a dict as JSON, anything else ``str``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


# ---------------------------------------------------------------- one episode
@dataclass
class _Episode:
    """The live state of one episode: its task, API instances, tools and the calls of each turn."""

    task: Task
    instances: dict[str, Any]
    calls: list[list[str]] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    over: bool = False

    @property
    def turn(self) -> int:
        return len(self.calls) - 1

    def bind(self, name: str, method: Callable[..., Any]) -> Callable[..., str]:
        def call(*args: Any, **kwargs: Any) -> str:
            if self.over:
                return f"Error during execution: the episode of task {self.task.id} is over; nothing was run"
            text = call_text(name, args, kwargs)
            if text is None:
                return f"Error during execution: the arguments of {name} must be plain JSON values given by name"
            self.calls[-1].append(text)
            try:
                return result_text(method(*args, **kwargs))
            except Exception as e:  # noqa: BLE001 - BFCL records a raising call as this text; so do we
                return f"Error during execution: {e}"

        call.__name__ = name
        call.__doc__ = inspect.getdoc(method)
        return call


def _start(task: Task) -> _Episode:
    episode = _Episode(task, {c: _instance(c, task.meta["initial_config"]) for c in task.meta["involved_classes"]})
    episode.calls.append([])
    excluded = set(task.meta.get("excluded_function") or ())
    for class_name in task.meta["involved_classes"]:
        for tool in _tools(class_name):
            if tool.name not in excluded:
                method = getattr(episode.instances[class_name], tool.name)
                episode.tools.append(_with_fn(tool, episode.bind(tool.name, method)))
    return episode


# ---------------------------------------------------------------- the environment
class BfclMultiTurnEnv:
    """An ``Environment`` for BFCL multi-turn tasks: one user turn per step, live tools, BFCL's checker.

    ``reset(task)`` takes a task from ``multi_turn_tasks`` (or a BFCL row with ``ground_truth``),
    builds fresh API instances and returns the first request. ``tools()`` are that episode's functions:
    each runs on the episode's instances, returns the API's reply as text (BFCL's form: its error dict
    as JSON when the API reports one; ``"Error during execution: ..."`` when the call raises, wrong
    arguments included, so a tool never raises) and is recorded for the current turn. ``step(answer)``
    ends the turn; after the last one the reward is 1.0 when BFCL's ``multi_turn_checker`` passes the
    recorded calls, else 0.0, and the feedback names the turn that failed and its expected calls.
    ``Observation.info`` holds ``task_id``, ``category``, ``calls`` (the call strings of each turn so far)
    and, at the end, ``checker``: BFCL's verdict (``valid``, ``error_type``, ``error_message``, the
    ``differences`` or ``missing_items`` as short text, and the failing ``turn`` counted from 0 as BFCL
    counts). One instance plays one episode at a time; envs never share state (each check runs under its own
    model name in BFCL's instance cache, which is emptied afterwards).

    Example:
        >>> env = BfclMultiTurnEnv()
        >>> first = env.reset(multi_turn_tasks(limit=1)[0])                   # doctest: +SKIP
        >>> sorted(t.name for t in env.tools())[:3]                           # doctest: +SKIP
        ['authenticate_twitter', 'cat', 'cd']
    """

    def __init__(self) -> None:
        self._episode: _Episode | None = None

    def reset(self, task: Task | Mapping[str, Any]) -> str:
        """Start an episode on ``task``; returns its first user request."""
        if isinstance(task, Mapping):
            task = task_of(task) if "question" in task else Task.from_dict(task)
        if not isinstance(task, Task):
            raise ConfigError(f"expected a Task from multi_turn_tasks or a BFCL row, got {type(task).__name__}")
        _check_meta(task)
        if self._episode is not None:
            self._episode.over = True
        self._episode = _start(task)
        return task.prompt

    def tools(self) -> list[Tool]:
        """The functions of the episode the last ``reset`` started, bound to its live instances."""
        if self._episode is None:
            raise ConfigError("tools() called before reset(task); call reset(task) first")
        return list(self._episode.tools)

    def step(self, action: str) -> Observation:
        """Close the current turn; the next request, or after the last turn the checked verdict."""
        episode = self._episode
        if episode is None or episode.over:
            raise ConfigError("step() called before reset(task), or after the episode ended; call reset(task) first")
        turns: list[str] = episode.task.meta["turns"]
        info: dict[str, Any] = {"task_id": episode.task.id, "category": CATEGORY, "calls": copy.deepcopy(episode.calls)}
        if len(episode.calls) < len(turns):
            done_so_far = _calls_line([c for turn in episode.calls for c in turn])
            episode.calls.append([])
            return Observation(text=f"{turns[episode.turn]}\n{done_so_far}", reward=0.0, done=False, info=info)
        episode.over = True
        result = check_calls(episode.task, episode.calls)
        info["checker"] = _json_safe(result)
        reward = 1.0 if result["valid"] else 0.0
        return Observation(text=verdict(episode.task, result), reward=reward, done=True, info=info)


def _calls_line(calls: Sequence[str]) -> str:
    if not calls:
        return "Calls so far: none."
    shown = list(calls)
    while len(shown) > 1 and len(", ".join(shown)) > CALLS_LIMIT:
        shown.pop(0)
    cut = len(calls) - len(shown)
    return "Calls so far: " + (f"({cut} earlier calls) … " if cut else "") + ", ".join(shown)


# ---------------------------------------------------------------- the check
def check_calls(task: Task, calls: Sequence[Sequence[str]]) -> dict[str, Any]:
    """BFCL's ``multi_turn_checker`` on the calls of each turn (strings in BFCL's form); its result dict.

    The checker keeps the instances it builds in a module global named after the model and the task; a
    fresh model name per check keeps checks apart, and its instances are dropped afterwards.
    """
    _, checker, utils = _bfcl()
    meta = task.meta
    if len(calls) != len(meta["ground_truth"]):
        raise ConfigError(f"task {task.id!r}: expected calls for {len(meta['ground_truth'])} turns, got {len(calls)}")
    model_name = f"evolve_{uuid.uuid4().hex}"
    entry = {"id": task.id, "initial_config": meta["initial_config"], "involved_classes": meta["involved_classes"]}
    decoded = [[list(turn)] if turn else [] for turn in calls]
    try:
        result: dict[str, Any] = checker.multi_turn_checker(decoded, meta["ground_truth"], entry, CATEGORY, model_name)
    finally:
        cache = vars(utils)  # list() copies the keys at once: other threads' checks add theirs meanwhile
        for name in [n for n in list(cache) if n.startswith(model_name)]:
            cache.pop(name, None)
    return result


def failed_turn(result: Mapping[str, Any]) -> int | None:
    """The 0-based turn at which a checker result failed (None when it passed or does not say)."""
    if result.get("valid", True):
        return None
    if result.get("error_type") == "multi_turn:instance_state_mismatch" and "execution_result" in result:
        return len(result["execution_result"]) - 1
    found = _TURN.search(str(result.get("error_message", "")))
    return int(found.group(1)) if found else None


def verdict(task: Task, result: Mapping[str, Any]) -> str:
    """The feedback for a checker result: passed, or the failing turn, why, and (when the task's feedback
    mode is ``"reveal"``) that turn's expected calls."""
    if result.get("valid"):
        return "Passed: after every turn the state and the results match BFCL's ground truth."
    turn = failed_turn(result)
    reason = _reason(result, turn)
    if task.feedback != "reveal" or turn is None:
        return f"Failed. {reason}."
    expected = ", ".join(task.meta["ground_truth"][turn]) or "none"
    return f"Failed. {reason}; the expected calls were: {expected}"


def _reason(result: Mapping[str, Any], turn: int | None) -> str:
    at = f"At turn {turn + 1}" if turn is not None else "In the check"
    kind = result.get("error_type", "")
    details = result.get("details") or {}
    if kind == "multi_turn:empty_turn_model_response":
        return f"{at} no function was called, but the request needed some"
    if kind == "multi_turn:instance_state_mismatch":
        found = _CLASS.search(str(result.get("error_message", "")))
        where = found.group(1) if found else "an API"
        diffs = [_difference(k, v) for k, v in list(details.get("differences", {}).items())[:3]]
        return f"{at} the state of {where} differs: " + "; ".join(diffs)
    if kind == "multi_turn:execution_response_mismatch":
        missing = [_excerpt(str(m)) for m in details.get("missing_items", [])[:3]]
        return f"{at} your calls' results lack what the expected calls return: " + " | ".join(missing)
    return f"{at}: {result.get('error_message', 'the check failed')}"


def _difference(name: str, values: Mapping[str, Any]) -> str:
    """Where an attribute differs: both sides cut around their first differing character."""
    mine, expected = str(values.get("model")), str(values.get("ground_truth"))
    start = next(
        (i for i, (a, b) in enumerate(zip(mine, expected, strict=False)) if a != b), min(len(mine), len(expected))
    )
    start = max(0, start - EXCERPT // 3)
    return f"{name} is {_excerpt(mine, start)} where {_excerpt(expected, start)} was expected"


def _excerpt(text: str, start: int = 0) -> str:
    piece = text[start : start + EXCERPT]
    return ("…" if start else "") + piece + ("…" if start + EXCERPT < len(text) else "")


def _json_safe(result: Mapping[str, Any]) -> dict[str, Any]:
    """The checker's verdict for ``Observation.info``: its type and message, with differences and
    missing results as short text (the full instance states it carries can be large and unserialisable)."""
    out: dict[str, Any] = {k: result[k] for k in ("valid", "error_type", "error_message") if k in result}
    details = result.get("details") or {}
    if "differences" in details:
        out["differences"] = {
            k: {side: _excerpt(str(v)) for side, v in sides.items()} for k, sides in details["differences"].items()
        }
    if "missing_items" in details:
        out["missing_items"] = [_excerpt(str(m)) for m in details["missing_items"]]
    turn = failed_turn(result)
    if turn is not None:
        out["turn"] = turn
    return out


__all__ = [
    "CATEGORY", "CHECKER", "META_FIELDS", "BfclMultiTurnEnv", "call_text", "check_calls", "failed_turn",
    "multi_turn_tasks", "result_text", "task_of", "verdict",
]  # fmt: skip
