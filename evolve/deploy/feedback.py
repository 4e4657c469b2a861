"""Deprecated: ``evolve.deploy.feedback`` was split: what a rating does at once went to ``evolve.serve.feedback``,
what a job learns from ratings to ``evolve.jobs.served``. Its names still import from here, with a DeprecationWarning
that says where each lives now, until 0.3.0 (``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "evolve.serve.feedback",
    {
        "learn_from_feedback": "evolve.jobs.served",
        "learn_served": "evolve.jobs.served",
        "feedback_traces": "evolve.jobs.served",
        "promote": "evolve.jobs.served",
        "served_writer": "evolve.jobs.served",
        "rating_text": "evolve.jobs.served",
    },
)
