"""Run specs: a TOML file that names the models, embedder, database, tasks, memory settings and rounds.

```toml
[run]
name = "facility-codes"
rounds = 5
database = "sqlite:///runs/evolve.db"   # any SQLAlchemy URL; default: $EVOLVE_HOME/evolve.db
                                        # (a relative SQLite path is relative to the spec file, like tasks)
executor = "inprocess"                  # or "ray" (workers = 4, ray_address = "auto"): episodes on a cluster

[model]
chat = "local/smollm2"                  # or "openai/gpt-4o-mini" (base_url = "http://127.0.0.1:8000/v1")
max_tokens = 16

[embedder]
name = "minilm"                         # or "hash", "openai/text-embedding-3-small"

[environment]
tasks = "data/facility_codes.jsonl"     # relative to the spec file
paraphrase = true

[optimizer]                             # prompt evolution, gated on validation; kind = "none" turns it off
kind = "textgrad"                       # or "tfgrpo" (Training-Free GRPO's experience library)
critic = "same"                         # or any chat spec: an API model may critique a local one

[memory]
enabled = true
k1 = 10
k2 = 1
lam = 0.5
alpha = 0.3
durability = "normal"                   # or "full": a commit survives a power loss (slower writes)
# recall_log_delay = 0.01               # seconds a recall's log row waits for its group commit (0 under "full")
failure_keeps = "feedback"              # a failure memory keeps the feedback, not the wrong answer
                                        # ("both": the answer too, e.g. for multi-step agents)
consolidate = false                     # true: evolve job distils a strategy per task after each round
draw_from = "both"                      # recall "episodes", "strategies" or "both"

[memory.forget]                         # optional: a budget evolve job prunes each agent's memory to
capacity = 2000                         # removals are logged and undoable: evolve memory history|restore

[marft]                                 # weight updates: LoRA MARFT when success plateaus (local models only)
enabled = false
patience = 2

[team]                                  # optional; default: a chain of the agents in order
topology = "parallel"                   # every member answers alone, then...
aggregate = "vote"                      # ...the majority decides (or "judge" with judge = "<agent>")
debate = false                          # true: one round where each member sees the others' answers first

[[agents]]
name = "solver"
system = "Reply with the code only."
temperature = 0.7                       # optional: this agent's own ([model]'s otherwise)
```
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from connectors import ConfigError
from evolve.envs.bundled import database_folder, spec_file
from evolve.tools.mcp import check_entry  # no mcp import: the SDK loads only to connect
from memory.config import DAY, FailureKeeps, ForgetConfig
from memory.defences.trust import DEFAULT_TRUSTED, check_patterns
from optimizers.order_policy import GROUP_THRESHOLD


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a NaN or inf in a spec is a typo


class RunSection(_Strict):
    # No "@" or "/": a tenant's run is "<run>@<tenant>" and an agent's namespace "<run>/<agent>", so a run
    # named "codes@alice" would be tenant alice's run of "codes".
    name: str = Field("default", pattern=r"^[^@/\x00-\x1f\x7f]+$", max_length=120)  # no control characters either
    rounds: int = Field(5, ge=1)
    database: str | None = None
    batch_size: int = Field(16, ge=1)
    seed: int = 0
    executor: Literal["inprocess", "ray"] = "inprocess"  # "ray": each batch in chunks on a Ray cluster
    workers: int | None = Field(None, ge=1)  # ray: chunks per batch (default: one per CPU of the cluster)
    ray_address: str | None = None  # ray: "auto", "ray://head:10001"; default $RAY_ADDRESS or a local cluster


class ModelSection(_Strict):
    chat: str = "local/smollm2"
    base_url: str | None = None
    api_key_env: str | None = None
    max_tokens: int = Field(32, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    cache: bool = False
    options: dict[str, Any] = Field(default_factory=dict)  # passed to the backend (timeout, batch_size, replies...)


class EmbedderSection(_Strict):
    name: str = "minilm"


class EnvironmentSection(_Strict):
    tasks: str
    paraphrase: bool = True
    max_turns: int = Field(1, ge=1)


class ForgetSection(_Strict):
    """``[memory.forget]``: ``memory.config.ForgetConfig`` with times in days."""

    capacity: int | None = Field(None, ge=1)  # the most memories an agent keeps (None: no cap)
    min_visits: int = Field(3, ge=1)  # rewards before a memory's Q is trusted
    low_q: float = 0.0  # a trusted memory at or below this Q goes first
    stale_after_days: float | None = Field(30.0, ge=0.0)  # untrusted and not recalled this long: stale
    merge_similarity: float | None = Field(None, gt=0.0, le=1.0)  # near-duplicates above this cosine merge
    retention_days: float | None = Field(30.0, ge=0.0)  # how long a removal can be undone
    recall_retention_days: float | None = Field(None, ge=0.0)  # how long a recall stays in the log (None: always)

    def config(self) -> ForgetConfig:
        days = {
            "stale_after_days": "stale_after",
            "retention_days": "retention",
            "recall_retention_days": "recall_retention",
        }
        values = {days.get(k, k): v for k, v in self.model_dump().items()}
        for name in days.values():
            values[name] = None if values[name] is None else values[name] * DAY
        return ForgetConfig(**values)


class MemorySection(_Strict):
    enabled: bool = True
    mode: Literal["q", "similarity"] = "q"
    k1: int = Field(10, ge=1)
    k2: int = Field(5, ge=1)
    delta: float = Field(0.0, ge=-1.0, le=1.0)
    lam: float = Field(0.5, ge=0.0, le=1.0)
    alpha: float = Field(0.3, ge=0.0, le=1.0)
    epsilon: float = Field(0.0, ge=0.0, le=1.0)
    context_q: bool = True  # rank memories by the Q they earned for the task at hand (RetrievalConfig.context_q)
    writer: Literal["cheap", "llm"] = "cheap"
    durability: Literal["normal", "full"] = "normal"  # "full": a commit survives a power loss (SQLite synchronous=FULL)
    recall_log_delay: float | None = Field(None, ge=0.0, le=10.0)  # seconds a recall's log row waits (MemoryConfig)
    failure_keeps: FailureKeeps = "feedback"  # what a failure memory stores of its attempt
    supersede: bool = False  # a newer memory stating another answer supersedes older ones (MemoryConfig.supersede)
    draw_from: Literal["both", "episodes", "strategies"] = "both"  # recall episodes, strategies or both (per agent too)
    consolidate: bool = False  # evolve job distils strategies from each task's episodes after the round
    consolidate_min: int = Field(3, ge=1)  # episodes a task needs before it gets a strategy
    consolidate_with: Literal["rule", "critic"] = "rule"  # "critic": [optimizer] critic writes strategies
    credit_depth: int = Field(0, ge=0, le=8)  # provenance edges a reward travels back (0: off; MemoryConfig)
    credit_decay: float = Field(0.5, ge=0.0, le=1.0)  # γλ: the weight factor per edge
    forget: ForgetSection | None = None  # [memory.forget]: a budget evolve job prunes each agent's memory to
    # What an untrusted writer's memories become (memory.defences.trust): "open" as any other's, "neutral" start at Q_init
    # with no visits, "quarantine" held from every recall until `evolve memory release`. Trusted: fnmatch patterns.
    trust: Literal["open", "neutral", "quarantine"] = "open"
    trusted: list[str] = Field(default_factory=lambda: list(DEFAULT_TRUSTED))

    @field_validator("trusted")
    @classmethod
    def _trusted_patterns(cls, patterns: list[str]) -> list[str]:
        return list(check_patterns(patterns))  # a ConfigError (a ValueError) names the bad pattern


class OptimizerSection(_Strict):
    kind: Literal["none", "textgrad", "tfgrpo"] = "none"
    critic: str = "same"  # "same": the agents' model; else a chat spec such as "openai/gpt-4o-mini"
    critic_base_url: str | None = None
    critic_options: dict[str, Any] = Field(default_factory=dict)  # passed to the critic's backend
    budget: Literal["light", "medium", "heavy"] = "light"
    minibatch: int = Field(4, ge=1)
    group_size: int = Field(5, ge=2)
    temperature: float = Field(0.7, gt=0.0)
    val_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    parent_selection: Literal["best", "pareto"] = "best"
    backward: Literal["auto", "per_call", "whole", "feedback"] = "auto"  # textgrad: "feedback" skips critiques
    edit: Literal["rewrite", "append"] = "rewrite"  # textgrad: "append" adds one instruction per step
    untagged: bool = False  # accept untagged rewrites / lessons without operations JSON (small local critics)
    critic_max_tokens: int = Field(512, ge=16)


class MarftSection(_Strict):
    """Weight updates (LoRA MARFT): ``enabled`` lets the loop escalate when success plateaus."""

    enabled: bool = False  # Evolver(weights=WeightUpdates(...)); `evolve marft SPEC` trains whatever this says
    patience: int = Field(2, ge=1)  # rounds without gain before escalating
    min_gain: float = Field(0.0, ge=0.0)  # the evaluation gain a trained adapter must beat to be kept
    steps: int = Field(8, ge=1)  # PPO iterations per escalation
    batch_size: int = Field(8, ge=1)  # episodes per iteration
    max_new_tokens: int = Field(16, ge=1)
    temperature: float = Field(0.7, gt=0.0)
    lr: float = Field(2e-4, gt=0.0)
    rank: int = Field(8, ge=1)
    eval_episodes: int = Field(40, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)  # other optimizers.marft.Args fields


class AgentSection(_Strict):
    name: str
    system: str = "You are a careful assistant. Reply with the answer only."
    memory: bool = True
    after: list[str] = Field(default_factory=list)
    # MCP servers whose tools the agent may call: commands that speak MCP on stdio, run in the spec's folder
    # ("python tools_server.py --flag"; "python" is Evolve's interpreter), or streamable HTTP URLs.
    mcp: list[str] = Field(default_factory=list)
    draw_from: Literal["both", "episodes", "strategies"] | None = None  # this agent's view ([memory]'s if unset)
    temperature: float | None = Field(None, ge=0.0)  # this agent's sampling temperature ([model]'s if unset)

    @field_validator("mcp")
    @classmethod
    def _mcp_entries(cls, entries: list[str]) -> list[str]:
        if len({e.strip() for e in entries}) != len(entries):
            raise ValueError(f"each MCP server is named once, got {entries}")
        return [check_entry(e) for e in entries]

    # A remote team member: its model is the A2A agent at this URL (another team's `evolve a2a`, or any A2A
    # agent), its bearer key in $a2a_key_env. It remembers on its own side: no local memory unless
    # `memory = true` is written out; the spec's [model] sampling settings are not sent to it.
    a2a: str | None = Field(None, pattern=r"^https?://[^\s/]+(/\S*)?$")
    a2a_key_env: str | None = None

    @model_validator(mode="after")
    def _key_needs_a2a(self) -> AgentSection:
        if self.a2a_key_env is not None and self.a2a is None:
            raise ValueError(f"agent {self.name!r}: a2a_key_env names the key of a remote member (a2a = URL)")
        return self

    @property
    def remembers(self) -> bool:
        """Whether the agent recalls from local memory: ``memory``, which a remote member has only when written out."""
        return self.memory if self.a2a is None or "memory" in self.model_fields_set else False


ORDER_FIELDS = ("order", "order_lr", "order_temperature", "order_group_threshold")


class TeamSection(_Strict):
    """``[team]``: how the agents work together (``evolve.teams``)."""

    # "chain": agents in order (or by `after`), each seeing its predecessors; "parallel": each member answers alone
    topology: Literal["chain", "parallel"] = "chain"
    aggregate: Literal["vote", "judge"] = "vote"  # parallel: the majority's answer, or the judge agent's
    judge: str | None = None  # parallel, aggregate = "judge": the agent that sees every answer and decides
    debate: bool = False  # parallel: one round in which each member sees the team's answers and answers again
    members: list[str] | None = None  # parallel: the agents on the team (default: all but the judge)
    recompose: Literal["off", "validation", "kstar"] = "off"  # re-choose `size` members from all agents each round
    size: int | None = Field(None, ge=1)
    # chain: "fixed" acts in the listed order; "learned" draws an order per task group from priorities learned
    # from rewards (PMAT's Plackett-Luce; evolve.teams.ordered), greedy when served
    order: Literal["fixed", "learned"] = "fixed"
    order_lr: float = Field(0.5, gt=0, le=100)  # the priorities' step size
    order_temperature: float = Field(1.0, gt=0, le=100)  # Plackett-Luce's temperature while learning
    order_group_threshold: float = Field(GROUP_THRESHOLD, gt=0, le=1)  # cosine at which tasks share priorities

    @model_validator(mode="after")
    def _parallel_only(self) -> TeamSection:
        ordering = sorted(f for f in self.model_fields_set if f in ORDER_FIELDS)
        if self.topology == "chain":
            extra = sorted(f for f in self.model_fields_set if f != "topology" and f not in ORDER_FIELDS)
            if extra:
                raise ValueError(f'{", ".join(extra)} apply only to topology = "parallel"')
            tuning = [f for f in ordering if f != "order"]
            if tuning and self.order != "learned":
                raise ValueError(f'{", ".join(tuning)} apply only to order = "learned"')
        elif ordering:
            raise ValueError(f'{", ".join(ordering)} apply only to topology = "chain" (a parallel team has no order)')
        if (self.aggregate == "judge") != (self.judge is not None):
            raise ValueError('aggregate = "judge" needs judge = "<agent name>", and only it takes one')
        if (self.recompose != "off") != (self.size is not None):
            raise ValueError('recompose = "validation" or "kstar" needs size = <members>, and only it takes one')
        return self


class ServeSection(_Strict):
    # "shared": every tenant its own run "<run>@<tenant>" (memory, prompts, ratings) that also recalls the
    #   trained run's memory, read-only, in the same recall; its ratings move only its own ranking.
    # "tenant": the same, without the trained run's memory (every tenant starts empty).
    # "base": every key serves the trained run itself, and ratings reinforce its memory: for one tenant.
    memory: Literal["shared", "tenant", "base"] = "shared"
    # evolve job --tenant T moves T's memories rated at least promote_q over promote_visits rewards into
    # the trained run's memory, where every tenant recalls them ("shared" only).
    promote: bool = False
    promote_q: float = Field(0.5, ge=-1.0, le=1.0)
    promote_visits: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _promote_needs_shared(self) -> ServeSection:
        if self.promote and self.memory != "shared":
            raise ValueError(
                f'promote = true moves tenants\' memories into the shared one: it needs memory = "shared", not {self.memory!r}'
            )
        return self


class RunSpec(_Strict):
    """A whole run, validated. ``path`` (set by ``load_spec``) resolves relative file names."""

    run: RunSection = RunSection()
    model: ModelSection = ModelSection()
    embedder: EmbedderSection = EmbedderSection()
    environment: EnvironmentSection
    memory: MemorySection = MemorySection()
    optimizer: OptimizerSection = OptimizerSection()
    marft: MarftSection = MarftSection()
    serve: ServeSection = ServeSection()
    team: TeamSection = TeamSection()
    agents: list[AgentSection] = Field(default_factory=lambda: [AgentSection(name="solver")])
    path: Path | None = None

    @model_validator(mode="after")
    def _team_names_agents(self) -> RunSpec:
        t, names = self.team, [a.name for a in self.agents]
        if t.topology == "chain":
            if t.order == "learned" and any(a.after for a in self.agents):
                raise ValueError('team: order = "learned" draws the chain\'s order per task; `after` fixes it')
            return self
        unknown = [n for n in [*(t.members or []), *([t.judge] if t.judge else [])] if n not in names]
        if unknown:
            raise ValueError(f"team: {unknown} are not agents of this spec (agents: {names})")
        if t.judge in (t.members or []):
            raise ValueError(f"team: the judge {t.judge!r} cannot also be a member")
        if any(a.after for a in self.agents):
            raise ValueError('team: topology = "parallel" members answer alone; `after` belongs to a chain')
        pool = [n for n in names if n != t.judge]
        if t.size is not None and t.size > len(pool):
            raise ValueError(f"team: size {t.size} is more than the {len(pool)} agents to choose from")
        if t.recompose != "off" and self.optimizer.kind != "none":
            raise ValueError('team: recompose and [optimizer] both change the team between rounds; set kind = "none"')
        return self

    @property
    def members(self) -> list[str]:
        """The agents on the team: every agent of a chain; a parallel team's ``members`` (default: all but
        the judge; with ``recompose``, the first ``size`` of them to start with)."""
        t = self.team
        names = [a.name for a in self.agents if a.name != t.judge]
        chosen = t.members if t.members is not None else names
        return chosen[: t.size] if t.size is not None and t.members is None else chosen

    def resolve(self, name: str) -> Path:
        """A file name from the spec (tasks), relative to the spec file's folder unless absolute."""
        p = Path(name)
        return p if p.is_absolute() or self.path is None else (self.path.parent / p)

    @property
    def shared_run(self) -> str | None:
        """The trained run a tenant's run recalls from too (``[serve] memory = "shared"``), else None."""
        base, at, _ = self.run.name.partition("@")
        return base if at and self.serve.memory == "shared" else None

    def for_tenant(self, tenant: str | None) -> RunSpec:
        """The same spec with the run renamed ``<run>@<tenant>``; None gives the spec unchanged, and so
        does any tenant under ``[serve] memory = "base"`` (every key serves the trained run).

        Everything a run owns is keyed by its name (memory namespaces ``<run>/<agent>``, the prompt
        graph, the round log, the adapters), so a tenant's run shares nothing with another tenant's.
        """
        if tenant is None:
            return self
        check_tenant(tenant)
        if self.serve.memory == "base":
            return self
        name = f"{self.run.name}@{check_tenant(tenant)}"
        return self.model_copy(update={"run": self.run.model_copy(update={"name": name})})


MAX_TENANT = 64
"""With a run name (at most 120) and '@', a tenant's run fits the 200-character run columns."""
TENANT = re.compile(r"[^\W_][\w.-]*")  # letters and digits of any script
# The script mixes Unicode TR39 allows in one identifier ("highly restrictive"); any other mix (a Cyrillic
# "а" in "аlice") is a lookalike of another name.
CJK = frozenset({"CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"})
SCRIPT_MIXES = (CJK | {"LATIN"}, frozenset({"LATIN", "CJK", "HANGUL"}), frozenset({"LATIN", "CJK", "BOPOMOFO"}))


def check_tenant(tenant: object) -> str:
    """A tenant name: 1-64 letters of one script, digits, ``_``, ``.`` or ``-``, starting with a letter or
    digit, in Unicode's composed form (NFC), so that one name is never two tenants and never looks like
    another. Japanese, Korean and Chinese names may mix their scripts with Latin, as Unicode allows.

    Example:
        >>> check_tenant("Zürich-Nordhafen"), check_tenant("東京-ロジスティクス")
        ('Zürich-Nordhafen', '東京-ロジスティクス')
    """
    if isinstance(tenant, str) and len(tenant) <= MAX_TENANT and TENANT.fullmatch(tenant):
        if unicodedata.is_normalized("NFC", tenant) and _one_script(tenant):
            return tenant
    size = f" ({len(tenant)} characters)" if isinstance(tenant, str) else ""
    raise ConfigError(
        f"a tenant name is 1-{MAX_TENANT} letters (of one script, composed: NFC), digits, '_', '.' or '-' "
        f"starting with a letter or digit, got {tenant!r:.80}{size}"
    )


def _one_script(name: str) -> bool:
    """Whether the letters of ``name`` are of one script (by their Unicode names) or of a mix TR39 allows."""
    scripts = {unicodedata.name(c, "?").split(" ")[0] for c in name if c.isalpha()}
    return len(scripts) <= 1 or any(scripts <= mix for mix in SCRIPT_MIXES)


def resolve_database(url: str | None, folder: Path) -> str | None:
    """``url`` with a relative SQLite file path made relative to ``folder`` (the spec file's).

    A spec names its database the way it names its tasks file, so ``evolve run some/dir/spec.toml``
    opens the same database from any working directory. Absolute paths, in-memory SQLite
    (``sqlite://``, ``sqlite:///:memory:``), ``file:`` URIs and server URLs are returned unchanged.

    Example:
        >>> resolve_database("sqlite:///runs/evolve.db", Path("/srv/agent"))
        'sqlite:////srv/agent/runs/evolve.db'
        >>> resolve_database("postgresql+psycopg://evolve@db/runs", Path("/srv/agent"))
        'postgresql+psycopg://evolve@db/runs'
    """
    if url is None or not url.startswith("sqlite"):
        return url
    head, sep, rest = url.partition(":///")
    path, mark, query = rest.partition("?")
    if not sep or path in ("", ":memory:") or path.startswith("file:") or Path(path).is_absolute():
        return url
    return f"{head}:///{folder / path}{mark}{query}"


def load_spec(path: str | Path) -> RunSpec:
    """Read and validate a TOML spec; errors name the file and the offending field.

    Relative file names in the spec (the tasks file, a SQLite database) are relative to the spec file's
    folder: the database is resolved here (``resolve_database``), the tasks file by ``RunSpec.resolve``.
    A path that is no file may name a bundled spec (``facility_codes``, ``data/facility_codes.toml``:
    ``evolve.envs.bundled.spec_file``); an installed bundled spec keeps its database under ``$EVOLVE_HOME``.
    """
    path = spec_file(path)
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); expected a TOML file") from None
    try:
        spec = RunSpec.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"{path}: {problems}") from e
    path = path.resolve()
    run = spec.run.model_copy(update={"database": resolve_database(spec.run.database, database_folder(path))})
    return spec.model_copy(update={"path": path, "run": run})
