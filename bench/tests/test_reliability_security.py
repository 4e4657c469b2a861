"""The security figures keep the reliability report's contract, and every "got through" figure is 0."""

from __future__ import annotations

from bench.reliability_security import run


def test_the_security_figures_follow_the_contract_and_nothing_got_through() -> None:
    figures = run(quick=True)
    assert set(figures) == {"title", "rows", "notes"} and figures["title"] and "Problems" not in figures["notes"]
    rows = dict(figures["rows"])
    assert all(isinstance(label, str) and isinstance(value, int) for label, value in figures["rows"])
    assert rows["cross-tenant reads attempted (recall, response)"] > 0 and rows["injection payloads"] > 0
    for label in (
        "cross-tenant reads that succeeded",
        "cross-tenant reinforcements that changed Q",
        "crafted tenant names that reached another tenant",
        "payloads that escaped their block",
        "secret occurrences in logs/errors/exports",
    ):
        assert rows[label] == 0, label
