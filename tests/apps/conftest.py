"""The live ``evolve serve`` app the server tests share (one per test module)."""

from tests.support.serve import served  # noqa: F401  (the fixture)
