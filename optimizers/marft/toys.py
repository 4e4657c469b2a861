"""Toy tasks on which LoRA MARFT must visibly learn: a target token for one agent, a relay for two.

Both follow :class:`ToyTask`: the :class:`~optimizers.marft.rollout.MarftTask` a trainer needs (the
agents in team order, how to draw an episode, what each agent is shown — agent m sees what agents
1..m-1 said — and the team's reward) plus the words a tokenizer must know. Rewards are plain functions of the episode and the decoded
responses; nothing here imports torch.

"The first token" of a response is its first whitespace-separated word: with
:func:`optimizers.marft.tiny.word_tokenizer` every word is one token, so the two agree.

Example:
    >>> import random
    >>> task = RelayTask()
    >>> episode = task.sample(random.Random(0))
    >>> task.prompt(episode, 0, [])
    'secret gold'
    >>> task.prompt(episode, 1, ["up left"])
    'relay up left'
    >>> task.reward(episode, ["up left", "gold"])
    1.0
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from connectors.errors import ConfigError
from optimizers.marft.rollout import MarftTask, S

SECRET_POOL = ("red", "green", "blue", "gold", "pink", "gray", "white", "black")
"""The words a :class:`RelayTask` draws its secrets from (the first ``k`` of them)."""


class ToyTask(MarftTask[S], Protocol[S]):
    """A :class:`~optimizers.marft.rollout.MarftTask` that also names the words of its prompts and
    answers, so a word-level tokenizer (:func:`optimizers.marft.tiny.word_tokenizer`) can cover them."""

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """Every word a prompt can hold or a response needs (for a word-level tokenizer)."""
        ...


def first_word(text: str) -> str | None:
    """The first whitespace-separated word of ``text``, or None for a blank text.

    Example:
        >>> first_word("  star moon"), first_word("")
        ('star', None)
    """
    words = text.split()
    return words[0] if words else None


def _check_index(
    task: str, agents: tuple[str, ...], agent_index: int, previous: Sequence[str], *, any_order: bool = False
) -> None:
    if not 0 <= agent_index < len(agents):
        raise ConfigError(f"{task}: agent_index must be in 0..{len(agents) - 1}, got {agent_index}")
    if any_order and len(previous) < len(agents):
        return
    if len(previous) != agent_index:
        raise ConfigError(
            f"{task}: agent {agent_index} ({agents[agent_index]!r}) must see {agent_index} earlier responses, "
            f"got {len(previous)}"
        )


def _check_responses(task: str, agents: tuple[str, ...], responses: Sequence[str]) -> None:
    if len(responses) != len(agents):
        raise ConfigError(f"{task}: reward needs one response per agent {agents}, got {len(responses)}")


def _check_words(task: str, **groups: Sequence[str]) -> None:
    seen: set[str] = set()
    for name, words in groups.items():
        for word in words:
            if not isinstance(word, str) or len(word.split()) != 1 or word != word.strip():
                raise ConfigError(f"{task}: {name} must be single words, got {word!r}")
            if word in seen:
                raise ConfigError(f"{task}: the word {word!r} appears twice; every word must be distinct")
            seen.add(word)


@dataclass(frozen=True)
class TargetEpisode:
    """One target-token episode: the noise words after "say"."""

    noise: tuple[str, ...]


@dataclass(frozen=True)
class TargetTokenTask:
    """One agent must answer ``target`` as its first token, whatever noise follows "say" in its prompt.

    The prompt is ``"say"`` followed by ``min_noise``..``max_noise`` words drawn from ``noise``;
    the reward is 1.0 when the response starts with ``target``, else 0.0. An untrained (uniform)
    policy starts with the target about ``chance`` of the time (1/8 for the defaults), so a rising
    success rate shows the adapter learned.

    Example:
        >>> task = TargetTokenTask()
        >>> task.prompt(TargetEpisode(("moon", "tree")), 0, [])
        'say moon tree'
        >>> task.reward(TargetEpisode(("moon",)), ["star moon"]), task.reward(TargetEpisode(("moon",)), ["moon"])
        (1.0, 0.0)
    """

    target: str = "star"
    noise: tuple[str, ...] = ("apple", "river", "stone", "cloud", "tree", "moon")
    min_noise: int = 1
    max_noise: int = 3
    agents: tuple[str, ...] = ("speaker",)

    def __post_init__(self) -> None:
        if len(self.agents) != 1:
            raise ConfigError(f"TargetTokenTask is a one-agent task; agents must name one agent, got {self.agents!r}")
        if not self.noise:
            raise ConfigError("TargetTokenTask: noise must hold at least one word")
        if not 0 <= self.min_noise <= self.max_noise:
            raise ConfigError(
                f"TargetTokenTask: need 0 <= min_noise <= max_noise, got {self.min_noise}, {self.max_noise}"
            )
        _check_words("TargetTokenTask", marker=("say",), target=(self.target,), noise=self.noise)

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """``"say"``, the target, then the noise words."""
        return ("say", self.target, *self.noise)

    @property
    def chance(self) -> float:
        """Success rate of a policy that says any vocabulary word uniformly at random."""
        return 1.0 / len(self.vocabulary)

    def sample(self, rng: random.Random) -> TargetEpisode:
        """Noise words, their number uniform in ``min_noise..max_noise``."""
        n = rng.randint(self.min_noise, self.max_noise)
        return TargetEpisode(tuple(rng.choice(self.noise) for _ in range(n)))

    def prompt(self, state: TargetEpisode, agent_index: int, previous: Sequence[str]) -> str:
        """``"say <noise...>"``."""
        _check_index("TargetTokenTask", self.agents, agent_index, previous)
        return " ".join(("say", *state.noise))

    def reward(self, state: TargetEpisode, responses: Sequence[str]) -> float:
        """1.0 when the response's first word is the target, else 0.0."""
        _check_responses("TargetTokenTask", self.agents, responses)
        return 1.0 if first_word(responses[0]) == self.target else 0.0


@dataclass(frozen=True)
class RelayEpisode:
    """One relay episode: the secret the sender sees and the receiver must name."""

    secret: str


@dataclass(frozen=True)
class RelayTask:
    """Two agents pass a secret: the sender sees it, the receiver sees only what the sender said.

    Each episode draws a secret from the first ``k`` words of ``pool``. The sender's prompt is
    ``"secret <word>"``; the receiver's is ``"relay <the sender's response>"`` and nothing else; the
    team scores 1.0 when the receiver's first token is the secret. The sender may repeat the secret or
    invent a code from ``codes``: any protocol the two agree on works.

    Chance, for the defaults (k = 4; vocabulary "secret", "relay", 4 secrets, 4 codes = 10 words,
    14 tokens with the specials): a receiver saying any word uniformly hits the secret 1 time in 10
    (``chance``); a receiver that ignores the sender can reach at most 1/k = 0.25 (``blind_best``), by
    always guessing among the secrets. Only a success rate above ``blind_best`` shows that the two
    agents communicate.

    Example:
        >>> task = RelayTask(k=2)
        >>> task.secrets, task.agents, task.blind_best
        (('red', 'green'), ('sender', 'receiver'), 0.5)
    """

    k: int = 4
    pool: tuple[str, ...] = SECRET_POOL
    codes: tuple[str, ...] = ("up", "down", "left", "right")
    agents: tuple[str, ...] = ("sender", "receiver")
    any_order: bool = False
    """True: the agents may act in any order (a drawn one, ``Args.order = "learned"``); the receiver acting first
    is handed nothing to relay, and the sender acting second ignores what the receiver said."""

    def __post_init__(self) -> None:
        if len(self.agents) != 2:
            raise ConfigError(f"RelayTask is a two-agent task; agents must name two agents, got {self.agents!r}")
        if not 2 <= self.k <= len(self.pool):
            raise ConfigError(f"RelayTask: k must be in 2..{len(self.pool)} (the pool's size), got {self.k}")
        _check_words("RelayTask", markers=("secret", "relay"), pool=self.pool[: self.k], codes=self.codes)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The ``k`` words a secret is drawn from."""
        return self.pool[: self.k]

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """``"secret"``, ``"relay"``, the secrets, then the codes."""
        return ("secret", "relay", *self.secrets, *self.codes)

    @property
    def chance(self) -> float:
        """Success rate of a receiver that says any vocabulary word uniformly at random."""
        return 1.0 / len(self.vocabulary)

    @property
    def blind_best(self) -> float:
        """The best success rate a receiver can reach without listening to the sender: 1/k."""
        return 1.0 / self.k

    def sample(self, rng: random.Random) -> RelayEpisode:
        """A secret, uniform over :attr:`secrets`."""
        return RelayEpisode(rng.choice(self.secrets))

    def prompt(self, state: RelayEpisode, agent_index: int, previous: Sequence[str], acted: Sequence[int] = ()) -> str:
        """``"secret <word>"`` for the sender; ``"relay <sender's response>"`` for the receiver (``acted``: who
        said ``previous``, in a drawn order; the receiver relays only the sender's words)."""
        _check_index("RelayTask", self.agents, agent_index, previous, any_order=self.any_order)
        if agent_index == 0:
            return f"secret {state.secret}"
        said = dict(zip(acted, previous, strict=True)) if acted else dict(enumerate(previous))
        return " ".join(("relay", *(said[0].split() if 0 in said else ())))

    def reward(self, state: RelayEpisode, responses: Sequence[str], order: Sequence[int] = ()) -> float:
        """1.0 when the receiver's first word is the secret, else 0.0."""
        _check_responses("RelayTask", self.agents, responses)
        return 1.0 if first_word(responses[1]) == state.secret else 0.0
