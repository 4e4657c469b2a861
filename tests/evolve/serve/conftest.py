"""The live ``evolve serve`` app the serving and protocol tests share (one per test module)."""

from tests.support.serve import held, served  # noqa: F401  (the fixtures)
