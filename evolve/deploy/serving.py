"""Deprecated: ``evolve.deploy.serving`` moved to ``evolve.serve.deployment`` (``Deployment``; its answers, ratings
and rows in the modules beside it). Its names still import from here, with a DeprecationWarning that says where
each lives now, until 0.3.0 (``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "evolve.serve.deployment",
    {
        "Answer": "evolve.serve.answers",
        "UnknownResponse": "evolve.serve.answers",
        "response_row": "evolve.serve.answers",
        "FeedbackReceipt": "evolve.serve.feedback",
        "check_score": "evolve.serve.feedback",
        "QuarantinedRating": "evolve.serve.responses",
        "feedback_rows": "evolve.serve.responses",
        "responses": "evolve.serve.responses",
        "conversation": "evolve.serve.chat_requests",
        "REQUEST_PARAMS": "evolve.serve.chat_requests",
    },
)
