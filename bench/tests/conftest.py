"""bench's own tests run as the suite's do (``tests/conftest.py``): isolated, offline, no API keys."""

import os

from tests.support.isolation import isolated  # noqa: F401  (autouse: every test here gets it)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
