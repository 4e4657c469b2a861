"""TextWorld games as multi-turn tasks: generated locally with ``tw-make`` at fixed seeds, played turn by turn.

``textworld_tasks`` makes one small game per seed (cached, so a second call is instant) and returns a
``Task`` per game whose prompt is the game's goal. ``TextWorldEnv`` plays it: each observation lists
the goal, what happened, the score and the admissible commands; a reply that contains or closely
matches one of them is played, anything else is refused with feedback that says so. The reward is the
score so far over the game's maximum (1.0 when the quest is won).

Example:
    >>> tasks = textworld_tasks(Path("games"), seeds=[0, 1])            # doctest: +SKIP
    >>> ev = Evolver(team, tasks, memory=store, env_factory=lambda: TextWorldEnv(), max_turns=8)  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from connectors.environment import Observation
from connectors.errors import ConfigError
from connectors.install import extra_hint
from evolve.envs.tasks import Task, register_checker
from evolve.envs.textmatch import strip_code_fences

log = logging.getLogger(__name__)

INSTALL_HINT = extra_hint("bench")
DEFAULT_GAME = {"world_size": 2, "nb_objects": 4, "quest_min_length": 1, "quest_max_length": 3}
"""Small games: two rooms, a few objects, a quest of 1-3 actions (tw-make's ``custom`` challenge)."""

CHOOSE = "Choose the next command from this list:"
ANSWER_WITH = "Answer with the command only."
# One command a line with a closing instruction: SmolLM2-135M then answers with a listed command for
# 4 of 4 fresh games, against 0 of 4 with the commands on one "a | b | c" line (bench/learning's model).

FUZZY_CUTOFF = 0.75
"""How close (difflib ratio) a reply must be to an admissible command when it contains none."""

# Sentences of the quest grammar that carry no instruction ("Welcome to TextWorld!", "Got that? Good!").
_STOCK = re.compile(
    r"textworld|^here is (your task|how to play)|^got that|^good!?$|^once that's all handled|"
    r"^and if you do that|^and once you've done that|you('re| are) the winner|^you win|^alright, thanks",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


# ---------------------------------------------------------------- games and tasks
def textworld_tasks(
    folder: str | Path, *, seeds: Sequence[int], challenge: str = "custom", workers: int = 2, **game_options: Any
) -> list[Task]:
    """One ``Task`` per seed, each a game made by ``tw-make`` (cached in ``folder`` by options and seed).

    Args:
        folder: where the games are kept; a game already there with the same options is reused.
        seeds: one game per seed; the same seed and options always give the same game.
        challenge: tw-make's game type (``custom``, ``tw-simple``, ``tw-coin_collector``, ...).
        workers: games generated at once (each takes 2-4 s of one core).
        **game_options: tw-make options as keywords (``world_size=3`` → ``--world-size 3``; ``True``
            → a bare flag), over ``DEFAULT_GAME`` for the ``custom`` challenge.

    Returns:
        Tasks with id ``tw-<seed>``, prompt = the game's goal, ``meta["game_file"]`` (the ``.z8``),
        ``meta["walkthrough"]`` (a winning command list), ``meta["max_score"]`` and ``meta["seed"]``.

    Raises:
        ConfigError: textworld is not installed, or tw-make refused the options (its message included).
    """
    seeds = [_seed(s) for s in seeds]
    if not seeds:
        raise ConfigError("textworld_tasks needs at least one seed, got none")
    options = {**(DEFAULT_GAME if challenge == "custom" else {}), **game_options}
    script = tw_make_script()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"tw-{challenge}-{_options_key(challenge, options)}"
    games = {s: folder / f"{stem}-seed{s}.z8" for s in seeds}
    todo = [s for s in dict.fromkeys(seeds) if not (games[s].exists() and games[s].with_suffix(".json").exists())]
    if todo:
        log.info("generating %d TextWorld game(s) in %s", len(todo), folder)
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
            list(pool.map(lambda s: _make_game(script, challenge, options, s, games[s]), todo))
    return [_task(games[s], s, challenge, options) for s in seeds]


def tw_make_script() -> Path:
    """The ``tw-make`` script of this interpreter's environment (found next to ``sys.executable``, not on PATH)."""
    try:
        importlib.metadata.version("textworld")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"TextWorld games need the textworld package: {INSTALL_HINT}") from None
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        if (folder / "tw-make").is_file():
            return folder / "tw-make"
    raise ConfigError(
        f"textworld is installed but its tw-make script is not next to {sys.executable}; reinstall: {INSTALL_HINT}"
    )


def _seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"TextWorld seeds must be non-negative integers, got {seed!r}")
    return int(seed)


def _options_key(challenge: str, options: Mapping[str, Any]) -> str:
    """A short digest of everything that shapes a game, so other options never reuse a cached one."""
    blob = json.dumps([challenge, sorted(options.items()), importlib.metadata.version("textworld")], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def _cli_options(options: Mapping[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in sorted(options.items()):
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False and value is not None:
            args += [flag, str(value)]
    return args


def _make_game(script: Path, challenge: str, options: Mapping[str, Any], seed: int, target: Path) -> None:
    """Run tw-make into a temporary name, then move the game into place (``.json`` first, ``.z8`` last)."""
    tmp = target.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{target.name}")
    cmd = [sys.executable, str(script), challenge, *_cli_options(options), "--seed", str(seed)]
    cmd += ["--output", str(tmp), "-f", "--silent"]
    try:
        env = {**os.environ, **_space_free_textworld()}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
        if done.returncode != 0 or not tmp.exists():
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
            raise ConfigError(f"tw-make {challenge} {' '.join(_cli_options(options))} --seed {seed} failed:\n{tail}")
        os.replace(tmp.with_suffix(".json"), target.with_suffix(".json"))
        os.replace(tmp, target)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"tw-make took over 300 s for seed {seed}; try smaller game options") from None
    finally:
        for leftover in tmp.parent.glob(tmp.stem + ".*"):
            leftover.unlink(missing_ok=True)


def _space_free_textworld() -> dict[str, str]:
    """The environment tw-make needs when textworld is installed under a path with whitespace: TextWorld's
    Inform 7 compiler cannot open its own library there ("can't open input file <Main.i6t>"), so the package is
    imported through a link to its folder in the temp directory (``PYTHONPATH``); empty when no link is needed."""
    site = Path(importlib.util.find_spec("textworld").origin).parent.parent  # type: ignore[union-attr, arg-type]
    if not any(c.isspace() for c in str(site)):
        return {}
    link = Path(tempfile.gettempdir()) / f"evolve-textworld-{hashlib.sha256(str(site).encode()).hexdigest()[:10]}"
    if any(c.isspace() for c in str(link)):
        raise ConfigError(
            f"TextWorld's Inform 7 compiler cannot work from a path with spaces: textworld is in {site} and the "
            f"temp folder {link.parent} has spaces too; install into a virtualenv whose path has none, or set TMPDIR"
        )
    if not (link.is_symlink() and link.resolve() == site.resolve()):
        fresh = link.with_name(f"{link.name}.{uuid.uuid4().hex[:8]}")
        fresh.symlink_to(site, target_is_directory=True)
        os.replace(fresh, link)  # atomic: games made at once all see a whole link
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(link), os.environ.get("PYTHONPATH", "")]))}


def _task(game: Path, seed: int, challenge: str, options: Mapping[str, Any]) -> Task:
    data = json.loads(game.with_suffix(".json").read_text(encoding="utf-8"))
    objective = str(data.get("objective") or "")
    max_score = sum(int(q.get("reward", 1)) for q in data.get("quests", [])) or 1
    return Task(
        id=f"tw-{seed}",
        prompt=short_goal(objective) or f"Win the TextWorld game of seed {seed}.",
        checker="textworld",
        family="textworld",
        feedback="none",
        meta={
            "game_file": str(game),
            "seed": seed,
            "challenge": challenge,
            "options": dict(options),
            "objective": objective,
            "walkthrough": list(data.get("metadata", {}).get("walkthrough", [])),
            "max_score": max_score,
        },
    )


def _refuse_single_step(task: Task, answer: str) -> float:
    raise ConfigError(
        f"task {task.id!r} is a TextWorld game: play it in TextWorldEnv "
        "(Evolver(..., env_factory=lambda: TextWorldEnv(), max_turns=N)), not in TaskEnv"
    )


register_checker("textworld", _refuse_single_step, replace=True)


# ---------------------------------------------------------------- pure text helpers
def short_goal(objective: str) -> str:
    """The objective without the quest grammar's greetings and sign-offs (what the memory is keyed on)."""
    sentences = [s.strip() for s in _SENTENCE.split(" ".join(objective.split())) if s.strip()]
    return " ".join(s for s in sentences if not _STOCK.search(s))


def clean_feedback(text: str) -> str:
    """The game's reply without the command prompt, the status line and the end-of-game menu."""
    text = text.split("*** The End ***")[0]
    kept = []
    for line in text.splitlines():
        if line.lstrip().startswith(">"):
            break
        kept.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def match_command(reply: str, commands: Sequence[str], *, cutoff: float = FUZZY_CUTOFF) -> str | None:
    """The admissible command a reply means, or ``None``.

    In order: the reply's first line is a command (ignoring case, quotes, a leading ``>``,
    ``-`` or ``command:``); else the command found earliest in the reply as whole words (the longest on a
    tie); else the command closest to the first line when its difflib ratio reaches ``cutoff``.

    Example:
        >>> match_command("I will go east now.", ["go east", "look"])
        'go east'
    """
    if not commands:
        return None
    body = strip_code_fences(reply).casefold()
    text = " ".join(body.split())
    lines = [ln for ln in body.splitlines() if ln.strip()]
    first = _bare(lines[0]) if lines else ""
    by_text = {" ".join(c.casefold().split()): c for c in commands}
    if first in by_text:
        return by_text[first]
    hits = []
    for key, command in by_text.items():
        found = re.search(r"(?<![\w-])" + re.escape(key) + r"(?![\w-])", text)
        if found:
            hits.append((found.start(), -len(key), command))
    if hits:
        return min(hits)[2]
    close = difflib.get_close_matches(first, list(by_text), n=1, cutoff=cutoff)
    return by_text[close[0]] if close else None


def _bare(line: str) -> str:
    line = re.sub(r"^\s*(?:>|[-*\u2022]|(?:command|action)\s*:)\s*", "", line)
    return " ".join(line.split()).strip(".!\"'`*")


# ---------------------------------------------------------------- the environment
class TextWorldEnv:
    """An ``Environment`` that plays one TextWorld game per episode, a command per step.

    ``reset(task)`` takes a task from ``textworld_tasks`` (or a dict with ``meta.game_file``, or the
    path of a ``.z8`` game) and returns the goal, the room, the inventory and the admissible
    commands. ``step(reply)`` plays the command the reply contains or closely matches (see
    ``match_command``); a reply that names none is refused, costs a step and says so. The reward is
    the score so far over the maximum; the episode ends when the game is won or lost, or after
    ``max_steps`` steps. One instance plays one game at a time (the ``Evolver`` makes one per episode).

    Example:
        >>> env = TextWorldEnv(max_steps=10)                      # doctest: +SKIP
        >>> print(env.reset(tasks[0]))                            # doctest: +SKIP
        Goal: First of all, try to go south. Then, close the bureau.
        ...
        >>> env.step("go south").reward                           # doctest: +SKIP
        0.0
    """

    def __init__(self, *, max_steps: int = 20, cutoff: float = FUZZY_CUTOFF) -> None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigError(f"TextWorldEnv max_steps must be a positive integer, got {max_steps!r}")
        self.max_steps = max_steps
        self.cutoff = cutoff
        self._game: Any = None
        self._task_id = ""
        self._goal = ""
        self._commands: list[str] = []
        self._history: list[str] = []
        self._score, self._max_score, self._steps = 0, 1, 0

    def reset(self, task: Task | Mapping[str, Any] | str | Path) -> str:
        """Start the game of ``task``; returns the first observation."""
        game_file, self._task_id, goal = _game_of(task)
        self.close()
        textworld = _import_textworld()
        wanted = ("admissible_commands", "description", "inventory", "score", "max_score", "won", "lost", "objective")
        infos = textworld.EnvInfos(**dict.fromkeys(wanted, True))
        with _quiet():
            self._game = textworld.start(str(game_file), request_infos=infos)
            state = self._game.reset()
        self._goal = goal or short_goal(str(state["objective"] or ""))
        self._max_score = int(state["max_score"] or 1)
        self._score, self._steps, self._history = 0, 0, []
        self._commands = list(state["admissible_commands"] or [])
        body = f"{clean_feedback(str(state['description'] or ''))}\nInventory: {state['inventory'].strip()}"
        return self._render(body)

    def step(self, action: str) -> Observation:
        """Play the command ``action`` names; see the class docstring for rewards and the end."""
        if self._game is None:
            raise ConfigError("step() called before reset(task), or after the game ended; call reset(task) first")
        self._steps += 1
        command = match_command(action, self._commands, cutoff=self.cutoff)
        won = lost = False
        if command is None:
            shown = " ".join(action.split())[:80]
            body = f'Your reply "{shown}" is not one of the valid commands, so nothing happened.'
        else:
            with _quiet():
                state, _, _ = self._game.step(command)
            self._history.append(command)
            self._score = int(state["score"] or 0)
            self._commands = list(state["admissible_commands"] or [])
            won, lost = bool(state["won"]), bool(state["lost"])
            body = f"> {command}\n{clean_feedback(state.feedback)}"
        reward = 1.0 if won else self._score / self._max_score
        done = won or lost or self._steps >= self.max_steps
        info = dict(task_id=self._task_id, command=command, score=self._score, max_score=self._max_score)
        info.update(steps=self._steps, won=won, lost=lost, family="textworld")
        if done:
            text = f"{body}\n{self._verdict(won, lost)}"
            self.close()
        else:
            text = self._render(body)
        return Observation(text=text, reward=reward, done=done, info=info)

    def close(self) -> None:
        """Release the game's interpreter (``reset`` and the end of a game call this too)."""
        if self._game is not None:
            game, self._game = self._game, None
            game.close()

    def __del__(self) -> None:  # an Evolver drops unfinished envs without closing them
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to report to at interpreter exit
            pass

    def _render(self, body: str) -> str:
        """An observation: the goal, what just happened, progress, and the commands to choose from."""
        progress = f"Score {self._score}/{self._max_score}, step {self._steps} of {self.max_steps}."
        if self._history:
            progress += f" Commands so far: {', '.join(self._history)}."
        choices = "\n".join(f"- {command}" for command in self._commands)
        return f"Goal: {self._goal}\n{body}\n{progress}\n{CHOOSE}\n{choices}\n{ANSWER_WITH}"

    def _verdict(self, won: bool, lost: bool) -> str:
        played = ", ".join(self._history) or "none"
        if won:
            return f"You won: the goal is done (score {self._score}/{self._max_score} in {self._steps} steps). Commands: {played}."
        why = "You lost the game" if lost else f"Out of steps ({self.max_steps})"
        return f"{why}: the goal was not reached (score {self._score}/{self._max_score}). Goal: {self._goal} Commands: {played}."


def _game_of(task: Task | Mapping[str, Any] | str | Path) -> tuple[Path, str, str]:
    """(game file, task id, goal) from a Task, a task dict or a game path."""
    if isinstance(task, (str, Path)):
        path = Path(task)
        return _existing(path), path.stem, ""
    if isinstance(task, Task):
        meta, task_id, goal = task.meta, task.id, task.prompt
    elif isinstance(task, Mapping):
        meta, task_id, goal = task.get("meta", {}), str(task.get("id", "")), str(task.get("prompt", ""))
    else:
        raise ConfigError(f"TextWorldEnv.reset expects a Task, a task dict or a game path, got {type(task).__name__}")
    game = meta.get("game_file") if isinstance(meta, Mapping) else None
    if not game:
        raise ConfigError(f"task {task_id!r} has no meta['game_file']; make TextWorld tasks with textworld_tasks()")
    return _existing(Path(game)), task_id, goal


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise ConfigError(f"TextWorld game file {path} does not exist; regenerate it with textworld_tasks()")
    return path


def _import_textworld() -> Any:
    try:
        import textworld
    except ImportError:
        raise ConfigError(f"TextWorldEnv needs the textworld package: {INSTALL_HINT}") from None
    return textworld


@contextmanager
def _quiet() -> Iterator[None]:
    """Hide jericho's warning that it cannot list actions itself: TextWorld's own list is the one we use."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to find valid actions")
        yield
