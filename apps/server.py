"""Deprecated: ``apps.server`` moved to ``evolve.serve.protocols.openai_http`` (``create_app``; its request bodies
in ``evolve.serve.protocols.openai_requests``, the keys in ``evolve.serve.protocols.keys``). Its names still
import from here, with a DeprecationWarning that says where each lives now, until 0.3.0
(``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "evolve.serve.protocols.openai_http",
    {
        "ApiError": "evolve.serve.protocols.openai_requests",
        "ChatRequest": "evolve.serve.protocols.openai_requests",
        "FeedbackRequest": "evolve.serve.protocols.openai_requests",
        "check_keys": "evolve.serve.protocols.keys",
        "tenant_for": "evolve.serve.protocols.keys",
        "split_words": "connectors.streaming",
        "Answer": "evolve.serve.answers",
        "UnknownResponse": "evolve.serve.answers",
        "Deployment": "evolve.serve.deployment",
        "AnswerStream": "evolve.serve.streaming",
        "relay": "evolve.serve.protocols.sse",
    },
)
