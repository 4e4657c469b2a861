"""The folder format of a team's adapters, and copying LoRA weights exactly.

A saved team is a folder: ``<folder>/<adapter>/`` holds one peft adapter folder per adapter (the
agents, then ``"critic"``), loadable by peft, LocalChat and vLLM; ``value_head.safetensors`` holds the
critic's value head; ``policies.json`` (the manifest: agents, critic, rank, alpha, target modules) is
written last, so a folder with a manifest holds a whole team.

Weights are keyed as peft saves them (``...q_proj.lora_A.weight``, without the adapter name), plus
``value_head.weight`` / ``value_head.bias`` for the critic. This module knows the folder, not the
policies: :meth:`~optimizers.marft.policy.AgentPolicies.save`, ``load`` and ``load_adapter_state``
hand it plain weights and read plain weights back.

torch, safetensors and peft are imported when a function runs, never when this module is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor, nn

CRITIC = "critic"
MANIFEST = "policies.json"
WEIGHTS = "adapter_model.safetensors"
VALUE_HEAD = "value_head.safetensors"
HEAD_PREFIX = "value_head."


def lora_parameters(model: Any, adapter: str) -> dict[str, nn.Parameter]:
    """An adapter's LoRA weights keyed as peft saves them: ``...q_proj.lora_A.<adapter>.weight`` →
    ``...q_proj.lora_A.weight``."""
    found = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        if len(parts) >= 3 and parts[-2] == adapter and parts[-3].startswith("lora_"):
            found[".".join(parts[:-2] + parts[-1:])] = p
    return found


def copy_state(targets: Mapping[str, nn.Parameter], state: Mapping[str, Tensor], *, what: str) -> None:
    """Overwrite ``targets`` with ``state`` exactly (cast to each target's device and dtype).

    Raises:
        ConfigError: the keys or shapes differ; ``what`` names the adapter and its shape in the message.
    """
    import torch

    missing, unexpected = sorted(set(targets) - set(state)), sorted(set(state) - set(targets))
    wrong = [k for k in set(targets) & set(state) if tuple(state[k].shape) != tuple(targets[k].shape)]
    if missing or unexpected or wrong:
        raise ConfigError(
            f"{what}: missing {missing[:3]}, unexpected {unexpected[:3]}, wrong shape {sorted(wrong)[:3]}"
        )
    with torch.no_grad():
        for key, p in targets.items():
            p.copy_(state[key].to(device=p.device, dtype=p.dtype))


def save(
    folder: str | Path,
    states: Mapping[str, Mapping[str, Tensor]],
    configs: Mapping[str, Any],
    manifest: Mapping[str, Any],
) -> Path:
    """Write each adapter's ``states[name]`` as a peft folder ``<folder>/<name>/`` with its peft
    ``configs[name]``, the critic's ``value_head.*`` weights beside them, then ``manifest``."""
    from safetensors.torch import save_file

    root = Path(folder)
    for name, weights in states.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        state = {k: v.contiguous() for k, v in weights.items()}
        head = {k.removeprefix(HEAD_PREFIX): state.pop(k) for k in list(state) if k.startswith(HEAD_PREFIX)}
        save_file(state, str(root / name / WEIGHTS), metadata={"format": "pt"})
        configs[name].save_pretrained(str(root / name))
        if head:
            save_file(head, str(root / VALUE_HEAD), metadata={"format": "pt"})
    (root / MANIFEST).write_text(json.dumps(dict(manifest), indent=2), encoding="utf-8")
    return root


def load(folder: str | Path, manifest: Mapping[str, Any], adapters: Sequence[str]) -> dict[str, dict[str, Tensor]]:
    """Every adapter's weights from :func:`save`'s folder (the critic's with its ``value_head.*``),
    once the folder's manifest is the expected ``manifest``.

    Raises:
        ConfigError: no saved team there, or one with other agents, rank, targets or critic.
    """
    from safetensors.torch import load_file

    root = Path(folder)
    try:
        saved = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"AgentPolicies.load: {root} holds no readable {MANIFEST} (see save): {e}") from e
    if saved != dict(manifest):
        raise ConfigError(f"AgentPolicies.load: {root} holds {saved}, but these policies are {dict(manifest)}")
    states = {}
    for name in adapters:
        state = load_file(str(root / name / WEIGHTS))
        if name == CRITIC:
            state.update({f"{HEAD_PREFIX}{k}": v for k, v in load_file(str(root / VALUE_HEAD)).items()})
        states[name] = state
    return states
