"""Evidence for BFCL multi_turn_base with the local model: the first turn of ``multi_turn_base_0``, played
by SmolLM2-135M through the agent's tool loop on BFCL's live APIs, with tool_choice "auto" and "required".

Run: python -m bench.bfcl_multi_turn_probe > bench/results/bfcl_multi_turn_smollm2.json   (about 2 minutes)
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.bfcl_learning import MULTI_TURN_SYSTEM, MULTI_TURN_TOKENS
from connectors import load_chat
from evolve import Agent, BfclMultiTurnEnv, Team, multi_turn_tasks

TASK = "multi_turn_base_0"


def main() -> list[dict[str, Any]]:
    task = next(t for t in multi_turn_tasks() if t.id == TASK)
    chat = load_chat("local/smollm2")
    out = []
    for choice in ("auto", "required"):
        params = {"max_tokens": MULTI_TURN_TOKENS, "tool_choice": choice}
        agent = Agent("solver", chat, system=MULTI_TURN_SYSTEM, params=params, tool_rounds=3)
        env = BfclMultiTurnEnv()
        request = env.reset(task)
        started = time.time()
        [act] = Team([agent]).act([request], tools=[env.tools()])
        step = act.steps[0]
        out.append({
            "tool_choice": choice,
            "task": task.id,
            "request": request[:200],
            "calls": [f"{r.call.name}({json.dumps(dict(r.call.arguments))}) -> {r.result[:100]}" for r in step.calls],
            "problems": list(step.problems)[:3],
            "said": act.answer[:200],
            "env": env.step(act.answer).text[:200],
            "expected": task.meta["ground_truth"][0],
        })  # fmt: skip
        print(f"{choice}: {time.time() - started:.1f} s", file=sys.stderr)
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return out


if __name__ == "__main__":
    main()
