"""Parallel teams: every member answers on its own, then an aggregator decides.

Besides a chain (``evolve.agent.Team``), a team can put n members side by side: each answers the task
independently, with its own prompt, model, sampling and memory, and the team's answer is

- ``aggregate="vote"``: the majority of the members' answers, compared normalised (case, spacing and end
  punctuation ignored); a tie goes to the earlier member, and members that failed or said nothing do not
  vote (``evolve.teams.diversity.majority``);
- ``aggregate="judge"``: a judge agent's, which sees every member's answer (quoted, as a chain's agent sees
  its predecessors') and the task.

``debate=True`` adds one round before the aggregator: each member sees the team's first answers (its own
among them) and answers again, without recalling a second time; the aggregator decides over the second
answers. Memory, prompts and feedback work per member as in a chain: each member's step carries its recall,
so a team reward reinforces the memories every member recalled, and each member's prompts evolve.
Each member is its own draw (its own ``sample_index``, and so its own seed and cache line): copies of one
agent sampled at a temperature above 0 answer independently, as a homogeneous team should.

Example:
    >>> from connectors import load_chat
    >>> members = [Agent(f"m{i}", load_chat("fake/scripted", replies=[r])) for i, r in enumerate(["Paris", "Lyon", "paris."])]
    >>> act = ParallelTeam(members).act(["Capital of France?"])[0]
    >>> act.answer, [s.agent for s in act.steps]
    ('Paris', ['m1', 'm2', 'm0'])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from connectors import ConfigError, ConnectorError, Tool
from evolve.agent import Agent, Team, TeamAct
from evolve.episode import Step, TeamStream
from evolve.teams.diversity import majority

Aggregate = Literal["vote", "judge"]
AGGREGATES = ("vote", "judge")


class ParallelTeam(Team):
    """Members that answer independently and an aggregator (see the module).

    Args:
        members: the agents that answer the task, in the order that breaks a tie.
        aggregate: ``"vote"`` or ``"judge"``.
        judge: the judging agent (``aggregate="judge"`` only).
        debate: one more round in which each member sees the team's answers and answers again.
        workers: threads for backends without batched generation (API models).

    ``sink``, the agent that stands for the team where one agent must (the experience library of
    Training-Free GRPO, a served answer's sampling settings), is the judge, or the first member of a vote.
    The steps of an act put the step whose answer won last (the judge's, or the winning member's).
    """

    def __init__(
        self,
        members: Sequence[Agent],
        *,
        aggregate: Aggregate = "vote",
        judge: Agent | None = None,
        debate: bool = False,
        workers: int = 4,
    ) -> None:
        if aggregate not in AGGREGATES:
            raise ConfigError(f"a parallel team's aggregate is one of {AGGREGATES}, got {aggregate!r}")
        if (aggregate == "judge") != (judge is not None):
            raise ConfigError(
                'a parallel team with aggregate="judge" needs a judge agent, and only that one takes one '
                f"(aggregate={aggregate!r}, judge={None if judge is None else judge.name!r})"
            )
        if not members:
            raise ConfigError("a parallel team needs at least one member")
        self.members = [m.name for m in members]
        self.aggregate: Aggregate = aggregate
        self.judge = judge.name if judge is not None else None
        self.debate = bool(debate)
        agents = [*members, *([judge] if judge is not None else [])]
        super().__init__(agents, [(m, judge.name) for m in self.members] if judge else [], workers=workers)

    def _final_agent(self, names: list[str]) -> str:
        return self.judge if self.judge is not None else self.members[0]

    def answers_task(self, name: str) -> bool:
        return True  # every member answers the task, and so does the judge

    def _with_agents(self, agents: list[Agent]) -> ParallelTeam:
        by_name = {a.name: a for a in agents}
        judge = by_name[self.judge] if self.judge is not None else None
        return ParallelTeam([by_name[m] for m in self.members], aggregate=self.aggregate, judge=judge,
                            debate=self.debate, workers=self.workers)  # fmt: skip

    def _decide(self, *args: Any) -> list[TeamAct]:
        """Every member answers every observation, then the aggregator decides. An observation fails only
        when no member answers it (or the judge fails)."""
        call = _Call(*args)
        n = len(call.observations)
        outputs, steps, failures = self._members(call, recall=True)
        if self.debate:
            everyone = list(self.members)
            again, debate_steps, _ = self._members(call, recall=False, seen=outputs, sees=lambda _: everyone)
            for i in range(n):  # a member that fails the second round keeps its first answer
                outputs[i].update(again[i])
                steps[i].extend(debate_steps[i])
        if self.judge is not None:
            return self._judged(call, outputs, steps, failures)
        acts = []
        for i in range(n):
            won = majority([outputs[i].get(m) for m in self.members])
            if won is None:
                acts.append(self._failed(steps[i], failures[i]))
                continue
            last = max(j for j, s in enumerate(steps[i]) if s.agent == self.members[won])
            ordered = [s for j, s in enumerate(steps[i]) if j != last] + [steps[i][last]]
            acts.append(TeamAct(tuple(ordered), steps[i][last].output, failed=tuple(f for f, _ in failures[i])))
        return acts

    def stream(
        self,
        observation: str,
        *,
        query: str | None = None,
        turn: int = 0,
        sample_index: int = 0,
        params: Mapping[str, Any] | None = None,
        context: str | None = None,
    ) -> TeamStream:
        """``act`` on one observation, its answer sent as one delta: a vote or a judge decides only once
        every member has answered."""
        contexts = None if context is None else [context]
        queries = None if query is None else [query]
        act = self.act([observation], queries=queries, turn=turn, sample_index=sample_index, params=params,
                       contexts=contexts)[0]  # fmt: skip
        return TeamStream.whole(act.steps, act.error, act.cause)

    # -- the rounds ----------------------------------------------------------------------------------
    def _members(
        self, call: _Call, *, recall: bool, seen: list[dict[str, str]] | None = None, sees: Sees | None = None
    ) -> tuple[list[dict[str, str]], list[list[Step]], list[list[Failure]]]:
        """Each member acts alone on every observation (a member's failure is its own); each observation's
        members' outputs, steps and failures. ``seen``: the outputs a member may be shown (``sees``)."""
        n = len(call.observations)
        outputs: list[dict[str, str]] = [{} for _ in range(n)]
        steps: list[list[Step]] = [[] for _ in range(n)]
        failures: list[list[Failure]] = [[] for _ in range(n)]
        for j, name in enumerate(self.members):
            start = [dict(s) for s in seen] if seen is not None else None
            draw = call._replace(sample_index=call.sample_index * len(self.members) + j)  # each member its own draw
            out, st, errors, causes = self._act([name], *draw, start, None, sees=sees, recall=recall)
            for i in range(n):
                error = errors[i]
                if error is not None:
                    failures[i].append((error, causes[i]))
                else:
                    outputs[i][name] = out[i][name]
                    steps[i].extend(st[i])
        return outputs, steps, failures

    def _judged(
        self, call: _Call, outputs: list[dict[str, str]], steps: list[list[Step]], failures: list[list[Failure]]
    ) -> list[TeamAct]:
        """The judge answers every observation some member answered, seeing those members' answers."""
        assert self.judge is not None
        answered = [i for i, out in enumerate(outputs) if any(v.strip() for v in out.values())]
        acts = {i: self._failed(steps[i], failures[i]) for i in range(len(outputs)) if i not in answered}
        if answered:
            out, st, errors, causes = self._act(
                [self.judge], *call.subset(answered), [outputs[i] for i in answered], [list(steps[i]) for i in answered]
            )
            for j, i in enumerate(answered):
                failed = tuple(f for f, _ in failures[i])
                acts[i] = TeamAct(tuple(st[j]), out[j].get(self.judge, ""), errors[j], causes[j], failed)
        return [acts[i] for i in range(len(outputs))]

    def _failed(self, steps: list[Step], failures: list[Failure]) -> TeamAct:
        """No member answered: the members' errors, or that every answer was empty."""
        if failures and len(failures) == len(self.members):
            return TeamAct(tuple(steps), "", "; ".join(f for f, _ in failures), failures[0][1])
        return TeamAct(
            tuple(steps), "", f"no member of the team gave an answer ({len(failures)} failed, the rest said nothing)"
        )


Failure = tuple[str, ConnectorError | None]  # a member's error message and the model's error behind it
Sees = Callable[[str], list[str]]


class _Call(NamedTuple):
    """The arguments of one ``act``, in ``Team._act``'s order."""

    observations: Sequence[str]
    queries: Sequence[str]
    turn: int
    sample_index: int
    params: Mapping[str, Any] | None
    contexts: Sequence[str | None] | None
    tools: Sequence[Sequence[Tool]] | None

    def subset(self, rows: list[int]) -> _Call:
        """The same call for the observations ``rows`` only."""

        def pick(seq: Sequence[Any] | None) -> list[Any] | None:
            return None if seq is None else [seq[i] for i in rows]

        return self._replace(observations=[self.observations[i] for i in rows],
                             queries=[self.queries[i] for i in rows],
                             contexts=pick(self.contexts), tools=pick(self.tools))  # fmt: skip
