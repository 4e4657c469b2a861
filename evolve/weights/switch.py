"""Weight updates: train one LoRA adapter per agent with MARFT, gate it, record it, serve it.

``train_adapters`` is one escalation, top to bottom:

1. check the team can be trained here (every agent on one local base model, ``weights_blocker``);
2. build ``AgentPolicies`` on that base: one adapter per agent, starting from each agent's HEAD adapter
   when it has one, so escalations build on each other;
3. score the team on fixed evaluation episodes at its serving temperature, train ``steps`` PPO
   iterations on the bundled tasks (``TeamTask``: the prompts the team is served), score again on the
   same episodes;
4. only a gain above ``min_gain`` is kept: every agent's adapter becomes a new version in the
   ``AdapterRegistry`` (so it rolls back like a prompt) with the before/after figures as metrics.

``attach_adapters`` makes each agent's model serve its HEAD adapter (``load_adapter`` of ``LocalChat`` or ``VLLMChat`` under a
versioned name, then ``adapter=`` on every call); an agent rolled back to the base serves the base.

Example:
    >>> settings = WeightUpdates(steps=4, batch_size=8)
    >>> settings.args().steps, settings.args().max_new_tokens
    (4, 16)
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from connectors import ConfigError, evolve_home
from evolve.agent import Team
from evolve.envs.tasks import Task
from evolve.weights.escalation import TeamTask, weights_blocker
from evolve.weights.registry import AdapterRegistry

if TYPE_CHECKING:
    from optimizers.marft.args import Args
    from optimizers.marft.policy import AgentPolicies

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WeightUpdates:
    """When a team escalates to LoRA MARFT, how long it trains, and what a kept adapter must show.

    Args:
        patience: rounds without gain (see ``plateaued``) before the loop escalates by itself.
        min_gain: the least rise of the evaluation success that keeps the trained adapters.
        steps: PPO iterations per escalation.
        batch_size: episodes per iteration.
        max_new_tokens: tokens each agent may say in training rollouts.
        temperature: sampling temperature of the training rollouts.
        lr: Adam learning rate of the adapters (and of the critic).
        rank: LoRA rank of new adapters (alpha is twice the rank).
        eval_episodes: evaluation episodes before and after (the same ones: same tasks, same seed).
        seed: seeds adapters, rollouts and the evaluation episodes.
        root: where adapter versions are stored (default ``$EVOLVE_HOME/adapters``).
        options: any other MARFT ``Args`` field (``advantage``, ``schedule``, ``kl_coef``...).
    """

    patience: int = 2
    min_gain: float = 0.0
    steps: int = 8
    batch_size: int = 8
    max_new_tokens: int = 16
    temperature: float = 0.7
    lr: float = 2e-4
    rank: int = 8
    eval_episodes: int = 40
    seed: int = 0
    root: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.patience < 1 or self.eval_episodes < 1 or self.rank < 1:
            raise ConfigError(
                f"patience, eval_episodes and rank must be >= 1, got {self.patience}, {self.eval_episodes}, {self.rank}"
            )
        self.args()  # MARFT's own checks, now rather than at the first plateau

    def args(self) -> Args:
        """The MARFT ``Args`` of one escalation."""
        from optimizers.marft.args import Args

        known = set(Args.__dataclass_fields__)
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise ConfigError(f"unknown MARFT options {unknown}; expected fields of optimizers.marft.Args")
        base: dict[str, Any] = {"epochs": 1, "minibatches": min(2, self.batch_size), "checkpoint_every": 0}
        return Args(
            **{
                **base,
                **self.options,
                "steps": self.steps,
                "batch_size": self.batch_size,
                "max_new_tokens": self.max_new_tokens,
                "temperature": self.temperature,
                "lr": self.lr,
                "critic_lr": self.lr,
                "seed": self.seed,
            }
        )


@dataclass(frozen=True)
class WeightsReport:
    """What one escalation did: success before and after on the same episodes, and what it kept."""

    before: float
    after: float
    accepted: bool
    versions: dict[str, str]  # agent → the new HEAD adapter version (empty when rejected)
    steps: int
    seconds: float

    @property
    def note(self) -> str:
        verdict = "kept " + ", ".join(f"{a}@{v[:8]}" for a, v in self.versions.items()) if self.accepted else "rejected"
        return f"MARFT {self.steps} steps: eval {self.before:.2f} -> {self.after:.2f}, {verdict}"


def weights_switch(allow_weight_updates: bool | None, weights: WeightUpdates | None) -> WeightUpdates | None:
    """``Evolver``'s one switch: the escalation's settings, or None when weight updates are off.

    ``weights`` is the switch. The flag ``allow_weight_updates`` beside it, the form before 0.2.0, still
    works with a DeprecationWarning until 0.3.0: True turns updates on (``weights`` or the defaults),
    False leaves them off whatever ``weights`` says.

    Example:
        >>> weights_switch(None, WeightUpdates(patience=2)).patience, weights_switch(None, None)
        (2, None)
    """
    if allow_weight_updates is None:
        return weights
    warnings.warn(
        "Evolver(allow_weight_updates=...) is deprecated and stops working in 0.3.0: weights=WeightUpdates(...) "
        "turns weight updates on (weights=None, the default, leaves them off)",
        DeprecationWarning,
        stacklevel=3,  # weights_switch <- Evolver.__init__ <- the caller
    )
    return (weights or WeightUpdates()) if allow_weight_updates else None


def adapter_registry(engine: Any, run: str, settings: WeightUpdates | None = None) -> AdapterRegistry:
    """The run's adapter versions, stored under ``settings.root`` (default ``$EVOLVE_HOME/adapters``)."""
    root = settings.root if settings is not None and settings.root is not None else evolve_home() / "adapters"
    return AdapterRegistry(engine, run, root=root)


def base_folder(team: Team) -> Path:
    """The one local base model every agent runs on.

    Raises:
        ConfigError: an agent runs on an API model, or the agents run on different base models.
    """
    blocker = weights_blocker(team)
    if blocker is not None:
        raise ConfigError(blocker)
    folders = {name: _local_chat(team, name).folder for name in team.order}
    if len(set(folders.values())) != 1:
        raise ConfigError(
            f"MARFT trains one adapter per agent on one base model, but the agents run on {folders}; "
            "give them the same local model"
        )
    return next(iter(folders.values()))


def train_adapters(
    team: Team,
    tasks: Sequence[Task],
    registry: AdapterRegistry,
    settings: WeightUpdates | None = None,
    *,
    progress: bool = True,
    orders: Callable[[Task, bool], Sequence[str]] | None = None,
) -> WeightsReport:
    """One escalation: train, compare on the same evaluation episodes, keep the adapters only if they gain.

    ``orders`` (a team that learns its order: a task and whether to explore → its agents in order) makes the
    rollouts act in orders drawn from the team's own policy and the evaluations in the orders it serves.
    """
    started = time.perf_counter()
    settings = settings or WeightUpdates()
    folder = base_folder(team)
    task = TeamTask.of(team, tasks, any_order=orders is not None)

    def order_of(explore: bool) -> Callable[[Task], Sequence[int]] | None:
        if orders is None:
            return None
        return lambda t: tuple(task.agents.index(a) for a in orders(t, explore))

    policy = _policies(folder, task.agents, settings)
    for agent in task.agents:
        head = registry.head(agent)
        if head is not None:
            policy.load_adapter_state(agent, _adapter_weights(head.path))
    temperature = float(team.agents[team.sink].params.get("temperature") or 0.0)
    before = _evaluate(policy, task, settings, temperature, order_of(False))
    from optimizers.marft.trainer import StepLog, Trainer

    trainer = Trainer(policy, task, settings.args(), order_of=order_of(True))
    with tqdm(total=settings.steps, desc="MARFT", disable=not progress, leave=False) as bar:

        def advance(entry: StepLog) -> None:
            bar.set_postfix(success=f"{entry.success:.2f}")
            bar.update(1)

        trainer.run(on_step=advance)
    after = _evaluate(policy, task, settings, temperature, order_of(False))
    versions: dict[str, str] = {}
    accepted = after > before + settings.min_gain
    if accepted:
        metrics = {"eval_before": before, "eval_after": after, "steps": float(settings.steps)}
        with tempfile.TemporaryDirectory(prefix="evolve-marft-") as tmp:
            saved = policy.save(tmp)
            for agent in task.agents:
                parent = registry.head(agent)
                version = registry.commit(
                    agent,
                    saved / agent,
                    parent=parent.id if parent else None,
                    metrics=metrics,
                    message=f"MARFT {settings.steps} steps: eval {before:.2f} -> {after:.2f}",
                )
                versions[agent] = version.id
    report = WeightsReport(before, after, accepted, versions, settings.steps, round(time.perf_counter() - started, 1))
    log.info("%s", report.note)
    return report


def attach_adapters(team: Team, registry: AdapterRegistry) -> dict[str, str | None]:
    """Make every agent serve its HEAD adapter (None: the bare base); returns agent → version id."""
    served: dict[str, str | None] = {}
    for name in team.order:
        agent = team.agents[name]
        head = registry.head(name)
        params = {k: v for k, v in agent.params.items() if k != "adapter"}
        if head is not None:
            chat = _local_chat(team, name)
            adapter = f"{name}@{head.id}"
            if chat.adapters.get(adapter) != str(head.path):
                chat.load_adapter(adapter, head.path)
            params["adapter"] = adapter
        agent.params = params
        served[name] = head.id if head is not None else None
    return served


def _local_chat(team: Team, name: str) -> Any:
    """The agent's backend that serves adapters (``LocalChat``, ``VLLMChat``: see ``ChatModel``); it loads
    adapters by name and knows its base folder."""
    model = team.agents[name].model
    if not model.serves_adapters:
        raise ConfigError(
            f"agent {name!r} runs on {type(model.backend).__name__}, which takes no LoRA adapters; "
            "weight updates need a local model (LocalChat or VLLMChat)"
        )
    return model.backend


def _policies(folder: Path, agents: Sequence[str], settings: WeightUpdates) -> AgentPolicies:
    from connectors.local_chat import require_local
    from optimizers.marft.policy import AgentPolicies

    require_local("weight updates (LoRA MARFT)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True).eval()
    return AgentPolicies(base, tokenizer, agents, rank=settings.rank, alpha=2 * settings.rank, seed=settings.seed)


def _adapter_weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _evaluate(
    policy: AgentPolicies,
    task: TeamTask,
    settings: WeightUpdates,
    temperature: float,
    order_of: Callable[[Task], Sequence[int]] | None = None,
) -> float:
    from optimizers.marft.trainer import evaluate

    return evaluate(
        policy,
        task,
        episodes=settings.eval_episodes,
        seed=1_000_003 + settings.seed,
        temperature=temperature,
        max_new_tokens=settings.max_new_tokens,
        order_of=order_of,
    )


__all__ = [
    "WeightUpdates",
    "WeightsReport",
    "adapter_registry",
    "attach_adapters",
    "base_folder",
    "train_adapters",
    "weights_switch",
]
