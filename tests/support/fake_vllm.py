"""A stand-in ``vllm`` module for tests on machines without vLLM.

The ``vllm/…`` chat provider and MARFT's ``VLLMEngine`` are checked against what they ask of vLLM:
each test file brings its own ``LLM`` double (what it answers and records differs) and installs it with
``install_fake_vllm``; the request and sampling types are shared here.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


class FakeSamplingParams:
    def __init__(self, **options: Any) -> None:
        self.__dict__.update(options)


class FakeStructuredOutputsParams:
    """vLLM's ``StructuredOutputsParams`` (``json``, ``json_object``, ``grammar``...): what one prompt is held to."""

    def __init__(self, **options: Any) -> None:
        self.__dict__.update(options)


def install_fake_vllm(monkeypatch: pytest.MonkeyPatch, llm: type) -> None:
    """Make ``import vllm`` (and ``vllm.lora.request``, ``vllm.sampling_params``) give the stand-ins, with
    ``llm`` as ``vllm.LLM``."""
    vllm = types.ModuleType("vllm")
    vllm.LLM = llm  # type: ignore[attr-defined]
    vllm.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest  # type: ignore[attr-defined]
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    sampling.StructuredOutputsParams = FakeStructuredOutputsParams  # type: ignore[attr-defined]
    modules = {"vllm": vllm, "vllm.lora": types.ModuleType("vllm.lora"), "vllm.lora.request": request,
               "vllm.sampling_params": sampling}  # fmt: skip
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
