"""Connectors: the outside world behind small seams — chat models, embedders, databases, environments.

This layer imports no other Evolve package.
"""

from typing import Any

from connectors.chat import ChatClient, ChatModel, ResponseCache, load_chat
from connectors.db import evolve_home, make_engine
from connectors.deprecation import moved
from connectors.embedders import (
    Embedder,
    HashEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
)
from connectors.environment import Environment, Observation
from connectors.errors import (
    ConfigError,
    ConnectorError,
    EvolveError,
    ParseError,
    ProviderTimeout,
    RateLimited,
    StoreError,
)
from connectors.fakes import ReplayChat, ScriptedChat
from connectors.tools import ParsedCalls, Tool, ToolCall, parse_tool_calls
from connectors.types import Completion, Message, Usage

__all__ = [
    "ChatClient",
    "ChatModel",
    "Completion",
    "ConfigError",
    "ConnectorError",
    "Embedder",
    "Environment",
    "EvolveError",
    "HashEmbedder",
    "Message",
    "Observation",
    "OpenAIEmbedder",
    "ParseError",
    "ParsedCalls",
    "ProviderTimeout",
    "RateLimited",
    "ReplayChat",
    "ResponseCache",
    "ScriptedChat",
    "SentenceTransformerEmbedder",
    "StoreError",
    "Tool",
    "ToolCall",
    "Usage",
    "evolve_home",
    "load_chat",
    "load_embedder",
    "make_engine",
    "parse_tool_calls",
]

# Exported before 0.2.0; importable from here, with a DeprecationWarning naming its module, until
# connectors.deprecation's REMOVED_IN.
_MOVED = {"request_key": "connectors.chat"}


def __getattr__(name: str) -> Any:  # PEP 562: only names not defined above get here
    return moved("connectors", name, _MOVED)
