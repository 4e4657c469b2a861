"""``evolve serve`` (the real command, a subprocess on 127.0.0.1) under a bounded concurrent load.

The harness is ``tests.reliability.serve_load``; the benchmark writes the same figures to bench/results/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.serve_load import Request, run_load, summarise

CLIENTS, PER_CLIENT = 8, 25


@pytest.mark.parametrize("servers", [1, 2])
def test_every_request_under_load_is_answered_and_every_feedback_applies_once(tmp_path: Path, servers: int) -> None:
    """One server, or two processes on one SQLite file with feedback sent to the one that did not answer."""
    report = run_load(tmp_path, clients=CLIENTS, per_client=PER_CLIENT, servers=servers)
    s = report["summary"]
    feedbacks = CLIENTS * len(range(0, PER_CLIENT, 3))  # one after every third answer, each sent twice
    assert (s["chat"], s["feedback"]) == (CLIENTS * PER_CLIENT, 2 * feedbacks)
    assert s["requests"] == s["chat"] + s["feedback"] and s["streamed"] == CLIENTS * len(range(1, PER_CLIENT, 4))
    assert s["errors"] == s["unanswered"] == 0, report["failures"]
    assert s["feedback_applied_once"] and s["feedback_not_once"] == 0
    assert s["store_visits"] == s["items_reinforced"] == 2 * feedbacks  # k2 = 2
    assert s["p50_ms"] <= s["p90_ms"] <= s["p99_ms"] <= s["max_ms"] and s["throughput_rps"] > 0
    assert s["server_exit_codes"] == [143] * servers  # SIGTERM: a graceful stop
    print(
        f"\n{servers} server(s), {CLIENTS} clients x {PER_CLIENT}: p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, {s['throughput_rps']} req/s"
    )


def test_the_summary_flags_errors_and_a_feedback_applied_twice() -> None:
    ok = [Request(0, "chat", 200, 5.0), Request(0, "feedback", 200, 3.0, applied=True, reinforced=2)]
    repeat = Request(0, "repeat", 200, 2.0, applied=False)
    assert summarise([*ok, repeat], 1.0, visits=2)["feedback_applied_once"]
    twice = Request(0, "repeat", 200, 2.0, applied=True, reinforced=2)
    assert summarise([*ok, twice], 1.0, visits=4)["feedback_not_once"] == 2  # the repeat, and the visits
    assert not summarise([*ok, repeat], 1.0, visits=4)["feedback_applied_once"]  # the store saw more
    failed = summarise([*ok, repeat, Request(1, "stream", 0, 60_000.0, "ConnectError")], 1.0, visits=2)
    assert (failed["errors"], failed["unanswered"], failed["max_ms"]) == (1, 1, 60_000.0)
